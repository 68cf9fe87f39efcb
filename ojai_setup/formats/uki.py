"""The kernel command line a unified kernel image carries (pure: bytes in).

A UKI is a PE/COFF executable (the systemd-stub) with the kernel, the initrd and the command
line as sections: ``.linux``, ``.initrd``, ``.cmdline``, ``.uname`` (the kernel release), as
ukify(1) builds it (UAPI.5, Unified Kernel Image). The stub passes ``.cmdline`` to the kernel,
so on a UKI machine the command line is *generated* state: rebuilt from /etc/kernel/cmdline by
``kernel-install add`` (layout=uki) and read back here.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ojai_setup.core.errors import InputError


class UkiError(InputError):
    """Not a PE image, or one without the sections a UKI has."""


class UkiSections(NamedTuple):
    cmdline: str | None
    uname: str | None


def read_sections(data: bytes, source: str = "the image") -> UkiSections:
    """``.cmdline`` and ``.uname`` of a PE image (None when a section is absent)."""
    if data[:2] != b"MZ" or len(data) < 0x40:
        raise UkiError(f"{source}: not a PE image (no MZ header)")
    pe = struct.unpack_from("<I", data, 0x3C)[0]
    if data[pe:pe + 4] != b"PE\0\0":
        raise UkiError(f"{source}: not a PE image (no PE signature)")
    count = struct.unpack_from("<H", data, pe + 6)[0]
    optional = struct.unpack_from("<H", data, pe + 20)[0]
    table = pe + 24 + optional
    found: dict[str, str] = {}
    for i in range(count):
        entry = table + 40 * i
        if entry + 40 > len(data):
            raise UkiError(f"{source}: its section table is cut short")
        name = data[entry:entry + 8].rstrip(b"\0").decode("ascii", errors="replace")
        virtual_size, _, raw_size, raw_at = struct.unpack_from("<IIII", data, entry + 8)
        size = min(virtual_size or raw_size, raw_size)
        if name in (".cmdline", ".uname"):
            found[name] = data[raw_at:raw_at + size].rstrip(b"\0").decode("utf-8", errors="replace")
    return UkiSections(cmdline=found.get(".cmdline"), uname=found.get(".uname"))
