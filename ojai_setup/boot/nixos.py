"""NixOS: the command line comes from the system's configuration (``boot.kernelParams``).

- Detected by ``/etc/NIXOS``, or ``ID=nixos`` in os-release; it outweighs every other marker.
- Deciding file: ``/etc/nixos/configuration.nix`` (or a flake's host module), never edited:
  the step is satisfied when the limit is active on ``/proc/cmdline`` or a literal
  ``kernelParams`` list under ``/etc/nixos`` holds it (``formats/nix.py``), else blocked with
  the line to add.
- Regeneration: ``nixos-rebuild boot``, said, not run.
"""

from __future__ import annotations

from ojai_setup.boot.base import Blocked, BootPath, Machine, Plan, Satisfied, Want, read
from ojai_setup.formats.kernel_params import param_key, same_key
from ojai_setup.model.facts import BootLoader, LoaderKind

#: where a NixOS configuration usually sets its kernel parameters (flakes keep theirs elsewhere)
NIXOS_CONFIG_DIR = "/etc/nixos"
NIXOS_CONFIG = "/etc/nixos/configuration.nix"


def _configured(machine: Machine, want: Want, reads: list[str]) -> str | None:
    """The file of /etc/nixos whose literal ``kernelParams`` hold exactly ``want``, or None."""
    from ojai_setup.formats.nix import kernel_params

    for path in sorted(machine.root.glob(f"{NIXOS_CONFIG_DIR}/**/*.nix")):
        reads.append(path)
        params = kernel_params(read(machine.root, path) or "")
        if [p for p in params if same_key(param_key(p), want.key)][-1:] == [want.param]:
            return path
    return None


class Nixos(BootPath):
    kind: LoaderKind = "nixos"
    title = "NixOS"
    edits = f"nothing: boot.kernelParams in {NIXOS_CONFIG} (said, not edited)"
    runs = "nixos-rebuild boot"

    def evidence(self, marker: str) -> str:
        return f"{marker}: the kernel command line comes from the NixOS configuration " \
               "(boot.kernelParams)"

    def hint(self, family: str) -> str:
        return "`sudo nixos-rebuild boot`"

    def unconfigured_fix(self, family: str) -> str:
        return ("Add the limit `ojai setup` names to boot.kernelParams in "
                f"{NIXOS_CONFIG}, run `sudo nixos-rebuild boot`, then reboot.")

    def remove_fix(self, token: str, family: str) -> str:
        return (f"Remove {token} from the kernel command line of the boot loader you boot "
                "(NixOS: boot.kernelParams, then `sudo nixos-rebuild boot`), and reboot.")

    def plan(self, machine: Machine, want: Want, loader: BootLoader, reads: list[str]) -> Plan:
        """ojai never edits the configuration, but the limit set there (or active now) is the
        limit, so the step is satisfied by it."""
        ttm = machine.facts.ttm
        active = (ttm is not None and ttm.cmdline_key is not None
                  and same_key(ttm.cmdline_key, want.key) and ttm.cmdline_pages == want.pages)
        configured = _configured(machine, want, reads)
        if active or configured:
            where = ("active on /proc/cmdline" if active else "") + (
                (" and " if active else "") + f"configured in {configured}" if configured else "")
            pending = "" if active else (
                "; it becomes active after `sudo nixos-rebuild boot` and a reboot, if not done yet")
            return Satisfied(
                f"{want.param} ({want.gib} GiB for the GPU) is {where} (NixOS builds the "
                f"command line from boot.kernelParams; ojai does not edit it){pending}")
        return Blocked(
            "NixOS builds the kernel command line from its configuration; ojai does not "
            "edit it.",
            ways=(f"add `boot.kernelParams = [ \"{want.param}\" ];` to "
                  f"{NIXOS_CONFIG} (or your flake's host module), then run "
                  "`sudo nixos-rebuild boot` and reboot",))


NIXOS = Nixos()
