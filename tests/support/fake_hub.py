"""A local stand-in for the Hugging Face Hub on 127.0.0.1, speaking what huggingface_hub asks.

Three servers, like the real hub, its CDN and its Xet storage (separate origins, so
huggingface_hub does not follow the redirect on HEAD and does not send the token to the CDN):

hub
  ``HEAD|GET /{org}/{repo}/resolve/{revision}/{file}``: 302 to the CDN with ``X-Repo-Commit``,
  ``X-Linked-Etag`` (the LFS sha256), ``X-Linked-Size`` and ``ETag`` (404 with
  ``X-Error-Code: EntryNotFound`` for an unknown file);
  ``POST /api/models/{org}/{repo}/paths-info/{revision}`` (form ``paths=...``): file entries with
  ``lfs: {oid, size, pointerSize}``;
  ``GET /api/models/{org}/{repo}[/revision/{revision}]``: model info with ``siblings``.
cdn
  ``GET /cdn/{sha256}``: the bytes, honouring ``Range: bytes=S-`` and ``bytes=S-E`` with 206 and
  ``Content-Range`` (an end past the file is its end; 416 from the file's size on), as the
  Hub's CDN does.
cas
  the Xet side of a file added with ``xet=True`` (see below).

Faults: :meth:`FakeHub.corrupt` serves other bytes than the metadata describes (from the CDN and
from the CAS alike); :meth:`FakeHub.cut_next_download` drops the next CDN response after some
bytes and then answers 503 everywhere until :meth:`FakeHub.restore` (a connection lost
mid-download); :attr:`FakeHub.rate` paces the CDN's bodies (a slow link, for a download watched
or interrupted part way); :meth:`FakeHub.fail_xorbs` makes the CAS answer every xorb ``GET`` with an error
status until :meth:`FakeHub.restore`.

Access: with :attr:`FakeHub.token` set, the hub answers 401 to a request without that token
(a gated or private repository asked for anonymously, or a revoked token); a request with
:attr:`FakeHub.token_without_access` gets 403 (a token the hub knows, with no access to the
repository).

Xet-backed files (``add_file(..., xet=True)``) are served the way the real Hub serves them to
huggingface_hub 2.4 and hf_xet 1.8, so that the real hf_xet client downloads them:

- the resolve response also carries ``X-Xet-Hash: <file hash>`` and ``Link: <token route>;
  rel="xet-auth", <reconstruction url>; rel="xet-reconstruction-info"``
  (``huggingface_hub/utils/_xet.py`` ``parse_xet_file_data_from_response``), still with the
  302 to the CDN, which serves the whole file to a client without hf_xet;
- ``GET /api/models/{org}/{repo}/xet-read-token/{revision}`` on the hub answers with the
  headers huggingface_hub reads (``X-Xet-Cas-Url``, ``X-Xet-Access-Token``,
  ``X-Xet-Token-Expiration``: ``_xet.py`` ``parse_xet_connection_info_from_headers``) and the
  JSON hf_xet reads when it refreshes the token itself (``casUrl``, ``accessToken``, ``exp``:
  xet-core ``xet_client/src/hub_client/types.rs`` ``CasJWTInfo``);
- the CAS answers ``GET /v2/reconstructions/{file hash}`` and ``GET /v1/reconstructions/{file
  hash}`` (hf_xet asks v2 first and falls back to v1 on 404: xet-core
  ``xet_client/src/cas_client/remote_client.rs`` ``get_reconstruction_with_version_override``),
  each with ``Authorization: Bearer <access token>`` and a ``Range: bytes=S-E`` of file bytes
  (416 past the end), with the JSON of ``xet_client/src/cas_types/mod.rs``
  (``QueryReconstructionResponseV2``: ``offset_into_first_range``, ``terms`` of ``{hash,
  unpacked_length, range: {start, end}}``, ``xorbs`` of ``{hash: [{url, ranges: [{chunks,
  bytes}]}]}``; v1 has ``fetch_info`` of ``{hash: [{range, url, url_range}]}`` instead);
- ``GET /xorbs/default/{xorb hash}`` on the CAS (the presigned storage URL of the real one)
  serves a xorb's bytes for the exact ``Range: bytes=S-E`` the reconstruction gave, without the
  token.

A file is split into chunks of :data:`XET_CHUNK` bytes, spread over at least two xorbs when it
has two chunks or more. A xorb is its chunks one after another, each an 8-byte header (version
0, compressed length in 3 bytes little-endian, compression scheme 0 = none, uncompressed length
in 3 bytes) and the bytes (xet-core ``xet_core_structures/src/xorb_object/xorb_chunk_format.rs``
``XorbChunkHeader``); the real footer, with chunk hashes, is never fetched by a download.

hf_xet checks no hash when it downloads: it trusts the terms and chunk headers, and the file
hash is only a name to ask the CAS for. So the file and xorb hashes here are any 64 hex digits
(sha256 of the bytes with a label), not xet's keyed-blake3 merkle hashes; whatever checks a
Xet download's content (ojai's sha256 against the LFS value) is on its own.

Use the ``fake_hub`` fixture: it starts both servers, points ``HF_ENDPOINT`` at the hub and
clears ``HF_TOKEN`` and ``HF_HUB_OFFLINE``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

try:
    import pytest
except ImportError:  # run as a server in a test guest (tests/support/vm_ojai.py), no pytest there
    pytest = None
from support.http_stand_in import Served, StandInHandler, start  # noqa: E402 - after the fallback

COMMIT = "5d3c0e4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d"
#: bytes per Xet chunk (the real chunker aims at 64 KiB, at most 128 KiB)
XET_CHUNK = 64 << 10
#: chunks per xorb, at most (fewer, so that a file of two chunks or more spans two xorbs)
XET_CHUNKS_PER_XORB = 4
#: the CAS access token the xet-read-token route hands out
XET_ACCESS_TOKEN = "xet_fake_access_token"


@dataclass
class HubFile:
    data: bytes
    body: bytes  # what the CDN sends; differs from ``data`` when corrupted
    xet: bool = False  # also served through Xet (the CAS)

    # computed once: the real hub does not hash a file for every request
    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @cached_property
    def git_oid(self) -> str:
        return hashlib.sha1(self.data).hexdigest()

    @cached_property
    def xet_hash(self) -> str:
        """The file's Xet hash as the hub publishes it (of ``data``, not of a corrupted body)."""
        return hashlib.sha256(b"xet file\0" + self.data).hexdigest()


@dataclass(frozen=True)
class Xorb:
    hash: str
    blob: bytes  # serialized chunks
    chunk_offsets: tuple[int, ...]  # byte offset of each chunk's header in ``blob``, then its length
    chunk_sizes: tuple[int, ...]  # uncompressed


@dataclass(frozen=True)
class XetLayout:
    """How the CAS stores a body: consecutive runs of chunks in xorbs, in file order."""

    xorbs: tuple[Xorb, ...]

    @classmethod
    def of(cls, body: bytes) -> XetLayout:
        chunks = [body[i:i + XET_CHUNK] for i in range(0, len(body), XET_CHUNK)]
        per_xorb = min(XET_CHUNKS_PER_XORB, max(1, -(-len(chunks) // 2)))
        xorbs = []
        for first in range(0, len(chunks), per_xorb):
            blob, offsets = bytearray(), [0]
            for chunk in chunks[first:first + per_xorb]:
                blob += _chunk_header(len(chunk)) + chunk
                offsets.append(len(blob))
            xorbs.append(Xorb(hash=hashlib.sha256(b"xorb\0" + blob).hexdigest(), blob=bytes(blob),
                              chunk_offsets=tuple(offsets),
                              chunk_sizes=tuple(len(c) for c in chunks[first:first + per_xorb])))
        return cls(tuple(xorbs))

    @property
    def size(self) -> int:
        return sum(sum(x.chunk_sizes) for x in self.xorbs)

    def terms(self, start: int, end: int) -> tuple[int, list[tuple[Xorb, int, int, int]]]:
        """The file bytes ``[start, end)`` as ``(offset into the first chunk, [(xorb, first
        chunk, end chunk, unpacked length)])``: whole chunks, as the CAS answers."""
        terms, pos, offset = [], 0, 0
        for xorb in self.xorbs:
            first = last = None
            unpacked = 0
            for i, size in enumerate(xorb.chunk_sizes):
                if pos + size > start and pos < end:
                    if first is None and not terms:
                        offset = start - pos
                    first = i if first is None else first
                    last = i
                    unpacked += size
                pos += size
            if first is not None:
                terms.append((xorb, first, last + 1, unpacked))
        return offset, terms


def _chunk_header(length: int) -> bytes:
    """Version 0, compressed length, scheme 0 (none), uncompressed length; lengths in 3 bytes LE."""
    size = length.to_bytes(3, "little")
    return bytes([0]) + size + bytes([0]) + size


@dataclass(frozen=True)
class Request:
    server: str  # "hub", "cdn" or "cas"
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case


class FakeHub:
    """Files by (repo_id, filename), the requests received, and fault switches."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], HubFile] = {}
        self.requests: list[Request] = []
        #: when set, requests to the hub without ``Authorization: Bearer <token>`` get 401
        self.token: str | None = None
        #: a token the hub knows but that has no access to its repositories (a gated repo
        #: whose terms its owner has not accepted, a private repo of another account): the
        #: hub's requests carrying it get 403, as the real hub answers them
        self.token_without_access: str | None = None
        self._cut_after: int | None = None
        #: bytes a second the CDN sends a body at (None: as fast as it can), for a download a
        #: test watches or interrupts part way
        self.rate: int | None = None
        self._down = False
        self._xorb_status: int | None = None
        #: serve ``/v2/reconstructions``; when False it answers 404 and hf_xet falls back to v1
        self.xet_v2 = True
        #: seconds a CAS access token is valid; hf_xet asks the token route for a new one when
        #: less than 30 are left (xet-core ``xet_client/src/cas_client/auth.rs``)
        self.xet_token_lifetime = 3600
        self._layouts: dict[bytes, XetLayout] = {}
        self._lock = threading.Lock()
        self._servers: list[Served] = []
        self.url = ""
        self.cdn_url = ""
        self.cas_url = ""

    # -- content ---------------------------------------------------------------------------
    def add_file(self, repo_id: str, filename: str, data: bytes, *, xet: bool = False) -> HubFile:
        """Publish ``data``; with ``xet`` the hub also offers it through Xet, as it does for
        files stored on Xet (most large files on the real hub)."""
        entry = HubFile(data=data, body=data, xet=xet)
        self.files[(repo_id, filename)] = entry
        return entry

    def add_path(self, repo_id: str, filename: str, path: Path, *, xet: bool = False) -> HubFile:
        return self.add_file(repo_id, filename, path.read_bytes(), xet=xet)

    def corrupt(self, repo_id: str, filename: str) -> None:
        """Serve bytes that differ from the published sha256 (same length)."""
        entry = self.files[(repo_id, filename)]
        middle = len(entry.data) // 2
        entry.body = entry.data[:middle] + bytes([entry.data[middle] ^ 0xFF]) + entry.data[middle + 1:]

    def cut_next_download(self, after: int) -> None:
        """Send only ``after`` bytes of the next CDN body, then be unreachable (503)."""
        self._cut_after = after

    def fail_xorbs(self, status: int = 500) -> None:
        """Answer every xorb ``GET`` on the CAS with ``status`` (storage failing), until
        :meth:`restore`; reconstruction queries still answer."""
        self._xorb_status = status

    def restore(self) -> None:
        self._down = False
        self._xorb_status = None

    def requests_to(self, server: str | None = None, method: str | None = None) -> list[Request]:
        return [r for r in self.requests
                if (server is None or r.server == server) and (method is None or r.method == method)]

    # -- serving ---------------------------------------------------------------------------
    def start(self, hub_port: int = 0, cdn_port: int = 0, cas_port: int = 0) -> None:
        """The three servers on 127.0.0.1, on the given ports (0: any free one)."""
        hub = self._serve("hub", hub_port)
        cdn = self._serve("cdn", cdn_port)
        cas = self._serve("cas", cas_port)
        self.url, self.cdn_url, self.cas_url = hub.url, cdn.url, cas.url

    def stop(self) -> None:
        for served in self._servers:
            served.stop()
        self._servers.clear()

    def _serve(self, role: str, port: int = 0) -> Served:
        served = start(_make_handler(self, role), port=port, name=f"fake-hub-{role}")
        self._servers.append(served)
        return served

    def _find(self, repo_id: str, revision: str, filename: str) -> HubFile | None:
        if revision not in ("main", COMMIT):
            return None
        return self.files.get((repo_id, filename))

    def layout(self, entry: HubFile) -> XetLayout:
        """The CAS's chunks and xorbs of ``entry.body`` (so a corrupted body is what it serves)."""
        with self._lock:
            layout = self._layouts.get(entry.body)
            if layout is None:
                layout = self._layouts[entry.body] = XetLayout.of(entry.body)
            return layout

    def _xet_file(self, xet_hash: str) -> HubFile | None:
        return next((f for f in self.files.values() if f.xet and f.xet_hash == xet_hash), None)

    def _xorb(self, xorb_hash: str) -> Xorb | None:
        for entry in list(self.files.values()):
            if entry.xet:
                for xorb in self.layout(entry).xorbs:
                    if xorb.hash == xorb_hash:
                        return xorb
        return None

    def _siblings(self, repo_id: str) -> list[dict[str, object]]:
        return [{"rfilename": name, "size": len(f.data), "blobId": f.git_oid,
                 "lfs": {"sha256": f.sha256, "size": len(f.data), "pointerSize": 134}}
                for (repo, name), f in sorted(self.files.items()) if repo == repo_id]


def _make_handler(hub: FakeHub, role: str) -> type[StandInHandler]:  # noqa: C901
    class Handler(StandInHandler):
        def _record(self) -> bool:
            """Log the request; False when it was answered already (hub down, no token or
            one without access)."""
            with hub._lock:
                hub.requests.append(Request(role, self.command, self.path,
                                            {k.lower(): v for k, v in self.headers.items()}))
                down = hub._down
            if down:
                self._reply(503, b"unavailable", {"Content-Type": "text/plain"})
                return False
            if role == "hub" and hub.token_without_access and \
                    self.headers.get("Authorization") == f"Bearer {hub.token_without_access}":
                self._reply(403, b'{"error":"Access to this repository is restricted"}',
                            {"X-Error-Code": "GatedRepo", "Content-Type": "application/json"})
                return False
            if role == "hub" and hub.token and self.headers.get("Authorization") != f"Bearer {hub.token}":
                self._reply(401, b'{"error":"Invalid credentials"}', {"Content-Type": "application/json"})
                return False
            return True

        def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, payload: object) -> None:
            self._reply(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})

        def do_HEAD(self) -> None:
            self._dispatch()

        def do_GET(self) -> None:
            self._dispatch()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._body = self.rfile.read(length)
            self._dispatch()

        def _dispatch(self) -> None:
            if not self._record():
                return
            parts = [unquote(p) for p in urlsplit(self.path).path.split("/")[1:]]
            if role == "cdn":
                return self._cdn(parts)
            if role == "cas":
                return self._cas(parts)
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]))
            if parts[:1] == ["api"] and len(parts) >= 4 and parts[1] == "models":
                repo_id = f"{parts[2]}/{parts[3]}"
                if len(parts) >= 6 and parts[4] == "paths-info" and self.command == "POST":
                    return self._paths_info(repo_id, parts[5])
                if len(parts) == 6 and parts[4] == "xet-read-token" and self.command == "GET":
                    return self._xet_token(repo_id, parts[5])
                if len(parts) == 4 or (len(parts) == 6 and parts[4] == "revision"):
                    return self._model_info(repo_id, parts[5] if len(parts) == 6 else "main")
            self._reply(404, b"not found", {"Content-Type": "text/plain"})

        def _resolve(self, repo_id: str, revision: str, filename: str) -> None:
            entry = hub._find(repo_id, revision, filename)
            if entry is None:
                self._reply(404, b"Entry not found",
                            {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
                return
            headers = {
                "Location": f"{hub.cdn_url}/cdn/{entry.sha256}?name={filename}",
                "X-Repo-Commit": COMMIT,
                "ETag": f'"{entry.git_oid}"',
                "X-Linked-Etag": f'"{entry.sha256}"',
                "X-Linked-Size": str(len(entry.data)),
            }
            if entry.xet:
                headers["X-Xet-Hash"] = entry.xet_hash
                headers["Link"] = (
                    f'<{hub.url}/api/models/{repo_id}/xet-read-token/{COMMIT}>; rel="xet-auth", '
                    f'<{hub.cas_url}/v1/reconstructions/{entry.xet_hash}>; rel="xet-reconstruction-info"')
            self._reply(302, b"", headers)

        def _xet_token(self, repo_id: str, revision: str) -> None:
            if revision not in ("main", COMMIT) or not any(repo == repo_id for repo, _ in hub.files):
                self._reply(404, b'{"error":"Repository not found"}',
                            {"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"})
                return
            expires = int(time.time()) + hub.xet_token_lifetime
            body = json.dumps({"casUrl": hub.cas_url, "accessToken": XET_ACCESS_TOKEN, "exp": expires})
            self._reply(200, body.encode(), {
                "Content-Type": "application/json", "X-Xet-Cas-Url": hub.cas_url,
                "X-Xet-Access-Token": XET_ACCESS_TOKEN, "X-Xet-Token-Expiration": str(expires)})

        def _paths_info(self, repo_id: str, revision: str) -> None:
            form = parse_qs(self._body.decode())
            found = []
            for name in form.get("paths", []):
                entry = hub._find(repo_id, revision, name)
                if entry is not None:
                    found.append({"type": "file", "path": name, "size": len(entry.data), "oid": entry.git_oid,
                                  "lfs": {"oid": entry.sha256, "size": len(entry.data), "pointerSize": 134},
                                  **({"xetHash": entry.xet_hash} if entry.xet else {})})
            self._json(found)

        def _model_info(self, repo_id: str, revision: str = "main") -> None:
            if revision not in ("main", COMMIT):
                self._reply(404, b'{"error":"Invalid rev id"}',
                            {"X-Error-Code": "RevisionNotFound", "Content-Type": "application/json"})
                return
            if not any(repo == repo_id for repo, _ in hub.files):
                self._reply(404, b'{"error":"Repository not found"}',
                            {"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"})
                return
            self._json({"id": repo_id, "modelId": repo_id, "sha": COMMIT, "private": False,
                        "siblings": hub._siblings(repo_id)})

        def _cdn(self, parts: list[str]) -> None:
            entry = next((f for f in hub.files.values() if parts == ["cdn", f.sha256]), None)
            if entry is None or self.command != "GET":
                self._reply(404, b"no such object", {"Content-Type": "text/plain"})
                return
            body, total = entry.body, len(entry.body)
            start, status, headers = 0, 200, {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
            end = total  # exclusive
            range_header = self.headers.get("Range")
            if range_header and range_header.startswith("bytes="):
                # as the Hub's CDN answers: ``bytes=S-`` and ``bytes=S-E`` (E past the end is
                # the end), 206 with Content-Range; 416 with ``bytes */size`` from S = size on
                first, _, last = range_header[len("bytes="):].partition("-")
                start = int(first)
                end = min(total, int(last) + 1) if last else total
                if start >= total:
                    self._reply(416, b"", {"Content-Range": f"bytes */{total}"})
                    return
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end - 1}/{total}"
            with hub._lock:
                cut, hub._cut_after = hub._cut_after, None
                if cut is not None:
                    hub._down = True
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(end - start))
            self.end_headers()
            view = memoryview(body)  # no copy of a large body per request
            if cut is None and hub.rate:
                step = 64 << 10
                try:
                    for at in range(start, end, step):
                        self.wfile.write(view[at:min(end, at + step)])
                        self.wfile.flush()
                        time.sleep(min(step, end - at) / hub.rate)
                except (BrokenPipeError, ConnectionResetError):  # the client stopped reading
                    self.close_connection = True
                return
            if cut is None:
                self.wfile.write(view[start:end])
                return
            self.wfile.write(view[start:min(end, start + cut)])
            self.wfile.flush()
            self.close_connection = True

        # -- the Xet CAS ---------------------------------------------------------------------
        def _cas(self, parts: list[str]) -> None:
            if len(parts) == 3 and parts[1] == "reconstructions" and parts[0] in ("v1", "v2") \
                    and self.command == "GET":
                return self._reconstruction(parts[0], parts[2])
            if len(parts) == 3 and parts[:2] == ["xorbs", "default"] and self.command == "GET":
                return self._xorb_bytes(parts[2])
            self._reply(404, b"not found", {"Content-Type": "text/plain"})

        def _reconstruction(self, version: str, xet_hash: str) -> None:
            if self.headers.get("Authorization") != f"Bearer {XET_ACCESS_TOKEN}":
                self._reply(401, b"missing or wrong CAS token", {"Content-Type": "text/plain"})
                return
            if version == "v2" and not hub.xet_v2:
                self._reply(404, b"not found", {"Content-Type": "text/plain"})
                return
            entry = hub._xet_file(xet_hash)
            if entry is None:
                self._reply(404, b"no such file", {"Content-Type": "text/plain"})
                return
            layout = hub.layout(entry)
            start, end = 0, layout.size  # end exclusive
            range_header = self.headers.get("Range")
            if range_header:
                first, _, last = range_header.removeprefix("bytes=").partition("-")
                start = int(first)
                end = min(end, int(last) + 1) if last else end
            if start >= layout.size:
                self._reply(416, b"Range not satisfiable", {"Content-Type": "text/plain"})
                return
            offset, terms = layout.terms(start, end)
            fetch: dict[str, list[dict[str, object]]] = {}
            for xorb, first_chunk, end_chunk, _ in terms:
                chunks = {"start": first_chunk, "end": end_chunk}
                span = {"start": xorb.chunk_offsets[first_chunk], "end": xorb.chunk_offsets[end_chunk] - 1}
                url = f"{hub.cas_url}/xorbs/default/{xorb.hash}"
                fetch.setdefault(xorb.hash, []).append(
                    {"url": url, "ranges": [{"chunks": chunks, "bytes": span}]} if version == "v2"
                    else {"range": chunks, "url": url, "url_range": span})
            self._json({"offset_into_first_range": offset,
                        "terms": [{"hash": xorb.hash, "unpacked_length": unpacked,
                                   "range": {"start": first_chunk, "end": end_chunk}}
                                  for xorb, first_chunk, end_chunk, unpacked in terms],
                        ("xorbs" if version == "v2" else "fetch_info"): fetch})

        def _xorb_bytes(self, xorb_hash: str) -> None:
            status = hub._xorb_status
            if status is not None:
                self._reply(status, b"storage unavailable", {"Content-Type": "text/plain"})
                return
            xorb = hub._xorb(xorb_hash)
            if xorb is None:
                self._reply(404, b"NoSuchKey", {"Content-Type": "text/plain"})
                return
            total = len(xorb.blob)
            first, _, last = (self.headers.get("Range") or "").removeprefix("bytes=").partition("-")
            if not first.isdigit() or not last.isdigit() or int(first) > int(last) or int(last) >= total:
                self._reply(416, b"InvalidRange", {"Content-Type": "text/plain",
                                                   "Content-Range": f"bytes */{total}"})
                return
            start, stop = int(first), int(last) + 1
            self._reply(206, xorb.blob[start:stop], {
                "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                "Content-Range": f"bytes {start}-{stop - 1}/{total}"})

    return Handler


def _fixture(fn):
    return pytest.fixture(fn) if pytest is not None else fn


@_fixture
def fake_hub(monkeypatch: "pytest.MonkeyPatch") -> Iterator[FakeHub]:
    """A running :class:`FakeHub` with ``HF_ENDPOINT`` pointing at it.

    Telemetry is switched off so that building request headers does not try to fetch
    huggingface_hub's agent registry from the real hub.
    """
    import huggingface_hub.constants

    hub = FakeHub()
    hub.start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)
    yield hub
    hub.stop()


def announce_route(hub: FakeHub, route) -> None:
    """Put every file of a catalog route on the stand-in hub as an empty placeholder: enough
    for planning, which asks the hub only whether it serves each file (a ``HEAD``), never for
    the gigabytes of a real model."""
    for f in route.files():
        hub.add_file(route.repo, f.file, b"")


def announce_catalog(hub: FakeHub, catalog: Path | None = None) -> None:
    """Every route of the built-in catalog (and of the user catalog ``catalog``) on the stand-in
    hub (:func:`announce_route`): tests of the routes a plan writes need the model step, which
    the routes wait for, to be planned too."""
    from ojai_setup.domain.catalog import load_catalog

    for route in load_catalog(catalog).routes.values():
        if getattr(route, "repo", None):
            announce_route(hub, route)
