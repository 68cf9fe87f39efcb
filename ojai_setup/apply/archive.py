"""Carrying out an :class:`~ojai_setup.model.actions.InstallArchive`: download the nightly
archive (Lemonade's flat zip, or upstream llama.cpp's tarball with its top folder), check its
sha256 before anything is unpacked, check every entry, unpack the folder that holds
``llama-server`` into a temp folder, record, rename into place and switch the ``current``
link."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Union

from ojai_setup.apply.download import download, part_path
from ojai_setup.apply.executor import ActionOutcome, fault_point
from ojai_setup.apply.links import swap_in, switch_link
from ojai_setup.core.atomic import ensure_dir
from ojai_setup.core.paths import ARCHIVE_EXPANSION, ARCHIVE_MAX_BYTES, DIR_MODE, FILE_MODE
from ojai_setup.core.progress import Progress
from ojai_setup.core.root import Root
from ojai_setup.domain.nightly import (
    RECORD_NAME,
    SERVER_NAME,
    InstallRecord,
    NightlyError,
    match_asset,
)
from ojai_setup.facts.llama_install import files_digest, is_installed
from ojai_setup.model.actions import InstallArchive

#: modes an unpacked file may keep: no setuid/setgid/sticky, not writable by group or others
KEEP_MODE = 0o755


Archive = Union[zipfile.ZipFile, tarfile.TarFile]


@dataclass(frozen=True)
class Member:
    """One entry of a zip or a tarball, as the checks and the unpacking see it."""

    name: str
    #: file, dir, symlink, or what else it is (refused)
    kind: str
    size: int
    #: the permission bits the archive records (0: none)
    mode: int
    #: a symlink's target
    target: str | None
    info: zipfile.ZipInfo | tarfile.TarInfo
    #: where it goes, relative to the install folder (set by :func:`check_archive`)
    out: str = ""


# -- the executor -----------------------------------------------------------------------------
def execute_install_archive(root: Root, action: InstallArchive,
                            progress: Progress) -> ActionOutcome:
    """Carry out ``action``; say whether anything changed.

    A verified install already in place is left alone (only the link is corrected if it
    points elsewhere). Otherwise the archive is downloaded next to ``action.dest``, its sha256
    checked, every entry checked, unpacked into a temp folder, recorded, and renamed into
    place; then ``action.link`` is switched atomically. Raises :class:`NightlyError` or
    :class:`~ojai_setup.apply.download.DownloadError`; the previous install and link stay as they
    were, and the temp files of this run are removed.
    """
    dest = root.resolve(action.dest)
    parent = dest.parent
    name = _archive_name(action.url)
    tarball = name.endswith((".tar.gz", ".tgz"))
    archive = parent / f".{dest.name}.{'tar.gz' if tarball else 'zip'}"
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
    try:
        download(action.url, archive, sha256=action.sha256, size=action.size,
                 progress=progress, description=f"download {name}")
        limit = unpack_limit(action.size)
        with (tarfile.open(archive, "r:gz") if tarball else zipfile.ZipFile(archive)) as af:
            entries = check_archive(af, limit=limit, tops=_tops(name))
            staging.mkdir()
            staging.chmod(DIR_MODE)
            _unpack(af, entries, staging, progress, limit=limit)
        archive.unlink()
        _finish_tree(staging)
        _write_record(staging, action)
        _move_into_place(staging, dest, retired)
    except zipfile.BadZipFile as exc:
        raise NightlyError(f"{name} is not a readable zip: {exc}") from exc
    except (tarfile.TarError, EOFError) as exc:
        raise NightlyError(f"{name} is not a readable gzip'd tar: {exc}") from exc
    except OSError as exc:
        raise NightlyError(f"installing into {action.dest} failed: {exc}") from exc
    finally:
        _remove(archive, staging)
    _remove(retired)
    _switch_link(root, action)
    return ActionOutcome(True, f"installed {name} into {action.dest}"
                               + (f"; {action.link} points to it" if action.link else ""))


def unpack_limit(size: int | None) -> int:
    """How many bytes unpacking an archive of ``size`` bytes may write: :data:`ARCHIVE_EXPANSION`
    times its size (as the release API states it), never more than :data:`ARCHIVE_MAX_BYTES`."""
    if size is None or size <= 0:
        return ARCHIVE_MAX_BYTES
    return min(size * ARCHIVE_EXPANSION, ARCHIVE_MAX_BYTES)


def _too_big(total: int, limit: int) -> NightlyError:
    return NightlyError(
        f"the archive unpacks to more than {limit} bytes ({total} bytes so far), more than "
        f"{ARCHIVE_EXPANSION} times its size or {ARCHIVE_MAX_BYTES >> 30} GiB; refusing to unpack it")


def members(af: Archive) -> list[Member]:
    """Every entry of the zip or tarball ``af``, with its kind, size, mode and link target."""
    if isinstance(af, zipfile.ZipFile):
        found = []
        for info in af.infolist():
            kind = _entry_kind(info)
            target = af.read(info).decode("utf-8", errors="replace") if kind == "symlink" else None
            found.append(Member(info.filename, kind, info.file_size,
                                stat.S_IMODE(_unix_mode(info)), target, info))
        return found
    found = []
    for info in af.getmembers():
        kind = ("file" if info.isreg() else "dir" if info.isdir() else
                "symlink" if info.issym() else "hard link" if info.islnk() else
                "character device" if info.ischr() else "block device" if info.isblk() else
                "FIFO" if info.isfifo() else "special file")
        found.append(Member(info.name, kind, info.size if info.isreg() else 0,
                            stat.S_IMODE(info.mode), info.linkname if info.issym() else None,
                            info))
    return found


def check_archive(af: Archive, *, limit: int = ARCHIVE_MAX_BYTES,
                  tops: tuple[str, ...] = (".",)) -> list[Member]:
    """Every entry of ``af`` to unpack, after checking that none can write outside the unpack
    folder and that together they unpack to at most ``limit`` bytes (by the sizes the archive
    declares; :func:`_unpack` counts the bytes it really writes as well).

    Refused: absolute names, ``..`` components, backslashes, device/FIFO/socket entries and
    hard links, and symlinks whose target is absolute or climbs with ``..`` (a link only ever
    points down into the tree, so chains of links cannot escape either). The archive must hold
    one ``llama-server``, in one of the folders ``tops`` (``.``: the top level, as in Lemonade's
    zips; ``llama-<tag>`` of upstream's tarballs, ``build/bin`` of its older zips); what is
    unpacked is that folder, and an entry outside it, other than the folders above it, is
    refused.
    """
    entries = [m for m in members(af) if m.name.rstrip("/") not in ("", ".")]
    seen: set[str] = set()
    for m in entries:
        name = m.name
        where = f"archive entry {name!r}"
        if not name or "\0" in name or "\\" in name:
            raise NightlyError(f"{where}: unusable name; refusing to unpack")
        path = PurePosixPath(name)
        if path.is_absolute() or re.match(r"^[A-Za-z]:", name):
            raise NightlyError(f"{where} is an absolute path; refusing to unpack")
        if ".." in path.parts:
            raise NightlyError(f"{where} climbs out with '..'; refusing to unpack")
        if m.kind not in ("file", "dir", "symlink"):
            raise NightlyError(f"{where} is a {m.kind}; refusing to unpack")
        if m.kind == "symlink":
            target = m.target or ""
            link = PurePosixPath(target)
            if not target or link.is_absolute() or ".." in link.parts or "\0" in target:
                raise NightlyError(
                    f"{where} is a symlink to {target!r}, outside the archive; refusing to unpack")
        key = path.as_posix()
        if key in seen:
            raise NightlyError(f"{where} appears twice; refusing to unpack")
        seen.add(key)
    total = sum(m.size for m in entries)
    if total > limit:
        raise _too_big(total, limit)
    servers = [PurePosixPath(m.name) for m in entries if m.kind != "dir" and
               PurePosixPath(m.name) in {PurePosixPath(t, SERVER_NAME) for t in tops}]
    if len(servers) != 1:
        where = "at its top level" if tops == (".",) else \
            "in " + " or ".join(f"{t}/" for t in tops)
        raise NightlyError(f"the archive has {'no' if not servers else 'more than one'} "
                           f"{SERVER_NAME} {where}; refusing to install it")
    top = servers[0].parent
    above = {p.as_posix() for p in [top, *top.parents] if p.as_posix() != "."}
    kept = []
    for m in entries:
        path = PurePosixPath(m.name)
        if top.as_posix() != "." and not path.is_relative_to(top):
            if m.kind == "dir" and path.as_posix() in above:
                continue  # a folder above the one unpacked
            raise NightlyError(f"archive entry {m.name!r} lies outside {top.as_posix()}/, the "
                               f"folder that holds {SERVER_NAME}; refusing to unpack")
        rel = path.relative_to(top).as_posix() if top.as_posix() != "." else path.as_posix()
        if rel == ".":
            continue  # the unpacked folder itself
        kept.append(Member(m.name, m.kind, m.size, m.mode, m.target, m.info, out=rel))
    return kept


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


def _open_member(af: Archive, m: Member) -> IO[bytes]:
    if isinstance(af, zipfile.ZipFile):
        return af.open(m.info)  # type: ignore[arg-type]
    src = af.extractfile(m.info)  # type: ignore[arg-type]
    if src is None:
        raise NightlyError(f"archive entry {m.name!r} cannot be read; refusing to unpack")
    return src


def _unpack(af: Archive, entries: list[Member] | list[zipfile.ZipInfo], staging: Path,
            progress: Progress, *, limit: int = ARCHIVE_MAX_BYTES) -> None:
    checked = [e if isinstance(e, Member) else
               next(m for m in members(af) if m.info is e) for e in entries]
    written = 0
    bar = progress.task("unpack llama.cpp", sum(m.size for m in checked))
    try:
        for m in checked:
            out = staging.joinpath(*PurePosixPath(m.out or m.name).parts)
            if m.kind == "dir":
                ensure_dir(out, DIR_MODE)
                continue
            ensure_dir(out.parent, DIR_MODE)
            if not out.parent.resolve().is_relative_to(staging.resolve()):
                raise NightlyError(f"archive entry {m.name!r} leads outside the unpack folder")
            if m.kind == "symlink":
                os.symlink(m.target or "", out)
            else:
                mode = m.mode & KEEP_MODE or 0o644
                fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
                with os.fdopen(fd, "wb") as dst, _open_member(af, m) as src:
                    written = _copy_capped(src, dst, m.size, written, limit)
                os.chmod(out, mode)  # the umask may have dropped bits the archive gave
            bar.advance(m.size)
    finally:
        bar.done()


def _finish_tree(staging: Path) -> None:
    """Make ``llama-server`` executable: a zip made without Unix modes carries none."""
    server = staging / SERVER_NAME
    if server.is_symlink() or not server.is_file():
        raise NightlyError(f"{SERVER_NAME} in the archive is not a regular file; refusing to install it")
    mode = stat.S_IMODE(server.stat().st_mode)
    server.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH | stat.S_IRUSR)


def _tops(name: str) -> tuple[str, ...]:
    """Where the archive ``name`` keeps ``llama-server``: upstream's Vulkan tarball in its top
    folder ``llama-<tag>``, its older zip in ``build/bin``; Lemonade's zips at the top level."""
    match = match_asset(name)
    if match is not None and match["family"] == "vulkan":
        return (f"llama-{match['tag']}",) if name.endswith(".tar.gz") else ("build/bin",)
    return (".",)


def _archive_name(url: str) -> str:
    return PurePosixPath(urllib.parse.urlsplit(url).path).name


def _write_record(staging: Path, action: InstallArchive) -> None:
    name = _archive_name(action.url)
    match = match_asset(name)
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
