"""Model downloads from the Hugging Face Hub, each checked against the hub's LFS sha256.

The metadata comes through ``huggingface_hub``: a ``HEAD /{repo}/resolve/{revision}/{file}`` for
the commit, size and download location (usually a redirect to a CDN, where the token is not
sent) and ``POST /api/models/{repo}/paths-info/{commit}`` for the LFS sha256. The body is then
streamed by ojai itself (``GET`` of the location in 4 MiB blocks straight to the file, hashed as
it is written, so a finished download is never read a second time: ``benchmarks/
download_speed.py`` compares it with curl), or, for a file the Hub serves through Xet and with
``hf_xet`` installed, fetched with huggingface_hub's Xet transfer and hashed once after.
``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` are read when a download runs.

Files go to ``<models_dir>/<org>/<repo>/<file>`` (default models dir ``/var/lib/ojai/models``:
the system ``lemond`` service runs with ``ProtectHome=yes`` and cannot read anything under
/home). While downloading, the body grows in ``.<file>.<sha256 prefix>.partial`` beside the
target; an interrupted download leaves it there and the next run resumes it with an HTTP
``Range`` request. Only a file whose sha256 matches the hub's value is renamed into place; a
mismatch deletes the download and raises with both digests.

A verified file gets a small ``.<file>.sha256`` record keyed by its size and mtime, so later
runs recognise it without re-reading many gigabytes and without asking the hub."""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import httpx2  # noqa: E402 - after the environment default above
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
from huggingface_hub import constants as hf_constants
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import HfHubHTTPError, build_hf_headers

from ojai_setup.apply.executor import fault_point
from ojai_setup.core.atomic import ensure_dir
from ojai_setup.core.errors import ApplyError
from ojai_setup.core.paths import DIR_MODE, FILE_MODE, PRIVATE_FILE_MODE
from ojai_setup.core.progress import Progress, TaskHandle
from ojai_setup.core.root import Root
from ojai_setup.core.units import gib_text
from ojai_setup.facts.models import _digest_record, verified_digest
from ojai_setup.facts.disk import _TRUE, free_bytes
from ojai_setup.facts.hub import refusal
from ojai_setup.model.actions import HubDownload

# ojai talks to the hub only to download what the plan lists: no usage reports, unless the
# user asks for them. (huggingface_hub reads this when it is first imported.)
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


_HASH_CHUNK = 8 << 20
#: bytes read from the connection, hashed and written at a time
_BLOCK = 4 << 20
#: seconds a connection may stay silent
_TIMEOUT = 60.0


class HubError(ApplyError):
    """A download could not be started, finished or verified; the text says why."""


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or hf_constants.ENDPOINT).rstrip("/")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE or hf_constants.is_offline_mode()


def _gib(n: int) -> str:
    return gib_text(n, 2) if n >= 1 << 30 else f"{n} bytes"


def _refused(where: str, what: str, exc: HfHubHTTPError) -> HubError:
    """The hub's refusal of ``what`` in ojai's words: a 401 or 403 with its status, why (no
    token sent, one the hub does not accept, one without access to the repository) and what
    to do with ``HF_TOKEN``, as planning words it; any other with huggingface_hub's message."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if status in (401, 403):
        try:  # the request that was refused; httpx raises when a response has none
            sent = bool(response.request.headers.get("authorization"))
        except (AttributeError, RuntimeError):  # then what huggingface_hub sends
            sent = "authorization" in build_hf_headers()
        return HubError(f"{where}: the hub refused {what} (HTTP {status}): "
                        f"{refusal(status, sent)}")
    return HubError(f"{where}: the hub refused {what}: {exc}")


def remote_file_info(repo_id: str, filename: str, revision: str | None = None) -> tuple[str, int]:
    """The hub's LFS ``(sha256, size)`` of ``filename`` in ``repo_id`` at ``revision``."""
    where = f"{repo_id}@{revision or 'main'}:{filename}"
    if _offline():
        raise HubError(f"{where}: cannot ask the hub for its sha256: HF_HUB_OFFLINE is set")
    try:
        entries = HfApi(endpoint=_endpoint()).get_paths_info(repo_id, [filename], revision=revision)
    except HfHubHTTPError as exc:
        raise _refused(where, "the file listing", exc) from exc
    except httpx2.TransportError as exc:
        raise HubError(f"{where}: cannot reach {_endpoint()}: {exc}") from exc
    for entry in entries:
        if isinstance(entry, RepoFile) and entry.path == filename:
            if entry.lfs is None:
                raise HubError(f"{where}: not stored with LFS, so the hub gives no sha256 for it")
            return entry.lfs.sha256, entry.lfs.size
    raise HubError(f"{where}: no such file in the repository")


def _record_digest(path: Path, digest: str) -> None:
    stat = path.stat()
    record = _digest_record(path)
    tmp = record.with_name(record.name + ".tmp")
    tmp.write_text(json.dumps({"sha256": digest, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}),
                   encoding="utf-8")
    tmp.chmod(FILE_MODE)
    os.replace(tmp, record)


def _hash_file(path: Path, progress: Progress, description: str) -> str:
    task = progress.task(description, total=path.stat().st_size)
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
            task.advance(len(chunk))
    task.done()
    return digest.hexdigest()


def _http_download(part: Path, location: str, headers: dict[str, str], resume: int,
                   expected_size: int, action: HubDownload, progress: Progress,
                   where: str) -> str:
    """Stream ``location`` onto the end of ``part`` (from byte ``resume``, with a ``Range``
    request) and return the sha256 of the whole file: hashed as it is written, so that a
    finished download is not read a second time (only the part kept from an interrupted run
    is read, once, before the transfer goes on). Writes go straight to the file descriptor in
    blocks of :data:`_BLOCK`; an interruption keeps what arrived for the next run."""
    digest = hashlib.sha256()
    if resume:
        with part.open("rb") as f:
            left = resume
            while left and (chunk := f.read(min(_HASH_CHUNK, left))):
                digest.update(chunk)
                left -= len(chunk)
    if resume and resume == expected_size:
        # every byte arrived before the interruption (the rename had not happened): a range
        # from the file's size on is one no server can satisfy (the Hub's CDN answers 416), so
        # the part is only hashed
        return digest.hexdigest()
    request = urllib.request.Request(location, headers={
        **{k: v for k, v in headers.items() if k.lower() != "accept-encoding"},
        "Accept-Encoding": "identity", **({"Range": f"bytes={resume}-"} if resume else {})})
    task = progress.task(f"download {action.filename}", total=expected_size)
    task.update(completed=resume)
    got = resume
    fd = os.open(part, os.O_WRONLY)
    hasher: _Hasher | None = None
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:
            if resume and response.status != 206:  # the server ignored the range: start over
                os.ftruncate(fd, 0)
                digest, got = hashlib.sha256(), 0
                task.update(completed=0)
            os.lseek(fd, got, os.SEEK_SET)
            hasher = _Hasher(digest)
            while True:
                buffer = hasher.free.get()
                n = response.readinto(buffer)
                if not n:
                    hasher.free.put(buffer)
                    break
                chunk = memoryview(buffer)[:n]
                written = 0
                try:
                    while written < n:
                        written += os.write(fd, chunk[written:])
                finally:  # what is in the file counts, a block the disk filled up in too
                    got += written
                hasher.work.put((buffer, n))
                task.advance(n)
                fault_point("download-block")  # a block is in the file: Ctrl-C or a kill here
                if got > expected_size:
                    break
        hasher.finish()
        if got < expected_size:  # http.client's readinto ends quietly when the peer hangs up
            raise http.client.IncompleteRead(b"", expected_size - got)
    except urllib.error.HTTPError as exc:
        raise HubError(f"{where}: download stopped after {got} of {expected_size} bytes (HTTP "
                       f"{exc.code} {exc.reason} from {urlsplit(location).netloc}); run again "
                       "to resume it") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        cause = getattr(exc, "reason", None) or exc
        if isinstance(exc, http.client.IncompleteRead):
            cause = "the connection closed before the end"
        full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC
        raise HubError(f"{where}: download stopped after {got} of {expected_size} bytes "
                       f"({' '.join(str(cause).split()) or type(exc).__name__}); "
                       + (f"free {_gib(expected_size - got)} or more on {part.parent}, then run "
                          "again to resume it" if full else "run again to resume it")) from None
    finally:
        if hasher is not None:
            hasher.finish()
        os.close(fd)
        task.done()
    return digest.hexdigest()


class _Hasher:
    """sha256 of the blocks a download writes, taken in a thread of its own, so that hashing
    overlaps the transfer (hashlib lets go of the GIL for large blocks, as socket reads and
    file writes do) instead of adding its time to it. Blocks come from a small pool of
    buffers (:attr:`free`) and go back to it once hashed (:attr:`work`), in order."""

    POOL = 4

    def __init__(self, digest) -> None:
        import queue
        import threading

        self.digest = digest
        self.free: queue.Queue = queue.Queue()
        self.work: queue.Queue = queue.Queue()
        for _ in range(self.POOL):
            self.free.put(bytearray(_BLOCK))
        self._thread = threading.Thread(target=self._run, name="ojai-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self.work.get()) is not None:
            buffer, n = item
            self.digest.update(memoryview(buffer)[:n])
            self.free.put(buffer)

    def finish(self) -> None:
        """Hash what is queued, then stop (again: nothing)."""
        if self._thread.is_alive():
            self.work.put(None)
            self._thread.join()


def _xet_available() -> bool:
    """Whether huggingface_hub would use Xet: ``hf_xet`` installed and ``HF_HUB_DISABLE_XET``
    unset. The check lives in ``huggingface_hub.utils._runtime``; ``huggingface_hub.utils``
    stopped re-exporting it (2.x), so it is imported from there."""
    try:
        from huggingface_hub.utils._runtime import is_xet_available
    except ImportError:
        return False
    return bool(is_xet_available())


def _xet_download(part: Path, xet: object, headers: dict[str, str], expected_size: int,
                  action: HubDownload, progress: Progress, where: str) -> str:
    """The Hub's Xet transfer (``hf_xet``, as huggingface_hub uses it for Xet-backed files):
    chunks fetched in parallel and reassembled into ``part``; then its sha256, read once."""
    from huggingface_hub.file_download import xet_get

    task = progress.task(f"download {action.filename} (Xet)", total=expected_size)
    try:
        xet_get(incomplete_path=part, xet_file_data=xet, headers=headers,
                expected_size=expected_size, displayed_filename=action.filename,
                tqdm_class=_bar_class(task))
    except Exception as exc:  # hf_xet's errors are its own types
        got = part.stat().st_size if part.is_file() else 0
        raise HubError(f"{where}: the Xet download stopped after {got} of {expected_size} "
                       f"bytes ({' '.join(str(exc).split())}); run again to download it") from exc
    finally:
        task.done()
    return _hash_file(part, progress, f"verify {action.filename}")


def _bar_class(task: TaskHandle) -> type:
    """A tqdm stand-in for ``xet_get`` that forwards the bytes written to the file to ``task``.

    huggingface_hub's Xet progress reporter makes one bar of this class for the bytes written
    and, unless the class has ``update_transfer``, a second one for the bytes received (fewer,
    compressed): both would advance ``task``. With ``update_transfer`` (ignored here) it makes
    only the one. It also sets the bar's speed text and total, and closes it: no-ops here (a
    missing method raises in hf_xet's progress callback, printing a traceback per update)."""

    class _Bar:
        def __init__(self, **_: object) -> None:
            self.n = 0
            self.total: int | None = None

        def __enter__(self) -> _Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def update(self, n: float | None = 1) -> None:
            if n:
                self.n += int(n)
                task.advance(int(n))

        def update_transfer(self, n: float | None = 1) -> None:
            return None

        def set_postfix_str(self, *_: object, **__: object) -> None:
            return None

        set_transfer_postfix_str = set_postfix_str
        refresh = close = set_postfix_str

    return _Bar


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


def execute_hub_download(root: Root, action: HubDownload, progress: Progress, *,  # noqa: C901
                         disk_budget: int | None = None) -> bool:
    """Make ``action.dest`` a verified copy of the hub file; True when something changed.

    The expected sha256 is ``action.sha256`` when pinned, else the hub's LFS value; the
    expected size is ``action.size`` when given (it must agree with the hub), else the hub's.
    A present file with a verified-digest record (or whose hash matches) is left alone
    without downloading. ``disk_budget`` (or the ``OJAI_DISK_BUDGET_BYTES`` variable) caps the
    free space the download may use; the check runs before any byte is fetched.
    """
    dest = root.resolve(action.dest)
    where = f"{action.repo_id}:{action.filename}"
    pinned = action.sha256.lower() if action.sha256 else None

    if dest.is_file():
        recorded = verified_digest(dest)
        size_ok = action.size is None or dest.stat().st_size == action.size
        if recorded is not None and size_ok and (pinned is None or recorded == pinned):
            return False
        if pinned is None:
            expected_sha, hub_size = remote_file_info(action.repo_id, action.filename, action.revision)
            expected_size = action.size or hub_size
        else:
            expected_sha, expected_size = pinned, action.size or dest.stat().st_size
        if dest.stat().st_size == expected_size:
            digest = recorded or _hash_file(dest, progress, f"verify {action.filename}")
            if digest == expected_sha:
                _record_digest(dest, digest)
                return False

    if _offline():
        raise HubError(f"{where}: {action.dest} is missing or does not match, and HF_HUB_OFFLINE is set")
    endpoint = _endpoint()
    url = hf_hub_url(action.repo_id, action.filename, revision=action.revision, endpoint=endpoint)
    try:
        meta = get_hf_file_metadata(url, endpoint=endpoint)
    except HfHubHTTPError as exc:
        raise _refused(where, "the file", exc) from exc
    except httpx2.TransportError as exc:
        raise HubError(f"{where}: cannot reach {endpoint}: {exc}") from exc
    hub_size = meta.size
    if pinned is not None:
        expected_sha = pinned
    else:
        expected_sha, hub_size = remote_file_info(action.repo_id, action.filename,
                                                  meta.commit_hash or action.revision)
    expected_size = action.size or hub_size
    if expected_size is None:
        raise HubError(f"{where}: the hub gave no size for the file")
    if hub_size is not None and hub_size != expected_size:
        raise HubError(f"{where}: the hub serves {hub_size} bytes, the plan expected {expected_size}; "
                       "the file changed upstream or the catalog's size is wrong")

    ensure_dir(dest.parent, DIR_MODE)
    part = dest.with_name(f".{dest.name}.{expected_sha[:16]}.partial")
    for stale in dest.parent.glob(f".{dest.name}.*.partial"):
        if stale != part:
            stale.unlink()
    resume = part.stat().st_size if part.is_file() else 0
    if resume > expected_size:
        part.unlink()
        resume = 0

    need = expected_size - resume
    free = free_bytes(dest.parent, disk_budget)
    if need > free:
        raise HubError(f"{where}: not enough disk space in {root.machine_path(dest.parent)}: "
                       f"the download needs {_gib(need)}, {_gib(free)} is free")

    headers = build_hf_headers()
    if not resume:
        part.touch(PRIVATE_FILE_MODE)
        part.chmod(PRIVATE_FILE_MODE)
    xet = getattr(meta, "xet_file_data", None)
    if xet is not None and _xet_available():
        # the token goes to the hub's Xet token route (a private or gated repo needs it there),
        # which the hub names; xet_get keeps it from the CAS and its storage
        if not _same_origin(url, xet.refresh_route):
            headers.pop("authorization", None)
        digest = _xet_download(part, xet, headers, expected_size, action, progress, where)
    else:
        if not _same_origin(url, meta.location):
            headers.pop("authorization", None)  # signed CDN URLs: the token stays on the hub
        digest = _http_download(part, meta.location, headers, resume, expected_size, action,
                                progress, where)

    got = part.stat().st_size
    if got != expected_size:
        part.unlink()
        raise HubError(f"{where}: downloaded {got} bytes, the hub said {expected_size}; the download was deleted")
    if digest != expected_sha:
        part.unlink()
        raise HubError(f"{where}: sha256 mismatch: expected {expected_sha}, the download has {digest}; "
                       "the download was deleted")
    part.chmod(FILE_MODE)
    fault_point("before-rename")
    os.replace(part, dest)
    _record_digest(dest, digest)
    return True


