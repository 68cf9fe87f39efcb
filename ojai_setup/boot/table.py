"""Every boot path ojai knows, by ``boot.loader.kind``: the one table the step, doctor and the
facts ask. A new path is a module of this package with its :class:`~ojai_setup.boot.base.BootPath`,
a line here, its kind in ``model.facts.LoaderKind``, a test machine and a README row."""

from __future__ import annotations

from ojai_setup.boot.base import BootPath
from ojai_setup.boot.grub import GRUB, GRUB_BLS
from ojai_setup.boot.kernel_install import SYSTEMD_BOOT_KERNEL_INSTALL, UKI
from ojai_setup.boot.kernelstub import KERNELSTUB
from ojai_setup.boot.limine import LIMINE
from ojai_setup.boot.loader_entries import SYSTEMD_BOOT_ENTRIES
from ojai_setup.boot.nixos import NIXOS
from ojai_setup.boot.unknown import UNKNOWN

#: in the order their claims are listed when several paths claim one machine
PATHS: dict[str, BootPath] = {p.kind: p for p in (
    GRUB, GRUB_BLS, KERNELSTUB, SYSTEMD_BOOT_KERNEL_INSTALL, UKI, SYSTEMD_BOOT_ENTRIES, LIMINE,
    NIXOS, UNKNOWN)}


def path_of(kind: str | None) -> BootPath:
    """The boot path of ``kind`` (``unknown`` for None or a kind ojai does not know)."""
    return PATHS.get(kind or "unknown", UNKNOWN)
