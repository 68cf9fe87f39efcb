"""Carrying out an :class:`~ojai_setup.model.actions.InstallArchive`: download the nightly zip,
check its sha256 before anything is unpacked, check every entry, unpack into a temp folder,
record, rename into place and switch the ``current`` link."""

from __future__ import annotations

import os
import re
import shutil
import stat
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath

from ojai_setup.apply.download import download, part_path
from ojai_setup.apply.executor import ActionOutcome, fault_point
from ojai_setup.apply.links import swap_in, switch_link
from ojai_setup.core.atomic import ensure_dir
from ojai_setup.core.paths import ARCHIVE_EXPANSION, ARCHIVE_MAX_BYTES, DIR_MODE, FILE_MODE
from ojai_setup.core.progress import Progress
from ojai_setup.core.root import Root
from ojai_setup.domain.nightly import (
    ASSET_RE,
    RECORD_NAME,
    SERVER_NAME,
    InstallRecord,
    NightlyError,
    files_digest,
    is_installed,
)
from ojai_setup.model.actions import InstallArchive

#: modes an unpacked file may keep: no setuid/setgid/sticky, not writable by group or others
KEEP_MODE = 0o755


# -- the executor -----------------------------------------------------------------------------
def execute_install_archive(root: Root, action: InstallArchive,
                            progress: Progress) -> ActionOutcome:
    """Carry out ``action``; say whether anything changed.

    A verified install already in place is left alone (only the link is corrected if it
    points elsewhere). Otherwise the zip is downloaded next to ``action.dest``, its sha256
    checked, every entry checked, unpacked into a temp folder, recorded, and renamed into
    place; then ``action.link`` is switched atomically. Raises :class:`NightlyError` or
    :class:`~ojai_setup.apply.download.DownloadError`; the previous install and link stay as they
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

    ensure_dir(parent, DIR_MODE)
    _remove(part_path(archive), archive, staging, retired)  # leftovers of a killed run
    name = _archive_name(action.url)
    try:
        download(action.url, archive, sha256=action.sha256, size=action.size,
                 progress=progress, description=f"download {name}")
        limit = unpack_limit(action.size)
        with zipfile.ZipFile(archive) as zf:
            entries = check_archive(zf, limit=limit)
            staging.mkdir()
            staging.chmod(DIR_MODE)
            _unpack(zf, entries, staging, progress, limit=limit)
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


def unpack_limit(size: int | None) -> int:
    """How many bytes unpacking a zip of ``size`` bytes may write: :data:`ARCHIVE_EXPANSION`
    times its size (as the release API states it), never more than :data:`ARCHIVE_MAX_BYTES`."""
    if size is None or size <= 0:
        return ARCHIVE_MAX_BYTES
    return min(size * ARCHIVE_EXPANSION, ARCHIVE_MAX_BYTES)


def _too_big(total: int, limit: int) -> NightlyError:
    return NightlyError(
        f"the archive unpacks to more than {limit} bytes ({total} bytes so far), more than "
        f"{ARCHIVE_EXPANSION} times its size or {ARCHIVE_MAX_BYTES >> 30} GiB; refusing to unpack it")


def check_archive(zf: zipfile.ZipFile, *, limit: int = ARCHIVE_MAX_BYTES) -> list[zipfile.ZipInfo]:
    """Every entry of ``zf``, after checking that none can write outside the unpack folder
    and that together they unpack to at most ``limit`` bytes (by the sizes the zip declares;
    :func:`_unpack` counts the bytes it really writes as well).

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
    total = sum(info.file_size for info in entries)
    if total > limit:
        raise _too_big(total, limit)
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


def _copy_capped(src, dst, declared: int, written: int, limit: int) -> int:
    """Copy an entry; stop before a write would pass its declared size or ``limit`` in total.
    Returns the running total."""
    copied = 0
    while chunk := src.read(1 << 20):
        copied += len(chunk)
        if copied > declared:
            raise NightlyError("an archive entry holds more than its declared size; refusing to unpack")
        if written + len(chunk) > limit:
            raise _too_big(written + len(chunk), limit)
        dst.write(chunk)
        written += len(chunk)
    return written


def _unpack(zf: zipfile.ZipFile, entries: list[zipfile.ZipInfo], staging: Path,
            progress: Progress, *, limit: int = ARCHIVE_MAX_BYTES) -> None:
    written = 0
    bar = progress.task("unpack llama.cpp", sum(i.file_size for i in entries))
    try:
        for info in entries:
            out = staging.joinpath(*PurePosixPath(info.filename).parts)
            kind = _entry_kind(info)
            if kind == "dir":
                ensure_dir(out, DIR_MODE)
                continue
            ensure_dir(out.parent, DIR_MODE)
            if not out.parent.resolve().is_relative_to(staging.resolve()):
                raise NightlyError(f"archive entry {info.filename!r} leads outside the unpack folder")
            if kind == "symlink":
                os.symlink(zf.read(info).decode("utf-8"), out)
            else:
                mode = _unix_mode(info) & KEEP_MODE or 0o644
                fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
                with os.fdopen(fd, "wb") as dst, zf.open(info) as src:
                    written = _copy_capped(src, dst, info.file_size, written, limit)
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
    match = re.match(ASSET_RE, name)
    record = InstallRecord(
        tag=match["tag"] if match else None, family=match["family"] if match else None,
        asset=name, url=action.url, sha256=action.sha256.lower(),
        files_digest=files_digest(staging))
    path = staging / RECORD_NAME
    path.write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
    path.chmod(FILE_MODE)


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
