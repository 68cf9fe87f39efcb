"""A stand-in for GitHub's release API and release downloads, on 127.0.0.1.

It answers what ojai asks of github.com for the nightly llama.cpp builds, in the shapes the
real service uses:

* ``GET /repos/<owner>/<repo>/releases/latest`` and ``.../releases/tags/<tag>``: the release
  JSON (``tag_name``, ``assets[]`` with ``name``, ``size``, ``digest: "sha256:<hex>"``,
  ``browser_download_url``), or GitHub's 404 body;
* ``GET /<owner>/<repo>/releases/download/<tag>/<name>`` (``browser_download_url``): a 302
  to ``/assets/<tag>/<name>``, as GitHub redirects to its asset host;
* ``GET /assets/<tag>/<name>``: the bytes.

Tests can make an asset lie about its digest, lose it, or be cut short mid-body; every request
is recorded with its headers. Also here: builders for zips in the nightly layout, including
hostile ones (entries with ``..``, absolute names, symlinks pointing out, device files).
"""

from __future__ import annotations

import hashlib
import json
import re
import stat
import struct
import threading
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.http_stand_in import StandInHandler, serving

NIGHTLY_REPO = "lemonade-sdk/llamacpp-rocm"


@dataclass
class FakeAsset:
    id: int
    name: str
    body: bytes
    #: the ``digest`` field served (None: the field is left out, as for assets uploaded
    #: before GitHub computed digests)
    digest: str | None
    #: serve only this many bytes of the body (with the full Content-Length), then hang up
    cut_after: int | None = None


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class FakeGitHub:
    """The server's state; change it between requests to change its answers."""

    host: str = "127.0.0.1"
    port: int = 0
    releases: dict[str, dict[str, FakeAsset]] = field(default_factory=dict)
    latest: str | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    #: answer ``Range: bytes=N-`` with 206 and that part, as GitHub's asset storage does
    #: (False: a server that ignores ranges and sends the whole body)
    ranges: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def add_release(self, tag: str, assets: dict[str, bytes], *, latest: bool = True,
                    repo: str = NIGHTLY_REPO) -> dict[str, FakeAsset]:
        """Publish release ``tag`` of ``repo`` with ``assets`` (name -> bytes)."""
        with self._lock:
            first_id = 1000 + sum(len(r) for r in self.releases.values())
            made = {name: FakeAsset(first_id + i, name, body,
                                    "sha256:" + hashlib.sha256(body).hexdigest())
                    for i, (name, body) in enumerate(assets.items())}
            self.releases[f"{repo}@{tag}"] = made
            if latest:
                self.latest = f"{repo}@{tag}"
        return made

    def asset(self, tag: str, name: str, repo: str = NIGHTLY_REPO) -> FakeAsset:
        return self.releases[f"{repo}@{tag}"][name]

    def downloads(self) -> list[RecordedRequest]:
        """Requests that fetched a whole asset (not the end of a zip that planning reads)."""
        return [r for r in self.requests if r.path.startswith("/assets/")
                and "Range" not in r.headers]

    def ranged(self) -> list[RecordedRequest]:
        """Requests for the end of an asset (``Range: bytes=N-``)."""
        return [r for r in self.requests if r.path.startswith("/assets/") and "Range" in r.headers]

    # -- answers ----------------------------------------------------------------------------
    def release_json(self, key: str) -> dict:
        repo, tag = key.split("@", 1)
        assets = []
        for a in self.releases[key].values():
            entry = {
                "url": f"{self.api_base}/repos/{repo}/releases/assets/{a.id}",
                "id": a.id,
                "node_id": f"RA_{a.id}",
                "name": a.name,
                "label": "",
                "uploader": {"login": "github-actions[bot]"},
                "content_type": "application/zip",
                "state": "uploaded",
                "size": len(a.body),
                "download_count": 0,
                "created_at": "2026-11-28T04:12:09Z",
                "updated_at": "2026-11-28T04:12:31Z",
                "browser_download_url":
                    f"{self.api_base}/{repo}/releases/download/{tag}/{a.name}",
            }
            if a.digest is not None:
                entry["digest"] = a.digest
            assets.append(entry)
        return {
            "url": f"{self.api_base}/repos/{repo}/releases/1",
            "html_url": f"https://github.com/{repo}/releases/tag/{tag}",
            "id": 1,
            "tag_name": tag,
            "target_commitish": "main",
            "name": tag,
            "draft": False,
            "prerelease": False,
            "created_at": "2026-11-28T03:55:00Z",
            "published_at": "2026-11-28T04:13:00Z",
            "assets": assets,
            "tarball_url": f"{self.api_base}/repos/{repo}/tarball/{tag}",
            "zipball_url": f"{self.api_base}/repos/{repo}/zipball/{tag}",
            "body": "",
        }


def _handler(state: FakeGitHub) -> type[StandInHandler]:
    class Handler(StandInHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            with state._lock:
                state.requests.append(RecordedRequest("GET", self.path, dict(self.headers)))
            parts = self.path.split("?", 1)[0].strip("/").split("/")
            if len(parts) >= 5 and parts[0] == "repos" and parts[3] == "releases":
                repo = f"{parts[1]}/{parts[2]}"
                if parts[4:] == ["latest"] and state.latest and state.latest.startswith(repo + "@"):
                    return self._json(200, state.release_json(state.latest))
                if len(parts) == 6 and parts[4] == "tags" and f"{repo}@{parts[5]}" in state.releases:
                    return self._json(200, state.release_json(f"{repo}@{parts[5]}"))
            elif len(parts) == 6 and parts[2:4] == ["releases", "download"]:
                repo = f"{parts[0]}/{parts[1]}"
                if parts[5] in state.releases.get(f"{repo}@{parts[4]}", {}):
                    self.send_response(302)
                    self.send_header("Location", f"{state.api_base}/assets/{repo}@{parts[4]}/{parts[5]}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
            elif len(parts) == 4 and parts[0] == "assets":
                key = f"{parts[1]}/{parts[2]}"
                asset = state.releases.get(key, {}).get(parts[3])
                if asset is not None:
                    return self._bytes(asset)
            return self._json(404, {
                "message": "Not Found",
                "documentation_url": "https://docs.github.com/rest/releases/releases",
                "status": "404",
            })

        def _json(self, code: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _bytes(self, asset: FakeAsset) -> None:
            wanted = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            if wanted and state.ranges and int(wanted[1]) < len(asset.body):
                part = asset.body[int(wanted[1]):]  # as GitHub's asset storage answers it
                self.send_response(206)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Range",
                                 f"bytes {wanted[1]}-{len(asset.body) - 1}/{len(asset.body)}")
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                self.wfile.write(part)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(asset.body)))
            self.end_headers()
            if asset.cut_after is None:
                self.wfile.write(asset.body)
                return
            self.wfile.write(asset.body[:asset.cut_after])
            self.wfile.flush()
            self.close_connection = True

    return Handler


@pytest.fixture
def fake_github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    """A running :class:`FakeGitHub`; ``$OJAI_GITHUB_API`` points at it, ``$GITHUB_TOKEN`` unset."""
    state = FakeGitHub()
    with serving(_handler(state), host=state.host, name="fake-github") as served:
        state.port = served.port
        monkeypatch.setenv("OJAI_GITHUB_API", state.api_base)
        monkeypatch.delenv("GITHUB_TOKEN", raising=False)
        yield state


# -- zips in the nightly layout ---------------------------------------------------------------
@dataclass
class Entry:
    """One zip entry, written as given (no checks: hostile archives are made with these)."""

    name: str
    data: bytes = b""
    mode: int | None = 0o100644  # full st_mode; None: no Unix attributes at all

    @classmethod
    def symlink(cls, name: str, target: str) -> Entry:
        return cls(name, target.encode(), stat.S_IFLNK | 0o777)


def make_zip(path: Path, entries: list[Entry]) -> bytes:
    """Write ``entries`` to the zip at ``path`` and return its bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf, \
            warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Duplicate name", UserWarning)  # wanted when given
        for e in entries:
            info = zipfile.ZipInfo(e.name, date_time=(2026, 11, 28, 4, 12, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            if e.mode is None:
                info.create_system = 0  # MS-DOS attributes only: the archive bit
                info.external_attr = 0x20
            else:
                info.create_system = 3  # Unix
                info.external_attr = (e.mode & 0xFFFF) << 16
                if stat.S_ISDIR(e.mode):
                    info.external_attr |= 0x10
            zf.writestr(info, e.data)
    return path.read_bytes()


def nightly_entries_from_build(bin_dir: Path, server: Path) -> list[Entry]:
    """The flat nightly layout made from a real build: ``llama-server`` and every shared
    library in ``bin_dir`` side by side (version links as symlink entries), each one's
    RUNPATH rewritten to ``$ORIGIN`` as in Lemonade's zips, so they load from the install
    folder and nowhere else."""
    entries = [Entry("llama-server", origin_runpath(server.read_bytes()), 0o100755)]
    for lib in sorted(bin_dir.glob("*.so*")):
        if lib.is_symlink():
            entries.append(Entry.symlink(lib.name, str(Path(lib.readlink()).name)))
        else:
            entries.append(Entry(lib.name, origin_runpath(lib.read_bytes()), 0o100755))
    return entries


def origin_runpath(elf: bytes) -> bytes:
    """``elf`` (64-bit little-endian) with its DT_RUNPATH/DT_RPATH string replaced by
    ``$ORIGIN``, in place, padded with NULs; unchanged when it has neither."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    out = bytearray(elf)
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from(
            "<IIQQQQQQ", elf, phoff + i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:  # PT_DYNAMIC
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return elf
    tags: dict[int, list[int]] = {}
    for off in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        d_tag, d_val = struct.unpack_from("<qQ", elf, off)
        if d_tag == 0:
            break
        tags.setdefault(d_tag, []).append(d_val)
    strtab_vaddr = tags[5][0]  # DT_STRTAB
    strtab = next(off + strtab_vaddr - va for va, off, size in loads if va <= strtab_vaddr < va + size)
    for d_val in tags.get(29, []) + tags.get(15, []):  # DT_RUNPATH, DT_RPATH
        start = strtab + d_val
        end = elf.index(b"\0", start)
        if end - start < len(b"$ORIGIN"):
            raise ValueError(f"RUNPATH {elf[start:end]!r} is too short to rewrite in place")
        out[start:end] = b"$ORIGIN".ljust(end - start, b"\0")
    return bytes(out)


# -- upstream llama.cpp's release tarballs ----------------------------------------------------
UPSTREAM_REPO = "ggml-org/llama.cpp"


def make_upstream_tarball(path: Path, tag: str, entries: list[Entry]) -> bytes:
    """Write ``entries`` as upstream llama.cpp's release workflow packs its Ubuntu builds
    (``.github/workflows/release.yml``, job ubuntu-vulkan: ``tar -czvf
    llama-<tag>-bin-ubuntu-vulkan-x64.tar.gz --transform "s,^\\.,llama-<tag>," -C ./build/bin .``):
    GNU tar's format, gzip'd, the folder ``./`` renamed to ``llama-<tag>`` first, then each
    entry of build/bin under it (symlinks as symlinks). Returns the bytes."""
    import io
    import tarfile

    top = f"llama-{tag}"
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tf:
        def add(name: str, kind: bytes, data: bytes = b"", mode: int = 0o644,
                target: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = kind, mode, 1796443920
            info.uname = info.gname = "runner"
            if kind == tarfile.SYMTYPE:
                info.linkname = target
            else:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

        add(top, tarfile.DIRTYPE, mode=0o755)
        for e in entries:
            name = f"{top}/{e.name}"
            mode = e.mode if e.mode is not None else 0o100644
            if stat.S_ISLNK(mode):
                add(name, tarfile.SYMTYPE, target=e.data.decode(), mode=0o777)
            elif stat.S_ISDIR(mode):
                add(name, tarfile.DIRTYPE, mode=stat.S_IMODE(mode))
            else:
                add(name, tarfile.REGTYPE, e.data, stat.S_IMODE(mode))
    return path.read_bytes()


def upstream_vulkan_entries(server: bytes, tag: str) -> list[Entry]:
    """build/bin of upstream's ubuntu-vulkan job, in small: ``llama-server`` and the other
    tools, ``libllama``/``libggml``/``libggml-base`` with their version links (SOVERSION 0),
    the dynamically loaded backends (GGML_BACKEND_DL: ``libggml-vulkan.so``, a CPU variant per
    microarchitecture from GGML_CPU_ALL_VARIANTS) and the LICENSE the job copies in."""
    number = tag.removeprefix("b")
    entries = [Entry("LICENSE", b"MIT License\n", 0o100644),
               Entry("llama-server", server, 0o100755),
               Entry("llama-cli", b"\x7fELF llama-cli", 0o100755),
               Entry("rpc-server", b"\x7fELF rpc-server", 0o100755)]
    for lib in ("libllama", "libggml", "libggml-base"):
        entries += [Entry(f"{lib}.so.0.0.{number}", f"\x7fELF {lib}".encode(), 0o100755),
                    Entry.symlink(f"{lib}.so.0", f"{lib}.so.0.0.{number}"),
                    Entry.symlink(f"{lib}.so", f"{lib}.so.0")]
    for backend in ("libggml-vulkan.so", "libggml-rpc.so", "libggml-cpu-haswell.so",
                    "libggml-cpu-zen4.so", "libggml-cpu-x64.so"):
        entries.append(Entry(backend, f"\x7fELF {backend}".encode(), 0o100755))
    return entries
