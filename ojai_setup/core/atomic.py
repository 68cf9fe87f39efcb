"""Writing a whole file so that readers see the old content or the new, never a part."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    """Write ``text`` to a temp file beside ``path``, fsync it, then rename it over ``path``
    (``mode`` None keeps the temp file's owner-only mode)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
