"""kernelstub (Pop!_OS).

- Detected by ``/etc/kernelstub/configuration``; it outweighs the systemd-boot markers, since
  kernelstub writes systemd-boot's entries itself.
- Deciding file: ``user.kernel_options`` in that JSON file, edited by key as ``kernelstub -a`` /
  ``-d`` change it (``formats/kernelstub.py``).
- Regeneration: ``kernelstub --verbose --preserve-live-mode`` (as Pop's kernel hooks run it);
  generated state: the ESP's ``loader/entries/Pop_OS-current.conf``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ojai_setup.boot.base import (
    ESPS,
    REBOOT,
    Blocked,
    BootPath,
    Claim,
    Machine,
    Markers,
    Plan,
    Planned,
    Want,
    changes,
    check,
    loader_entry,
    read,
)
from ojai_setup.core.root import Root
from ojai_setup.formats.kernel_cmdline import CmdlineFormatError
from ojai_setup.formats.kernel_params import cmdline_param
from ojai_setup.formats.kernelstub import edit_kernel_options, kernel_options
from ojai_setup.model.facts import BootEntry, BootLoader, LoaderKind

if TYPE_CHECKING:  # built only when a step plans (doctor never imports the actions)
    from ojai_setup.model.actions import RunCommand

KERNELSTUB_CONFIG = "/etc/kernelstub/configuration"


class Kernelstub(BootPath):
    kind: LoaderKind = "kernelstub"
    title = "kernelstub"
    edits = f"user.kernel_options in {KERNELSTUB_CONFIG} (what kernelstub -a / -d change)"
    runs = "kernelstub --verbose --preserve-live-mode"
    systemd_boot = True
    outweighs = ("systemd-boot-kernel-install", "uki", "systemd-boot-entries")

    def claim(self, m: Markers) -> Claim | None:
        if not m.kernelstub:
            return None
        return Claim(self.kind, f"{KERNELSTUB_CONFIG} exists (kernelstub writes the EFI stub "
                     "entry" + (" and systemd-boot's entries)" if m.sd_boot else ")"),
                     KERNELSTUB_CONFIG)

    def hint(self, family: str) -> str:
        return "`sudo kernelstub --verbose --preserve-live-mode`"

    def configured(self, root: Root, loader: BootLoader) -> tuple[list[str], str] | None:
        text = read(root, KERNELSTUB_CONFIG)
        return (kernel_options(text), KERNELSTUB_CONFIG) if text is not None else None

    def generated(self, root: Root, loader: BootLoader | None, bls: bool) -> BootEntry | None:
        for mount in ESPS:
            path = f"{mount}/loader/entries/Pop_OS-current.conf"
            if root.exists(path):
                return loader_entry(root, path, mount)
        return None

    def regenerate(self, machine: Machine, want: Want, loader: BootLoader,
                   gen: BootEntry) -> list[RunCommand] | None:
        from ojai_setup.model.actions import RunCommand

        if not machine.which("kernelstub"):
            return None
        return [RunCommand(argv=("kernelstub", "--verbose", "--preserve-live-mode"),
                           needs_root=True, needs_reboot=REBOOT,
                           reason=f"write the ESP entry from {KERNELSTUB_CONFIG}")]

    def plan(self, machine: Machine, want: Want, loader: BootLoader, reads: list[str]) -> Plan:
        """kernelstub's ``user.kernel_options`` (what ``kernelstub -a``/``-d`` change), then a
        kernelstub run writes the ESP entry from it."""
        from ojai_setup.model.actions import RunCommand, WriteFile

        reads.append(KERNELSTUB_CONFIG)
        text = read(machine.root, KERNELSTUB_CONFIG) or ""
        try:
            before = kernel_options(text)
            after = edit_kernel_options(text, want.key, str(want.pages), want.drop)
        except CmdlineFormatError as exc:
            return Blocked(f"{exc} (no file was changed)")
        current = cmdline_param(before, want.key)
        if after == text:
            return Planned([], {}, KERNELSTUB_CONFIG, current=current)
        if not machine.which("kernelstub"):
            return Blocked(f"{KERNELSTUB_CONFIG} exists but kernelstub is not installed; run "
                           f"`sudo kernelstub -a {want.param}` where it is")
        removed = [o for o in before if o not in kernel_options(after)]
        same_as = " ".join([f"kernelstub -a {want.param}"] + [f"-d {o}" for o in removed])
        action = WriteFile(path=KERNELSTUB_CONFIG, before=text, after=after,
                           validate_with="kernelstub", cmdline=check(want, before),
                           needs_root=True, needs_reboot=REBOOT, notify=("kernelstub",),
                           reason=f"set {want.param} in user.kernel_options (what `{same_as}` "
                           "does)")
        handler = RunCommand(argv=("kernelstub", "--verbose", "--preserve-live-mode"),
                             needs_root=True, reason="write the ESP's loader entry from "
                             f"{KERNELSTUB_CONFIG}, as the kernel hooks run it")
        return Planned([action], {"kernelstub": handler}, KERNELSTUB_CONFIG,
                       detail=f" in {KERNELSTUB_CONFIG}'s user.kernel_options (what `sudo "
                       f"{same_as}` does; kernelstub then writes the ESP entry)",
                       said=changes(before, kernel_options(after), KERNELSTUB_CONFIG, want),
                       current=current)


KERNELSTUB = Kernelstub()
