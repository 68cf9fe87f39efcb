"""The remote facts of what to install from GitHub: the llama.cpp nightly (a release of
lemonade-sdk/llamacpp-rocm, or of ggml-org/llama.cpp for the Vulkan build) and Lemonade's own .deb (a release of lemonade-sdk/lemonade), from
GitHub's release API (``OJAI_GITHUB_API`` moves it, ``GITHUB_TOKEN`` authenticates), with the
sha256 digest GitHub states for each asset."""

from __future__ import annotations

import io
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Mapping

from ojai_setup.core.asking import NETWORK_TIMEOUT, asking
from ojai_setup.core.paths import USER_AGENT
from ojai_setup.domain.lemonade_release import LemonadeDeb
from ojai_setup.formats.github_release import release_file
from ojai_setup.domain.nightly import (
    RELEASES_PAGE,
    REPO,
    TAG_RE,
    VULKAN,
    NightlyAsset,
    NightlyError,
    ReleaseNotFound,
    _check_family,
    _check_tag,
    asset_names,
    match_asset,
    repo_for,
)

DEFAULT_API = "https://api.github.com"


API_ENV = "OJAI_GITHUB_API"


TOKEN_ENV = "GITHUB_TOKEN"


API_TIMEOUT = NETWORK_TIMEOUT


# -- the release API --------------------------------------------------------------------------
def github_api_base(env: Mapping[str, str] = os.environ) -> str:
    """GitHub's API root, or the one ``$OJAI_GITHUB_API`` names."""
    return (env.get(API_ENV) or DEFAULT_API).rstrip("/")


def resolve_release(api_base: str | None, tag: str | None, family: str) -> NightlyAsset:
    """Find ``family``'s archive in release ``tag`` (``None``: the latest release) and its sha256:
    a release of lemonade-sdk/llamacpp-rocm for a GPU family, of ggml-org/llama.cpp for
    ``vulkan``.

    ``api_base`` ``None`` means :func:`github_api_base`. ``$GITHUB_TOKEN`` is sent when set
    (it raises the API's rate limit). Raises :class:`NightlyError` when the release does not
    exist, has no zip for ``family``, or gives that zip no sha256 digest.
    """
    _check_family(family)
    if tag is not None:
        _check_tag(tag)
    repo, page = repo_for(family)
    base = (api_base or github_api_base()).rstrip("/")
    path = "releases/latest" if tag is None else f"releases/tags/{urllib.parse.quote(tag)}"
    release = _get_json(f"{base}/repos/{repo}/{path}", what=f"release {tag or 'latest'}",
                        repo=repo, page=page,
                        not_found=ReleaseNotFound if tag is not None else None)
    if not isinstance(release, dict):
        raise NightlyError(f"unexpected answer from the GitHub API for {repo} {path}")
    return _pick_asset(release, family)


def _pick_asset(release: dict, family: str) -> NightlyAsset:
    repo, page = repo_for(family)
    tag = release.get("tag_name")
    if not isinstance(tag, str) or not re.match(TAG_RE, tag):
        raise NightlyError(f"release of {repo} has an unexpected tag {tag!r}")
    assets = [a for a in release.get("assets") or [] if isinstance(a, dict)]
    names = asset_names(tag, family)
    asset = next((a for name in names for a in assets if a.get("name") == name), None)
    if asset is None:
        offered = sorted({m["family"] for a in assets
                          if (m := match_asset(str(a.get("name", "")))) and m["tag"] == tag})
        what = "no Ubuntu Vulkan build" if family == VULKAN else "no Ubuntu ROCm builds"
        raise NightlyError(
            f"release {tag} of {repo} has no {names[0]}; it offers "
            f"{', '.join(offered) if offered else what} "
            f"(see {page}/tag/{tag}); pick another tag or build from source")
    wanted = asset["name"]
    checked = release_file(asset, wanted, tag, kind="an archive", error=NightlyError)
    unpacked = zip_unpacked_size(checked.url, checked.size) if wanted.endswith(".zip") else None
    return NightlyAsset(tag=tag, name=wanted, url=checked.url, size=checked.size,
                        sha256=checked.sha256, unpacked_size=unpacked)


#: how much of a zip's end is fetched to read its directory (a nightly's has a few hundred
#: entries: tens of KiB)
ZIP_TAIL = 1 << 20


class _Tail(io.RawIOBase):
    """A file of ``size`` bytes of which only the last ``len(data)`` are known: enough for
    :mod:`zipfile` to read the directory at a zip's end; reading anywhere else fails."""

    def __init__(self, size: int, data: bytes) -> None:
        self._size, self._data, self._pos = size, data, 0
        self._start = size - len(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer) -> int:
        if self._pos < self._start:
            raise OSError("outside the fetched end of the zip")
        chunk = self._data[self._pos - self._start:self._pos - self._start + len(buffer)]
        buffer[:len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)


def zip_unpacked_size(url: str, size: int, *, tail: int = ZIP_TAIL) -> int | None:
    """The bytes the files of the zip at ``url`` (``size`` bytes) take unpacked, read from its
    directory at its end with one ranged GET, nothing unpacked or run; None when that cannot be
    had (no range support, a directory larger than ``tail``, not a zip, unreachable): the
    caller then estimates."""
    if size <= 0:
        return None
    want = min(size, tail)
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT,
                                                   "Range": f"bytes={size - want}-"})
    try:
        with asking("the size of the archive's files", url), \
                urllib.request.urlopen(request, timeout=API_TIMEOUT) as response:
            if response.status != 206 and size > want:
                return None  # the whole zip would come: not at planning
            data = response.read(want + 1)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if len(data) != want:
        return None
    try:
        with zipfile.ZipFile(_Tail(size, data)) as archive:
            return sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None


def _get_json(url: str, *, what: str, repo: str = REPO, page: str = RELEASES_PAGE,
              error: type[Exception] = NightlyError,
              not_found: type[Exception] | None = None) -> object:
    request = urllib.request.Request(url, headers={
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
        "User-Agent": USER_AGENT,
    })
    token = os.environ.get(TOKEN_ENV)
    if token:
        # unredirected: a redirect to another host must not carry the token along
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    try:
        with asking(what, url), urllib.request.urlopen(request, timeout=API_TIMEOUT) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise (not_found or error)(
                f"no {what} in {repo} (see {page} for the tags there are)") from exc
        if exc.code in (403, 429):
            raise error(
                f"the GitHub API refused {url} (HTTP {exc.code}, likely its rate limit); "
                f"set {TOKEN_ENV} or try again later") from exc
        raise error(f"GET {url} failed: HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        raise error(f"could not reach the GitHub API at {url}: {exc.reason}") from exc
    except OSError as exc:
        raise error(f"reading {url} failed: {exc}") from exc
    try:
        return json.loads(body)
    except ValueError as exc:
        raise error(f"the GitHub API sent something that is not JSON for {url}") from exc


def resolve_lemonade_release(api_base: str | None, tag: str | None) -> LemonadeDeb:
    """The ``lemonade-server`` .deb of Lemonade's release ``tag`` (None: the latest) with the
    sha256 GitHub states for it (``GET /repos/lemonade-sdk/lemonade/releases/latest`` or
    ``.../releases/tags/<tag>``, the same API as the nightly lookup). Raises
    :class:`LemonadeReleaseError`, a :class:`RemoteError`."""
    from ojai_setup.domain import lemonade_release as lr

    if tag is not None:
        lr.check_tag(tag)
    base = (api_base or github_api_base()).rstrip("/")
    path = "releases/latest" if tag is None else f"releases/tags/{urllib.parse.quote(tag)}"
    release = _get_json(f"{base}/repos/{lr.REPO}/{path}", what=f"release {tag or 'latest'}",
                        repo=lr.REPO, page=lr.RELEASES_PAGE, error=lr.LemonadeReleaseError)
    return lr.pick_deb(release)
