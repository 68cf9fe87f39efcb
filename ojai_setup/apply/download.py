"""Stream one file over HTTP(S) into place, checking its size and sha256 on the way.

The body goes to a temp file beside the target, named after it (``.<name>.part``), and is
hashed while it streams. Only a body whose length and sha256 match what was expected is
renamed to the target; anything else is deleted and reported with both values. Because the
temp name is fixed, a run that was killed half way leaves one stale ``.part`` file that the
next run truncates and replaces; a partial file is never mistaken for a finished one.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from ojai_setup.core.atomic import ensure_dir
from ojai_setup.core.errors import ApplyError
from ojai_setup.core.paths import DIR_MODE, PRIVATE_FILE_MODE, USER_AGENT
from ojai_setup.core.progress import Progress

CHUNK = 1 << 20
DEFAULT_TIMEOUT = 60.0
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class DownloadError(ApplyError):
    """A download failed or its content was not the expected one. Nothing was left behind."""


def part_path(target: Path) -> Path:
    """The temp file a download of ``target`` streams into."""
    return target.with_name(f".{target.name.lstrip('.')}.part")


def download(
    url: str,
    target: Path,
    *,
    sha256: str,
    size: int | None = None,
    progress: Progress,
    description: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Path:
    """Download ``url`` to ``target`` and return it, once its sha256 (and size) matched.

    ``sha256`` is required: nothing is handed on unverified. ``size``, when given, is checked
    too, so a body cut short is reported as such rather than as a digest mismatch. Raises
    :class:`DownloadError` with the URL and the reason; the temp file is removed then.
    """
    expected = sha256.lower()
    if not SHA256_RE.match(expected):
        raise DownloadError(f"expected sha256 for {url} is not 64 hex digits: {sha256!r}")
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("http", "https"):
        raise DownloadError(f"refusing to download {url!r}: only http and https URLs are fetched")

    part = part_path(target)
    ensure_dir(target.parent, DIR_MODE)
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
    try:
        got_hash, got_size = _stream(request, part, size, progress, description or target.name,
                                     timeout)
        if size is not None and got_size != size:
            raise DownloadError(
                f"download of {url} ended early: got {got_size} of {size} bytes")
        if got_hash != expected:
            raise DownloadError(
                f"sha256 mismatch for {url}: expected {expected}, got {got_hash}; "
                "the file was deleted")
        os.replace(part, target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return target


def _stream(request: urllib.request.Request, part: Path, size: int | None,
            progress: Progress, description: str, timeout: float) -> tuple[str, int]:
    """Write the response body to ``part``; return its sha256 hex and length."""
    url = request.full_url
    digest = hashlib.sha256()
    received = 0
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            length_header = response.headers.get("Content-Length")
            announced = int(length_header) if length_header and length_header.isdigit() else None
            bar = progress.task(description, size if size is not None else announced)
            try:
                fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
                os.fchmod(fd, PRIVATE_FILE_MODE)  # a leftover .part keeps its old mode otherwise
                with os.fdopen(fd, "wb") as out:
                    while chunk := response.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        received += len(chunk)
                        bar.advance(len(chunk))
            finally:
                bar.done()
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"GET {url} failed: HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        raise DownloadError(f"could not reach {url}: {exc.reason}") from exc
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise DownloadError(f"download of {url} failed after {received} bytes: {exc}") from exc
    if announced is not None and received != announced:
        raise DownloadError(
            f"download of {url} ended early: got {received} of {announced} bytes")
    return digest.hexdigest(), received
