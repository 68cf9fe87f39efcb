"""Reading a GGUF file's pairing metadata from the disk (:mod:`ojai_setup.formats.gguf` says
what it means).

:class:`gguf.GGUFReader` memory-maps the file and never touches tensor data, but its parsing of a
262k-entry vocabulary still takes seconds: :func:`kept_model_info` keeps what it read in ojai's
state folder (``/var/lib/ojai/gguf/``, one small JSON file per model file, keyed by the file's
path, size and mtime), and says when that file cannot be read or written instead of passing
over it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from ojai_setup.core.atomic import ensure_dir, write_text
from ojai_setup.core.root import Root
from ojai_setup.facts.state import state_dir
from ojai_setup.formats.gguf import (
    GGUF_MAGIC,
    GGUFError,
    HeaderIncomplete,
    ModelInfo,
    info_from_reader,
)

#: the folder of the kept metadata, inside ojai's state folder
KEPT_DIR = "gguf"
#: raised when what is kept changes shape, so that older files are read anew
_KEPT_VERSION = 3


def _parse(path: Path) -> ModelInfo:
    import gguf  # numpy comes with it: imported only when a model file is read

    try:
        reader = gguf.GGUFReader(path, "r")
    except (ValueError, KeyError, IndexError, OSError) as exc:
        raise GGUFError(f"{path}: not a readable GGUF file: {exc}") from None
    return info_from_reader(reader, str(path), path.stat().st_size)


def read_model_info(path: str | os.PathLike[str]) -> ModelInfo:
    """Read the pairing metadata of a GGUF file (for a split model: its first shard)."""
    path = Path(path)
    try:
        path.stat()
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not path.is_file():
        raise GGUFError(f"{path}: not a file")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (it starts with {magic.hex() or 'nothing'}, "
                        "not GGUF's magic bytes 47475546)")
    return _parse(path)


def kept_path(root: Root, path: Path) -> Path:
    """Where the metadata read from ``path`` (a real path) is kept for ``root``."""
    name = hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:32]
    return state_dir(root) / KEPT_DIR / f"{name}.json"


def kept_model_info(root: Root, path: str | os.PathLike[str]) -> tuple[ModelInfo, str | None]:
    """:func:`read_model_info`, through the copy kept in ``root``'s state folder while the
    file's size and mtime are unchanged; the second item says why the kept copy could not be
    used or written (None when all went well)."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read: {exc.strerror or exc}") from None
    key = {"version": _KEPT_VERSION, "path": str(path.absolute()), "size": stat.st_size,
           "mtime_ns": stat.st_mtime_ns}
    kept = kept_path(root, path)
    note = None
    try:
        data = json.loads(kept.read_text(encoding="utf-8"))
        if data.get("key") == key:
            return ModelInfo.model_validate({**data["info"], "path": str(path)}), None
    except (FileNotFoundError, NotADirectoryError):
        pass  # nothing kept yet (or no folder to keep it in: the write below says so)
    except OSError as exc:
        note = f"the model's kept metadata {kept} cannot be read ({exc.strerror or exc}); read the model again"
    except (ValueError, KeyError, TypeError, AttributeError, ValidationError):
        note = f"the model's kept metadata {kept} is damaged; read the model again"
    info = _parse(path)
    try:
        ensure_dir(kept.parent)
        write_text(kept, json.dumps({"key": key, "info": info.model_dump()}), mode=0o644)
    except OSError as exc:
        what = f"cannot keep the model's metadata in {kept} ({exc.strerror or exc}): it is read again each time"
        note = f"{note}; {what}" if note else what
    return info, note


def parse_header(data: bytes, file_size: int, name: str) -> ModelInfo:
    """The metadata of a GGUF file from its first bytes only (``data``, e.g. fetched with an
    HTTP range request), ``file_size`` being the whole file's size; ``name`` is what messages
    and :attr:`ModelInfo.path` call it.

    Raises :class:`GGUFError` when the bytes are not GGUF, and :class:`HeaderIncomplete` when
    the header (metadata and tensor list) goes on past ``data``. The bytes are read with
    :class:`gguf.GGUFReader`, from a sparse file of the whole size that holds ``data`` at its
    start: the reader's view of tensor data (zeros here) is never used, and the header counts
    as read only when it ends within ``data``."""
    import gguf

    if data[:4] != GGUF_MAGIC:
        shown = data[:4].hex() if data else "nothing"
        raise GGUFError(f"{name}: not a GGUF file (it starts with {shown}, not GGUF's magic "
                        "bytes 47475546)")
    with tempfile.TemporaryDirectory(prefix="ojai-gguf-") as folder:
        sparse = Path(folder) / "header.gguf"
        with sparse.open("wb") as f:
            f.write(data)
            f.truncate(max(file_size, len(data)))
        try:
            reader = gguf.GGUFReader(sparse, "r")
        except (ValueError, KeyError, IndexError, OverflowError, OSError, MemoryError) as exc:
            if len(data) >= file_size:
                raise GGUFError(f"{name}: not a readable GGUF file: {exc}") from None
            raise HeaderIncomplete(min(file_size, 2 * len(data))) from None
        if reader.data_offset > len(data):
            raise HeaderIncomplete(reader.data_offset)
        info = info_from_reader(reader, name, file_size)
        del reader  # the memory map, before its file goes
    return info


def weights_read_per_token(path: str | os.PathLike[str]) -> int:
    """The bytes of weights one plain decoding step reads from the GGUF file at ``path``
    (:func:`ojai_setup.formats.gguf.weights_read_per_token`)."""
    import gguf

    from ojai_setup.formats.gguf import weights_read_per_token as from_reader

    try:
        reader = gguf.GGUFReader(os.fspath(path), "r")
    except (ValueError, KeyError, IndexError, OSError) as exc:
        raise GGUFError(f"{path}: not a readable GGUF file: {exc}") from None
    return from_reader(reader)
