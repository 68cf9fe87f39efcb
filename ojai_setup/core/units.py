"""Sizes in words, one way everywhere a person reads them."""

from __future__ import annotations

MIB = 2**20
GIB = 2**30


def size_text(n: int) -> str:
    """``512 bytes``, ``42 MiB``, ``4.2 GiB``."""
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    if n >= MIB:
        return f"{n / MIB:.0f} MiB"
    return f"{n} bytes"
