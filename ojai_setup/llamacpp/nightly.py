"""llama.cpp from Lemonade's nightly ROCm builds (github.com/lemonade-sdk/llamacpp-rocm).

Each release is tagged ``b`` + a build number (``b1311``) and carries one flat zip per GPU
family, ``llama-<tag>-ubuntu-rocm-<family>-x64.zip``: ``llama-server``, its shared libraries
and the bundled ROCm runtime side by side, linked with RPATH ``$ORIGIN``. There are no
checksum files; GitHub's release API gives each asset a ``sha256:`` digest, and an asset
without one is refused, because nothing is unpacked unverified.

Layout on the machine::

    /opt/ojai/llama.cpp/b1311-gfx1150/llama-server      (+ libraries, + ojai-install.json)
    /opt/ojai/llama.cpp/current -> b1311-gfx1150

Reading the release is :func:`resolve_release`; :func:`install_action` turns its answer into an
:class:`~ojai_setup.actions.InstallArchive`, and :func:`execute_install_archive` carries that
out: download, verify, check every zip entry, unpack next to the destination, record, rename
into place, switch the link. A failure at any point leaves the previous install and link as
they were and removes what it had started.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, ValidationError

from ojai_setup.actions import InstallArchive
from ojai_setup.download import USER_AGENT, download, part_path
from ojai_setup.executor import ActionOutcome, ApplyError, fault_point
from ojai_setup.progress import Progress
from ojai_setup.llamacpp.layout import swap_in, switch_link
from ojai_setup.root import Root

REPO = "lemonade-sdk/llamacpp-rocm"
RELEASES_PAGE = f"https://github.com/{REPO}/releases"
DEFAULT_API = "https://api.github.com"
API_ENV = "OJAI_GITHUB_API"
TOKEN_ENV = "GITHUB_TOKEN"

#: GPU families Lemonade builds for, in the order its release lists them.
FAMILIES = ("gfx1150", "gfx1151", "gfx110X", "gfx120X", "gfx103X", "gfx90a", "gfx908")

INSTALL_BASE = "/opt/ojai/llama.cpp"
CURRENT_LINK = f"{INSTALL_BASE}/current"
RECORD_NAME = "ojai-install.json"
SERVER_NAME = "llama-server"

TAG_RE = re.compile(r"^b\d{4,}$")
ASSET_RE = re.compile(r"^llama-(?P<tag>b\d{4,})-ubuntu-rocm-(?P<family>gfx[0-9a-zA-Z]+)-x64\.zip$")
DIGEST_RE = re.compile(r"^sha256:(?P<hex>[0-9a-f]{64})$")
API_TIMEOUT = 30.0

#: modes an unpacked file may keep: no setuid/setgid/sticky, not writable by group or others
KEEP_MODE = 0o755


class NightlyError(ApplyError):
    """A nightly release could not be resolved or installed; the message says why and what to do."""


class NightlyAsset(BaseModel):
    """One zip of one nightly release, as GitHub's release API describes it."""

    model_config = ConfigDict(frozen=True)

    tag: str
    name: str
    url: str
    size: int
    sha256: str

    @property
    def family(self) -> str:
        match = ASSET_RE.match(self.name)
        if match is None:  # resolve_release only builds assets with matching names
            raise NightlyError(f"not a nightly asset name: {self.name!r}")
        return match["family"]


class InstallRecord(BaseModel):
    """What ``ojai-install.json`` inside an install folder says about it."""

    model_config = ConfigDict(extra="forbid")

    tag: str | None
    family: str | None
    asset: str
    url: str
    sha256: str
    files_digest: str


# -- naming -----------------------------------------------------------------------------------
def family_for_target(gfx: str) -> str:
    """The nightly build family that carries kernels for GPU target ``gfx`` (``gfx1103`` -> ``gfx110X``)."""
    target = gfx.strip().lower()
    if target in ("gfx1150", "gfx1151", "gfx90a", "gfx908"):
        return target
    if re.fullmatch(r"gfx110[0-3]", target):
        return "gfx110X"
    if target in ("gfx1200", "gfx1201"):
        return "gfx120X"
    if re.fullmatch(r"gfx103[0-6]", target):
        return "gfx103X"
    raise NightlyError(
        f"no nightly llama.cpp build covers GPU target {gfx!r}; Lemonade builds for "
        f"{', '.join(FAMILIES)}. Build llama.cpp from source for this GPU instead.")


def asset_name(tag: str, family: str) -> str:
    """The zip name of ``family``'s build in release ``tag``."""
    return f"llama-{tag}-ubuntu-rocm-{family}-x64.zip"


def install_dir_name(tag: str, family: str) -> str:
    """The versioned folder name under :data:`INSTALL_BASE`, e.g. ``b1311-gfx1150``."""
    _check_tag(tag)
    _check_family(family)
    return f"{tag}-{family}"


def install_action(asset: NightlyAsset) -> InstallArchive:
    """The action that installs ``asset`` under :data:`INSTALL_BASE` and points ``current`` at it."""
    dest = f"{INSTALL_BASE}/{install_dir_name(asset.tag, asset.family)}"
    return InstallArchive(
        url=asset.url, sha256=asset.sha256, size=asset.size, dest=dest, link=CURRENT_LINK,
        needs_root=True,
        reason=f"llama.cpp nightly {asset.tag} for {asset.family} from {RELEASES_PAGE}")


def _check_tag(tag: str) -> None:
    if not TAG_RE.match(tag):
        raise NightlyError(f"not a nightly tag: {tag!r} (expected 'b' and a build number, e.g. b1311)")


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise NightlyError(f"unknown GPU family {family!r}; one of {', '.join(FAMILIES)}")


# -- the release API --------------------------------------------------------------------------
def github_api_base(env: Mapping[str, str] = os.environ) -> str:
    """GitHub's API root, or the one ``$OJAI_GITHUB_API`` names."""
    return (env.get(API_ENV) or DEFAULT_API).rstrip("/")


def resolve_release(api_base: str | None, tag: str | None, family: str) -> NightlyAsset:
    """Find ``family``'s zip in release ``tag`` (``None``: the latest release) and its sha256.

    ``api_base`` ``None`` means :func:`github_api_base`. ``$GITHUB_TOKEN`` is sent when set
    (it raises the API's rate limit). Raises :class:`NightlyError` when the release does not
    exist, has no zip for ``family``, or gives that zip no sha256 digest.
    """
    _check_family(family)
    if tag is not None:
        _check_tag(tag)
    base = (api_base or github_api_base()).rstrip("/")
    path = "releases/latest" if tag is None else f"releases/tags/{urllib.parse.quote(tag)}"
    release = _get_json(f"{base}/repos/{REPO}/{path}", what=f"release {tag or 'latest'}")
    if not isinstance(release, dict):
        raise NightlyError(f"unexpected answer from the GitHub API for {REPO} {path}")
    return _pick_asset(release, family)


def _pick_asset(release: dict, family: str) -> NightlyAsset:
    tag = release.get("tag_name")
    if not isinstance(tag, str) or not TAG_RE.match(tag):
        raise NightlyError(f"release of {REPO} has an unexpected tag {tag!r}")
    assets = [a for a in release.get("assets") or [] if isinstance(a, dict)]
    wanted = asset_name(tag, family)
    asset = next((a for a in assets if a.get("name") == wanted), None)
    if asset is None:
        offered = sorted({m["family"] for a in assets
                          if (m := ASSET_RE.match(str(a.get("name", "")))) and m["tag"] == tag})
        raise NightlyError(
            f"release {tag} of {REPO} has no {wanted}; it offers "
            f"{', '.join(offered) if offered else 'no Ubuntu ROCm builds'} "
            f"(see {RELEASES_PAGE}/tag/{tag}); pick another tag or build from source")
    digest = asset.get("digest")
    match = DIGEST_RE.match(digest.lower()) if isinstance(digest, str) else None
    if match is None:
        raise NightlyError(
            f"GitHub gives no sha256 digest for {wanted} in release {tag} (digest: {digest!r}); "
            "refusing to install an archive that cannot be verified")
    url = asset.get("browser_download_url")
    size = asset.get("size")
    if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise NightlyError(f"{wanted} in release {tag} has no usable download URL: {url!r}")
    if not isinstance(size, int) or size <= 0:
        raise NightlyError(f"{wanted} in release {tag} has no usable size: {size!r}")
    return NightlyAsset(tag=tag, name=wanted, url=url, size=size, sha256=match["hex"])


def _get_json(url: str, *, what: str) -> object:
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
        with urllib.request.urlopen(request, timeout=API_TIMEOUT) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise NightlyError(
                f"no {what} in {REPO} (see {RELEASES_PAGE} for the tags there are)") from exc
        if exc.code in (403, 429):
            raise NightlyError(
                f"the GitHub API refused {url} (HTTP {exc.code}, likely its rate limit); "
                f"set {TOKEN_ENV} or try again later") from exc
        raise NightlyError(f"GET {url} failed: HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        raise NightlyError(f"could not reach the GitHub API at {url}: {exc.reason}") from exc
    except OSError as exc:
        raise NightlyError(f"reading {url} failed: {exc}") from exc
    try:
        return json.loads(body)
    except ValueError as exc:
        raise NightlyError(f"the GitHub API sent something that is not JSON for {url}") from exc


# -- install state ----------------------------------------------------------------------------
def files_digest(folder: Path) -> str:
    """A cheap fingerprint of an unpacked install: every entry's path, type, size and x bit.

    Only ``lstat`` is read, so it is fast for a runtime of a few GiB; it catches missing,
    extra, truncated and re-linked files, not a same-size change of content (the archive's
    sha256 was checked before unpacking).
    """
    lines = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath, name)
            rel = path.relative_to(folder).as_posix()
            if rel == RECORD_NAME:
                continue
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                lines.append(f"l {rel} -> {os.readlink(path)}")
            elif stat.S_ISDIR(st.st_mode):
                lines.append(f"d {rel}")
            else:
                x = "x" if st.st_mode & stat.S_IXUSR else "-"
                lines.append(f"f{x} {rel} {st.st_size}")
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def read_record(root: Root, dest: str) -> InstallRecord | None:
    """The install record in machine folder ``dest``, or None when absent or unreadable."""
    try:
        return InstallRecord.model_validate_json(root.read_bytes(f"{dest}/{RECORD_NAME}"))
    except (OSError, ValidationError):
        return None


def is_installed(root: Root, dest: str, sha256: str) -> bool:
    """Whether ``dest`` holds the unpacked archive with ``sha256``, complete and unchanged."""
    folder = root.resolve(dest)
    if folder.is_symlink() or not folder.is_dir():
        return False
    record = read_record(root, dest)
    if record is None or record.sha256 != sha256.lower():
        return False
    server = folder / SERVER_NAME
    if not server.is_file() or not os.access(server, os.X_OK):
        return False
    return files_digest(folder) == record.files_digest


# -- the executor -----------------------------------------------------------------------------
def execute_install_archive(root: Root, action: InstallArchive,
                            progress: Progress) -> ActionOutcome:
    """Carry out ``action``; say whether anything changed.

    A verified install already in place is left alone (only the link is corrected if it
    points elsewhere). Otherwise the zip is downloaded next to ``action.dest``, its sha256
    checked, every entry checked, unpacked into a temp folder, recorded, and renamed into
    place; then ``action.link`` is switched atomically. Raises :class:`NightlyError` or
    :class:`~ojai_setup.download.DownloadError`; the previous install and link stay as they
    were, and the temp files of this run are removed.
    """
    dest = root.resolve(action.dest)
    parent = dest.parent
    archive = parent / f".{dest.name}.zip"
    staging = parent / f".{dest.name}.unpack"
    retired = parent / f".{dest.name}.old"

    if (retired.exists() or retired.is_symlink()) and not (dest.exists() or dest.is_symlink()):
        os.rename(retired, dest)  # a run killed between its two renames: put the old one back

    if is_installed(root, action.dest, action.sha256):
        if _switch_link(root, action):
            return ActionOutcome(True, f"{action.dest} was already installed and verified; "
                                       f"{action.link} now points to it")
        return ActionOutcome(False, f"{action.dest} is already installed and verified")

    parent.mkdir(parents=True, exist_ok=True)
    _remove(part_path(archive), archive, staging, retired)  # leftovers of a killed run
    name = _archive_name(action.url)
    try:
        download(action.url, archive, sha256=action.sha256, size=action.size,
                 progress=progress, description=f"download {name}")
        with zipfile.ZipFile(archive) as zf:
            entries = check_archive(zf)
            staging.mkdir()
            _unpack(zf, entries, staging, progress)
        archive.unlink()
        _finish_tree(staging)
        _write_record(staging, action)
        _move_into_place(staging, dest, retired)
    except zipfile.BadZipFile as exc:
        raise NightlyError(f"{name} is not a readable zip: {exc}") from exc
    except OSError as exc:
        raise NightlyError(f"installing into {action.dest} failed: {exc}") from exc
    finally:
        _remove(archive, staging)
    _remove(retired)
    _switch_link(root, action)
    return ActionOutcome(True, f"installed {name} into {action.dest}"
                               + (f"; {action.link} points to it" if action.link else ""))


def check_archive(zf: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    """Every entry of ``zf``, after checking that none can write outside the unpack folder.

    Refused: absolute names, ``..`` components, backslashes, device/FIFO/socket entries, and
    symlinks whose target is absolute or climbs with ``..`` (a link only ever points down into
    the tree, so chains of links cannot escape either). The zip must also have a
    ``llama-server`` at its top level.
    """
    entries = zf.infolist()
    seen: set[str] = set()
    for info in entries:
        name = info.filename
        where = f"archive entry {name!r}"
        if not name or "\0" in name or "\\" in name:
            raise NightlyError(f"{where}: unusable name; refusing to unpack")
        path = PurePosixPath(name)
        if path.is_absolute() or re.match(r"^[A-Za-z]:", name):
            raise NightlyError(f"{where} is an absolute path; refusing to unpack")
        if ".." in path.parts:
            raise NightlyError(f"{where} climbs out with '..'; refusing to unpack")
        kind = _entry_kind(info)
        if kind not in ("file", "dir", "symlink"):
            raise NightlyError(f"{where} is a {kind}; refusing to unpack")
        if kind == "symlink":
            target = zf.read(info).decode("utf-8", errors="replace")
            link = PurePosixPath(target)
            if not target or link.is_absolute() or ".." in link.parts or "\0" in target:
                raise NightlyError(
                    f"{where} is a symlink to {target!r}, outside the archive; refusing to unpack")
        key = path.as_posix()
        if key in seen:
            raise NightlyError(f"{where} appears twice; refusing to unpack")
        seen.add(key)
    if SERVER_NAME not in seen:
        raise NightlyError(f"the archive has no {SERVER_NAME} at its top level; refusing to install it")
    return entries


def _unix_mode(info: zipfile.ZipInfo) -> int:
    """The entry's st_mode, or 0 when the zip was not made on Unix (no modes recorded)."""
    return info.external_attr >> 16 if info.create_system == 3 else 0


def _entry_kind(info: zipfile.ZipInfo) -> str:
    mode = _unix_mode(info)
    fmt = stat.S_IFMT(mode)
    if info.is_dir() or fmt == stat.S_IFDIR:
        return "dir"
    if fmt in (0, stat.S_IFREG):  # no Unix mode recorded: a plain file
        return "file"
    if fmt == stat.S_IFLNK:
        return "symlink"
    return {stat.S_IFCHR: "character device", stat.S_IFBLK: "block device",
            stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket"}.get(fmt, f"special file (mode {mode:o})")


def _unpack(zf: zipfile.ZipFile, entries: list[zipfile.ZipInfo], staging: Path,
            progress: Progress) -> None:
    bar = progress.task("unpack llama.cpp", sum(i.file_size for i in entries))
    try:
        for info in entries:
            out = staging.joinpath(*PurePosixPath(info.filename).parts)
            kind = _entry_kind(info)
            if kind == "dir":
                out.mkdir(parents=True, exist_ok=True)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            if not out.parent.resolve().is_relative_to(staging.resolve()):
                raise NightlyError(f"archive entry {info.filename!r} leads outside the unpack folder")
            if kind == "symlink":
                os.symlink(zf.read(info).decode("utf-8"), out)
            else:
                mode = _unix_mode(info) & KEEP_MODE or 0o644
                fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
                with os.fdopen(fd, "wb") as dst, zf.open(info) as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
                os.chmod(out, mode)  # the umask may have dropped bits the archive gave
            bar.advance(info.file_size)
    finally:
        bar.done()


def _finish_tree(staging: Path) -> None:
    """Make ``llama-server`` executable: a zip made without Unix modes carries none."""
    server = staging / SERVER_NAME
    if server.is_symlink() or not server.is_file():
        raise NightlyError(f"{SERVER_NAME} in the archive is not a regular file; refusing to install it")
    mode = stat.S_IMODE(server.stat().st_mode)
    server.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH | stat.S_IRUSR)


def _archive_name(url: str) -> str:
    return PurePosixPath(urllib.parse.urlsplit(url).path).name


def _write_record(staging: Path, action: InstallArchive) -> None:
    name = _archive_name(action.url)
    match = ASSET_RE.match(name)
    record = InstallRecord(
        tag=match["tag"] if match else None, family=match["family"] if match else None,
        asset=name, url=action.url, sha256=action.sha256.lower(),
        files_digest=files_digest(staging))
    (staging / RECORD_NAME).write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")


def _move_into_place(staging: Path, dest: Path, retired: Path) -> None:
    """Rename ``staging`` to ``dest``; an old ``dest`` is set aside and put back if that fails."""
    fault_point("before-rename")
    swap_in(staging, dest, retired)


def _switch_link(root: Root, action: InstallArchive) -> bool:
    """Point ``action.link`` at ``action.dest``; return whether it changed."""
    if action.link is None:
        return False
    return switch_link(root.resolve(action.link), root.resolve(action.dest), NightlyError)


def _remove(*paths: Path) -> None:
    for path in paths:
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
