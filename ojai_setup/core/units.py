"""Sizes in words, one way everywhere a person reads them."""

from __future__ import annotations

MIB = 2**20
GIB = 2**30


def size_text(n: int) -> str:
    """``512 bytes``, ``42 MiB``, ``4.2 GiB``."""
    if n >= GIB:
        return gib_text(n)
    if n >= MIB:
        return f"{n / MIB:.0f} MiB"
    return f"{n} bytes"


def gib_text(n: float, digits: int = 1) -> str:
    """``0.5 GiB``, ``62.0 GiB``: always in GiB, for figures read side by side (a memory
    budget and what fits in it, a table's column)."""
    return f"{n / GIB:.{digits}f} GiB"
