"""Writing a whole file so that readers see the old content or the new, never a part."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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


def write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    """Write ``text`` to a temp file beside ``path``, fsync it, then rename it over ``path``
    (``mode`` None keeps the temp file's owner-only mode, 0600)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600 if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
