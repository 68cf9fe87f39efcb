"""No boot path ojai knows, or several that disagree: nothing is edited.

The step is blocked with what was seen and the ways on (the limit added by hand, or
``--ttm-via modprobe``, which works on any boot path while ttm is a module). Doctor still reads
``grub.cfg`` as the generated state where there is one.
"""

from __future__ import annotations

from ojai_setup.boot.base import Blocked, BootPath, Machine, Plan, Want
from ojai_setup.boot.grub import read_generated
from ojai_setup.core.root import Root
from ojai_setup.model.facts import BootEntry, BootLoader, LoaderKind


class Unknown(BootPath):
    kind: LoaderKind = "unknown"
    title = "an unknown boot path"
    edits = "nothing (blocked; --ttm-via modprobe works)"
    runs = "nothing"

    def generated(self, root: Root, loader: BootLoader | None, bls: bool) -> BootEntry | None:
        return read_generated(root, bls)

    def unconfigured_fix(self, family: str) -> str:
        return ("ojai cannot tell which boot loader decides the next boot: run `ojai setup "
                "--ttm-via modprobe` (options ttm pages_limit= in /etc/modprobe.d), or add "
                "the limit to your boot loader's command line yourself; then reboot.")

    def remove_fix(self, token: str, family: str) -> str:
        return (f"Remove {token} from the kernel command line of the boot loader you boot "
                "(NixOS: boot.kernelParams, then `sudo nixos-rebuild boot`), and reboot.")

    def plan(self, machine: Machine, want: Want, loader: BootLoader, reads: list[str]) -> Plan:
        seen = "; ".join([*loader.evidence, *loader.conflicts]) or "no marker"
        return Blocked(
            f"ojai cannot tell which boot loader decides the next boot, so it edits no "
            f"kernel command line. It saw: {seen}.",
            ways=(f"add {want.param} to the command line of the loader you boot yourself",
                  "--ttm-via modprobe (options ttm pages_limit= in /etc/modprobe.d, which works "
                  "on any boot path while ttm is a module)"))


UNKNOWN = Unknown()
