"""A wrong backend for the correctness gate: a copy of a real GGUF with scrambled tensor data.

The copy keeps the header, the metadata and every tensor's type and shape, so llama-server
loads it as the same model; only the bytes of the chosen tensors move: their quantization
blocks are put in reverse order (each block stays whole, so every value stays a finite number
of the same scale, as when a backend reads the right buffer at the wrong place). That is what
a backend computing from wrongly read weights looks like from outside.

The tensor table is read here directly (GGUF v3: header, key/value pairs skipped by their
types, tensor infos, data aligned to ``general.alignment``): ``gguf.GGUFReader`` takes seconds
of processor time on a 262k-token vocabulary, this a fraction of one.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from pathlib import Path

import gguf

#: sizes of GGUF's scalar value types (gguf.GGUFValueType), by type number
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def _skip_value(buf: bytes, pos: int, kind: int) -> int:
    if kind in _SCALAR:
        return pos + _SCALAR[kind]
    if kind == _STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if kind == _ARRAY:
        item, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if item in _SCALAR:
            return pos + count * _SCALAR[item]
        for _ in range(count):
            pos = _skip_value(buf, pos, item)
        return pos
    raise ValueError(f"unknown GGUF value type {kind}")


def tensor_table(path: Path) -> list[tuple[str, int, int, int]]:
    """(name, type, absolute data offset, bytes) of every tensor of a GGUF v2/v3 file."""
    with path.open("rb") as f:
        head = f.read(64 << 20)  # the header and metadata (a 262k vocabulary is about 6 MB)
    magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", head, 0)
    if magic != 0x46554747 or version < 2:
        raise ValueError(f"{path} is not a GGUF v2/v3 file")
    pos, alignment = 24, 32
    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", head, pos)
        key = head[pos + 8:pos + 8 + n].decode()
        (kind,) = struct.unpack_from("<I", head, pos + 8 + n)
        pos += 12 + n
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", head, pos)
        pos = _skip_value(head, pos, kind)
    infos = []
    for _ in range(n_tensors):
        (n,) = struct.unpack_from("<Q", head, pos)
        name = head[pos + 8:pos + 8 + n].decode()
        pos += 8 + n
        (dims,) = struct.unpack_from("<I", head, pos)
        shape = struct.unpack_from(f"<{dims}Q", head, pos + 4)
        kind, offset = struct.unpack_from("<IQ", head, pos + 4 + 8 * dims)
        pos += 4 + 8 * dims + 12
        infos.append((name, kind, offset, shape))
    data = (pos + alignment - 1) // alignment * alignment
    out = []
    for name, kind, offset, shape in infos:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(kind)]
        elements = 1
        for d in shape:
            elements *= d
        out.append((name, kind, data + offset, elements // block * size))
    return out


def corrupt_copy(source: Path, dest: Path, pattern: str = r"^blk\.\d+\.ffn_down\.weight$") -> list[str]:
    """Copy ``source`` to ``dest`` with the blocks of every tensor whose name matches
    ``pattern`` reversed; returns the names of the tensors changed (at least one)."""
    chosen = [t for t in tensor_table(source) if re.search(pattern, t[0])]
    if not chosen:
        raise ValueError(f"no tensor of {source} matches {pattern!r}")
    partial = dest.with_name(dest.name + ".partial")
    shutil.copyfile(source, partial)
    with partial.open("r+b") as f:
        for _name, kind, offset, n_bytes in chosen:
            _, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(kind)]
            f.seek(offset)
            data = f.read(n_bytes)
            blocks = [data[i:i + size] for i in range(0, n_bytes, size)]
            f.seek(offset)
            f.write(b"".join(reversed(blocks)))
    os.replace(partial, dest)
    return [t[0] for t in chosen]
