"""A wrong backend for the correctness gate: a copy of a real GGUF with scrambled tensor data.

The copy keeps the header, the metadata and every tensor's type and shape, so llama-server
loads it as the same model; only the bytes of the chosen tensors move: their quantization
blocks are put in reverse order (each block stays whole, so every value stays a finite number
of the same scale, as when a backend reads the right buffer at the wrong place). That is what
a backend computing from wrongly read weights looks like from outside.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import gguf
import numpy as np


def corrupt_copy(source: Path, dest: Path, pattern: str = r"^blk\.\d+\.ffn_down\.weight$") -> list[str]:
    """Copy ``source`` to ``dest`` with the blocks of every tensor whose name matches
    ``pattern`` reversed; returns the names of the tensors changed (at least one)."""
    reader = gguf.GGUFReader(source)
    chosen = [t for t in reader.tensors if re.search(pattern, t.name)]
    if not chosen:
        raise ValueError(f"no tensor of {source} matches {pattern!r}")
    partial = dest.with_name(dest.name + ".partial")
    shutil.copyfile(source, partial)
    with partial.open("r+b") as f:
        for t in chosen:
            block, size = gguf.GGML_QUANT_SIZES[t.tensor_type]
            n_bytes = int(t.n_bytes)
            f.seek(t.data_offset)
            data = np.frombuffer(f.read(n_bytes), dtype=np.uint8).reshape(-1, size)
            f.seek(t.data_offset)
            f.write(data[::-1].tobytes())
    os.replace(partial, dest)
    return [t.name for t in chosen]
