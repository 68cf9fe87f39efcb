"""Follow-up commands (handlers, as Ansible calls them): run once at the end of an apply, and
only if a change that notifies them changed something. One row per kind, by the name actions
notify it with. The command a boot path regenerates its files with is made by that path's
planning (steps/ttm.py); the unit reload every step that writes a systemd unit asks for is
:func:`daemon_reload`."""

from __future__ import annotations

from typing import NamedTuple

from ojai_setup.model.actions import RunCommand


class FollowUp(NamedTuple):
    #: it regenerates what the boot reads (grub.cfg, an initramfs, the loader's entries), so
    #: a file that notifies it is shown whole in the plan, with the boot's files
    boot: bool
    what: str


#: every follow-up an action may notify
FOLLOW_UPS: dict[str, FollowUp] = {
    "systemd": FollowUp(False, "systemctl daemon-reload: load the units written"),
    "update-grub": FollowUp(True, "regenerate grub.cfg (update-grub, grub-mkconfig or grubby)"),
    "initramfs": FollowUp(True, "rebuild the initramfs (update-initramfs, dracut or mkinitcpio)"),
    "limine-update": FollowUp(True, "regenerate Limine's configuration"),
    "kernelstub": FollowUp(True, "write kernelstub's options into the boot entry"),
    "kernel-install": FollowUp(True, "rebuild the boot entries (kernel-install)"),
    "reinstall-kernels": FollowUp(True, "rebuild the boot entries (reinstall-kernels)"),
    "sdbootutil": FollowUp(True, "rebuild the boot entries (sdbootutil)"),
    "power-profiles-daemon": FollowUp(False, "restart power-profiles-daemon"),
    "tuned": FollowUp(False, "restart tuned"),
    "lemonade-backends": FollowUp(False, "install Lemonade's backends (lemonade backends install)"),
    "lemond-restart": FollowUp(False, "restart lemond, which reads its configuration at start"),
}


def follow_up(name: str) -> FollowUp | None:
    """The row of a notified name; a name per kernel (``kernel-install 6.8.0-45``) is its
    kind's."""
    return FOLLOW_UPS.get(name) or FOLLOW_UPS.get(name.split(" ", 1)[0])


def daemon_reload(reason: str) -> RunCommand:
    """The ``systemd`` follow-up: ``systemctl daemon-reload``, as root."""
    return RunCommand(argv=("systemctl", "daemon-reload"), needs_root=True, reason=reason)
