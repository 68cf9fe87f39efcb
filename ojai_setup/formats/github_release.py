"""A file of a GitHub release, as the release API describes it: checked before it is trusted.

GitHub's release API gives each asset a ``digest`` (``sha256:<hex>``), a download URL and a
size. ojai installs nothing whose digest it cannot check, so an asset without one is refused
here, with the same words for every kind of file (llama.cpp's nightly archives, Lemonade's
.deb).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, NamedTuple

DIGEST_RE = r"^sha256:(?P<hex>[0-9a-f]{64})$"


class ReleaseFile(NamedTuple):
    url: str
    size: int
    sha256: str


def release_file(asset: dict[str, Any], name: str, tag: str, *, kind: str,
                 error: type[Exception]) -> ReleaseFile:
    """The download URL, size and sha256 of ``asset`` (file ``name`` of release ``tag``).

    ``kind`` says what the file is in the refusal ("an archive", "a package"); ``error`` is the
    exception raised when the digest, URL or size is missing or unusable."""
    digest = asset.get("digest")
    match = re.match(DIGEST_RE, digest.lower()) if isinstance(digest, str) else None
    if match is None:
        raise error(f"GitHub gives no sha256 digest for {name} in release {tag} (digest: "
                    f"{digest!r}); refusing to install {kind} that cannot be verified")
    url, size = asset.get("browser_download_url"), asset.get("size")
    if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise error(f"{name} in release {tag} has no usable download URL: {url!r}")
    if not isinstance(size, int) or size <= 0:
        raise error(f"{name} in release {tag} has no usable size: {size!r}")
    return ReleaseFile(url=url, size=size, sha256=match["hex"])
