"""A local stand-in for the Hugging Face Hub on 127.0.0.1, speaking what huggingface_hub asks.

Two servers, like the real hub and its CDN (two origins, so huggingface_hub does not follow the
redirect on HEAD and does not send the token to the CDN):

hub
  ``HEAD|GET /{org}/{repo}/resolve/{revision}/{file}``: 302 to the CDN with ``X-Repo-Commit``,
  ``X-Linked-Etag`` (the LFS sha256), ``X-Linked-Size`` and ``ETag`` (404 with
  ``X-Error-Code: EntryNotFound`` for an unknown file);
  ``POST /api/models/{org}/{repo}/paths-info/{revision}`` (form ``paths=...``): file entries with
  ``lfs: {oid, size, pointerSize}``;
  ``GET /api/models/{org}/{repo}[/revision/{revision}]``: model info with ``siblings``.
cdn
  ``GET /cdn/{sha256}``: the bytes, honouring ``Range: bytes=N-`` with 206 and ``Content-Range``.

Faults: :meth:`FakeHub.corrupt` serves other bytes than the metadata describes;
:meth:`FakeHub.cut_next_download` drops the next CDN response after some bytes and then answers
503 everywhere until :meth:`FakeHub.restore` (a connection lost mid-download).

Use the ``fake_hub`` fixture: it starts both servers, points ``HF_ENDPOINT`` at the hub and
clears ``HF_TOKEN`` and ``HF_HUB_OFFLINE``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

try:
    import pytest
except ImportError:  # run as a server in a test guest (tests/support/vm_ojai.py), no pytest there
    pytest = None

COMMIT = "5d3c0e4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d"


@dataclass
class HubFile:
    data: bytes
    body: bytes  # what the CDN sends; differs from ``data`` when corrupted

    # computed once: the real hub does not hash a file for every request
    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @cached_property
    def git_oid(self) -> str:
        return hashlib.sha1(self.data).hexdigest()


@dataclass(frozen=True)
class Request:
    server: str  # "hub" or "cdn"
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
        self._cut_after: int | None = None
        self._down = False
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []
        self.url = ""
        self.cdn_url = ""

    # -- content ---------------------------------------------------------------------------
    def add_file(self, repo_id: str, filename: str, data: bytes) -> HubFile:
        entry = HubFile(data=data, body=data)
        self.files[(repo_id, filename)] = entry
        return entry

    def add_path(self, repo_id: str, filename: str, path: Path) -> HubFile:
        return self.add_file(repo_id, filename, path.read_bytes())

    def corrupt(self, repo_id: str, filename: str) -> None:
        """Serve bytes that differ from the published sha256 (same length)."""
        entry = self.files[(repo_id, filename)]
        middle = len(entry.data) // 2
        entry.body = entry.data[:middle] + bytes([entry.data[middle] ^ 0xFF]) + entry.data[middle + 1:]

    def cut_next_download(self, after: int) -> None:
        """Send only ``after`` bytes of the next CDN body, then be unreachable (503)."""
        self._cut_after = after

    def restore(self) -> None:
        self._down = False

    def requests_to(self, server: str | None = None, method: str | None = None) -> list[Request]:
        return [r for r in self.requests
                if (server is None or r.server == server) and (method is None or r.method == method)]

    # -- serving ---------------------------------------------------------------------------
    def start(self, hub_port: int = 0, cdn_port: int = 0) -> None:
        """Both servers on 127.0.0.1, on the given ports (0: any free one)."""
        hub = self._serve("hub", hub_port)
        cdn = self._serve("cdn", cdn_port)
        self.url = f"http://127.0.0.1:{hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{cdn.server_address[1]}"

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def _serve(self, role: str, port: int = 0) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", port), _make_handler(self, role))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._servers.append(server)
        return server

    def _find(self, repo_id: str, revision: str, filename: str) -> HubFile | None:
        if revision not in ("main", COMMIT):
            return None
        return self.files.get((repo_id, filename))

    def _siblings(self, repo_id: str) -> list[dict[str, object]]:
        return [{"rfilename": name, "size": len(f.data), "blobId": f.git_oid,
                 "lfs": {"sha256": f.sha256, "size": len(f.data), "pointerSize": 134}}
                for (repo, name), f in sorted(self.files.items()) if repo == repo_id]


def _make_handler(hub: FakeHub, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return None

        def _record(self) -> bool:
            """Log the request; False when it was answered already (hub down, no token)."""
            with hub._lock:
                hub.requests.append(Request(role, self.command, self.path,
                                            {k.lower(): v for k, v in self.headers.items()}))
                down = hub._down
            if down:
                self._reply(503, b"unavailable", {"Content-Type": "text/plain"})
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
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]))
            if parts[:1] == ["api"] and len(parts) >= 4 and parts[1] == "models":
                repo_id = f"{parts[2]}/{parts[3]}"
                if len(parts) >= 6 and parts[4] == "paths-info" and self.command == "POST":
                    return self._paths_info(repo_id, parts[5])
                if len(parts) == 4 or (len(parts) == 6 and parts[4] == "revision"):
                    return self._model_info(repo_id)
            self._reply(404, b"not found", {"Content-Type": "text/plain"})

        def _resolve(self, repo_id: str, revision: str, filename: str) -> None:
            entry = hub._find(repo_id, revision, filename)
            if entry is None:
                self._reply(404, b"Entry not found",
                            {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
                return
            self._reply(302, b"", {
                "Location": f"{hub.cdn_url}/cdn/{entry.sha256}?name={filename}",
                "X-Repo-Commit": COMMIT,
                "ETag": f'"{entry.git_oid}"',
                "X-Linked-Etag": f'"{entry.sha256}"',
                "X-Linked-Size": str(len(entry.data)),
            })

        def _paths_info(self, repo_id: str, revision: str) -> None:
            form = parse_qs(self._body.decode())
            found = []
            for name in form.get("paths", []):
                entry = hub._find(repo_id, revision, name)
                if entry is not None:
                    found.append({"type": "file", "path": name, "size": len(entry.data), "oid": entry.git_oid,
                                  "lfs": {"oid": entry.sha256, "size": len(entry.data), "pointerSize": 134}})
            self._json(found)

        def _model_info(self, repo_id: str) -> None:
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
            range_header = self.headers.get("Range")
            if range_header and range_header.startswith("bytes=") and range_header.endswith("-"):
                start = int(range_header[len("bytes="):-1])
                status = 206
                headers["Content-Range"] = f"bytes {start}-{total - 1}/{total}"
            with hub._lock:
                cut, hub._cut_after = hub._cut_after, None
                if cut is not None:
                    hub._down = True
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(total - start))
            self.end_headers()
            view = memoryview(body)  # no copy of a large body per request
            if cut is None:
                self.wfile.write(view[start:])
                return
            self.wfile.write(view[start:start + cut])
            self.wfile.flush()
            self.close_connection = True

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
