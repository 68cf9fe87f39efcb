"""What is installed of llama-server on the machine: the install record of a source build or of
a release archive, and whether a folder holds exactly that build or archive, unchanged (read
through the root; :mod:`ojai_setup.domain.build` and :mod:`ojai_setup.domain.nightly` plan
them)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ojai_setup.core.paths import LLAMACPP_CURRENT, LLAMACPP_DIR
from ojai_setup.core.root import Root
from ojai_setup.domain.nightly import RECORD_NAME, SERVER_NAME, VULKAN
from ojai_setup.domain.nightly import InstallRecord as ArchiveRecord
from ojai_setup.model.actions import BuildFromSource, is_git_url

if TYPE_CHECKING:  # a source build's module is imported only when one is asked about
    from ojai_setup.domain.build import InstallRecord


# -- a source build ----------------------------------------------------------------------------
def read_install_record(root: Root, dest: str) -> InstallRecord | None:
    """The record of a finished install at machine path ``dest``, or None."""
    from ojai_setup.domain.build import INSTALL_RECORD, InstallRecord

    path = root.resolve(dest) / INSTALL_RECORD
    try:
        return InstallRecord.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_built(root: Root, action: BuildFromSource) -> bool:
    """Whether ``action.dest`` already holds this exact build.

    Only a tarball (same sha256) or a git source at a tag or commit counts; a directory
    source may have changed since, so it is always rebuilt.
    """
    from ojai_setup.domain.build import _SHA, SERVER, build_number_from_ref

    record = read_install_record(root, action.dest)
    if record is None or not (root.resolve(action.dest) / SERVER).is_file():
        return False
    same = (record.source == action.source and record.ref == action.ref
            and record.backend == action.backend and record.gpu_target == action.gpu_target
            and record.extra_cmake_args == action.cmake_args)
    if not same:
        return False
    if record.source_kind == "tarball":
        return record.source_sha256 == _tarball_digest(root, action)
    return record.source_kind == "git" and action.ref is not None and (
        _SHA.match(action.ref) is not None or build_number_from_ref(action.ref) is not None)


def _tarball_digest(root: Root, action: BuildFromSource) -> str | None:
    """The sha256 of a local tarball source, None for directories and git URLs."""
    from ojai_setup.core.digest import sha256_file

    if is_git_url(action.source):
        return None
    real = root.resolve(action.source)
    return sha256_file(real) if real.is_file() else None


# -- a release archive -------------------------------------------------------------------------
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


def read_record(root: Root, dest: str) -> ArchiveRecord | None:
    """The install record in machine folder ``dest``, or None when absent or unreadable."""
    try:
        return ArchiveRecord.model_validate_json(root.read_bytes(f"{dest}/{RECORD_NAME}"))
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


# -- which link a build goes behind ------------------------------------------------------------
def link_backend(root: Root, link: str) -> str | None:
    """The ggml backend of the build behind machine path ``link`` (``hip``, ``vulkan`` or
    ``cpu``): a source build's record says it; a release archive is upstream's Vulkan build or
    one of Lemonade's ROCm builds. None when no build with a readable record is behind it."""
    built = read_install_record(root, link)
    if built is not None:
        return built.backend
    archive = read_record(root, link)
    if archive is not None:
        return "vulkan" if archive.family == VULKAN else "hip"
    return None


def install_link(root: Root, backend: str | None) -> str:
    """The link a build of ``backend`` is installed behind, and that the routes of its plan
    run: ``current`` while no build is current or the current build has the same backend (a
    new build of it is an upgrade); else a link named after the backend beside it
    (``/opt/ojai/llama.cpp/vulkan``), so that a second backend installs beside the first and
    the routes written for the first keep running it."""
    if backend is None:
        return LLAMACPP_CURRENT
    current = link_backend(root, LLAMACPP_CURRENT)
    return LLAMACPP_CURRENT if current in (None, backend) else f"{LLAMACPP_DIR}/{backend}"
