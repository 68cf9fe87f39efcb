"""systemd-boot with hand-written loader entries (no kernel-install).

- Detected by systemd-boot on an ESP with loader entries, and no ``/etc/kernel/cmdline``,
  ``/etc/kernel/install.conf`` or entry named as kernel-install names them.
- Deciding file: the default entry (``loader.conf``'s ``default``, else the first in menu
  order), its ``options`` lines edited by key, no other entry (``formats/boot_files.py``).
- Regeneration: none, systemd-boot reads the entry at boot; so the entry is also the generated
  state.
"""

from __future__ import annotations

from ojai_setup.boot.base import (
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
    read,
)
from ojai_setup.boot.kernel_install import INSTALL_CONF, KERNEL_CMDLINE
from ojai_setup.core.root import Root
from ojai_setup.formats.boot_files import edit_entry_options, entry_options
from ojai_setup.formats.kernel_cmdline import CmdlineFormatError
from ojai_setup.formats.kernel_params import cmdline_param
from ojai_setup.model.facts import BootLoader, LoaderKind

class LoaderEntries(BootPath):
    kind: LoaderKind = "systemd-boot-entries"
    title = "systemd-boot with hand-written entries"
    edits = "the options line of the default entry (loader.conf), by key"
    runs = "nothing (systemd-boot reads the entry at boot)"
    has_generated = False
    systemd_boot = True

    def claim(self, m: Markers) -> Claim | None:
        if not (m.sd_boot and m.entries):
            return None
        return Claim(self.kind, f"systemd-boot on {', '.join(m.sd_boot)} with loader entries and "
                     f"no {KERNEL_CMDLINE} or {INSTALL_CONF}: the entries are written by hand",
                     m.default_entry)

    def configured(self, root: Root, loader: BootLoader) -> tuple[list[str], str] | None:
        if not loader.config:
            return None
        text = read(root, loader.config)
        return (entry_options(text), loader.config) if text is not None else None

    def plan(self, machine: Machine, want: Want, loader: BootLoader, reads: list[str]) -> Plan:
        """The ``options`` of the default entry, only that one."""
        from ojai_setup.model.actions import WriteFile

        path = loader.config
        text = read(machine.root, path) if path else None
        if path is None or text is None:
            return Blocked(
                "systemd-boot boots this machine from hand-written entries, but ojai cannot "
                "tell which entry is the default (loader.conf's `default` matches none); add "
                f"{want.param} to the options line of the entry you boot, then reboot")
        reads.append(path)
        try:
            before = entry_options(text)
            after = edit_entry_options(text, want.key, str(want.pages), want.drop, source=path)
        except CmdlineFormatError as exc:
            return Blocked(f"{exc} (no file was changed)")
        current = cmdline_param(before, want.key)
        if after == text:
            return Planned([], {}, path, current=current)
        action = WriteFile(path=path, before=text, after=after, validate_with="loader-entry",
                           cmdline=check(want, before), needs_root=True, needs_reboot=REBOOT,
                           reason=f"set {want.param} ({want.gib} GiB for the GPU) on its options "
                           "line")
        return Planned([action], {}, path,
                       detail=f" in {path} (the entry loader.conf makes the default; other "
                       "entries are left alone)",
                       said=changes(before, entry_options(after), path, want), current=current)


SYSTEMD_BOOT_ENTRIES = LoaderEntries()
