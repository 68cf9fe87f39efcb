"""Writing a whole file (or link) so that readers see the old content or the new, never a part."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def ensure_dir(path: Path, mode: int = 0o755) -> Path:
    """Create ``path`` and any missing parents, each with exactly ``mode`` whatever the umask.

    Folders that exist already are left as they are (ojai does not change the mode of
    ``/etc`` or ``/opt``); only the ones created here get ``mode``.
    """
    path = Path(path)
    missing: list[Path] = []
    p = path
    while not p.exists() and not p.is_symlink() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            continue  # created meanwhile by someone else: theirs, keep its mode
        os.chmod(d, mode)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a folder")
    return path


def fsync_dir(path: Path) -> None:
    """Make a rename inside the folder ``path`` durable (one that cannot be opened is left)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Replacement:
    """The one way ojai replaces a file, for the apply and the rollback alike (Ansible's
    write-validate-move): a temp file beside ``path`` (``.NAME.*SUFFIX``, which recovery after a
    kill knows), made here, so that a caller can say why when even that fails; :meth:`commit`
    fills it, fsyncs it, gives it its mode and owner, checks it, and renames it over ``path``.
    Until the rename ``path`` is as it was; a failure or a signal removes the temp file."""

    def __init__(self, path: Path, *, suffix: str = ".ojai-tmp") -> None:
        self.path = path
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
        self.tmp = Path(name)
        self._fd: int | None = fd

    def commit(self, content: bytes | Callable[[BinaryIO], None], *, mode: int | None = None,
               owner: tuple[int, int] | None = None, check: Callable[[Path], None] | None = None,
               before_rename: Callable[[], None] | None = None, sync_dir: bool = True) -> None:
        """Write ``content`` (bytes, or a function writing to the open file), fsync, chmod to
        ``mode`` (None: 0600), chown to ``owner`` where it differs, run ``check`` on the temp
        file (it raises to refuse), then ``before_rename`` (a fault point), rename, and fsync
        the folder unless ``sync_dir`` is False."""
        fd, self._fd = self._fd, None
        if fd is None:
            raise ValueError(f"{self.tmp}: already committed")
        try:
            with os.fdopen(fd, "wb") as f:
                if isinstance(content, bytes):
                    f.write(content)
                else:
                    content(f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(self.tmp, 0o600 if mode is None else mode)
            if owner is not None:
                st = os.stat(self.tmp)
                if (st.st_uid, st.st_gid) != owner:
                    os.chown(self.tmp, *owner)
            if check is not None:
                check(self.tmp)
            if before_rename is not None:
                before_rename()
            os.replace(self.tmp, self.path)
        except BaseException:
            self.tmp.unlink(missing_ok=True)
            raise
        if sync_dir:
            fsync_dir(self.path.parent)


def copy_of(src: Path) -> Callable[[BinaryIO], None]:
    """Content for :meth:`Replacement.commit`: the bytes of the file ``src``."""
    def write(out: BinaryIO) -> None:
        with open(src, "rb") as inp:
            shutil.copyfileobj(inp, out)
    return write


def replace_symlink(path: Path, target: str, *,
                    before_rename: Callable[[], None] | None = None,
                    sync_dir: bool = True) -> None:
    """Point ``path`` at ``target``: a new link beside it (``.NAME.ojai-*``), renamed over it."""
    tmp = path.parent / f".{path.name}.ojai-{secrets.token_hex(4)}"
    os.symlink(target, tmp)
    try:
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    """Write ``text`` to a temp file beside ``path``, fsync it, then rename it over ``path``
    (``mode`` None keeps the temp file's owner-only mode, 0600)."""
    Replacement(path, suffix=".tmp").commit(text.encode("utf-8"), mode=mode, sync_dir=False)
