"""The systemd-boot path on a real machine: Debian 12 in qemu under OVMF, rebooted through
systemd-boot 252 with the entries kernel-install writes.

Each test starts a copy of one guest booted once per session from the cached UEFI image with
this checkout's ojai installed (tests/support/vm_uefi.py: the same debootstrap as the BIOS
guest, the ESP made in a chroot, a qemu snapshot of the running guest with its EFI variable
store), runs ojai there as root on ``/`` with the real ``bootctl`` and ``kernel-install``,
reboots, and asserts on ``/proc/cmdline``, the loader entries on the ESP and
``/sys/module/ttm/parameters/pages_limit``. The image has no ``/etc/kernel/cmdline`` (as a
fresh Debian install of systemd-boot), so ojai makes it from the running command line, and the
grub package is still installed, so ``/etc/default/grub`` is a leftover that decides nothing.
"""

from __future__ import annotations

import json

import pytest

from support.vm_ojai import PAGES, SETUP, assert_kernel_default, cmdline_tokens, doctor, live_pages
from support.vm_uefi import uefi_snapshot, uefi_vm  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.vm]

KEY = "ttm.pages_limit"
PARAM = f"{KEY}={PAGES}"
ENTRIES = "/boot/efi/loader/entries"
#: what must stay as it is on a machine GRUB does not boot
GRUB_FILES = "/etc/default/grub /etc/default/grub.d /boot/grub"


def entry_tokens(vm, key: str = KEY) -> dict[str, list[str]]:
    """The ``key=`` tokens of the options line of each loader entry on the ESP."""
    names = vm.succeed(f"ls {ENTRIES}").split()
    assert names, f"no loader entry in {ENTRIES}"
    out = {}
    for name in names:
        lines = [line.split()[1:] for line in vm.succeed(f"cat {ENTRIES}/{name}").splitlines()
                 if line.startswith("options")]
        out[name] = [t for line in lines for t in line if t.startswith(key + "=")]
    return out


def grub_state(vm) -> str:
    """Digests of every GRUB file there is (and the names of those there are not)."""
    return vm.succeed(f"for p in {GRUB_FILES}; do if [ -e $p ]; then find $p -type f -exec "
                      "sha256sum {} +; else echo \"absent $p\"; fi; done")


def loader(vm) -> dict:
    return doctor(vm)["facts"]["boot"]["loader"]


def ttm(vm) -> dict:
    return next(f for f in doctor(vm)["findings"] if f["id"] == "ttm.active")


def test_kernel_cmdline_apply_reboot_active_then_rollback_reboot_original(uefi_vm):
    """The whole path with a leftover /etc/default/grub: ojai creates /etc/kernel/cmdline from
    the running command line, kernel-install writes it into the entry, the reboot makes it
    live; rollback writes the file back without the limit (not removed: kernel-install would
    take /proc/cmdline, which then carries the limit), its kernel-install runs, and the next
    boot is the original. No GRUB file is touched on the way."""
    vm = uefi_vm
    original = live_pages(vm)
    assert original != PAGES
    assert cmdline_tokens(vm, KEY) == []
    vm.succeed("test ! -e /etc/kernel/cmdline")
    grub = grub_state(vm)
    found = loader(vm)
    assert found["kind"] == "systemd-boot-kernel-install", found
    running = [t for t in vm.succeed("cat /proc/cmdline").split() if not t.startswith("initrd=")]

    out = vm.succeed(f"{SETUP} --apply --yes", timeout=1200)
    assert "kernel-install add" in out and "update-grub" not in out, out
    assert vm.succeed("cat /etc/kernel/cmdline").split() == [*running, PARAM]
    assert all(tokens == [PARAM] for tokens in entry_tokens(vm).values()), entry_tokens(vm)
    assert "reboot pending" in ttm(vm)["evidence"]
    assert grub_state(vm) == grub

    vm.reboot()
    assert cmdline_tokens(vm, KEY) == [PARAM]
    assert live_pages(vm) == PAGES
    assert ttm(vm)["severity"] == "pass", ttm(vm)
    vm.succeed(SETUP)  # a new plan has nothing to do (exit code 0)

    back = vm.succeed("ojai rollback --yes", timeout=1200)
    assert "kernel-install" in back, back
    assert vm.succeed("cat /etc/kernel/cmdline").split() == running
    assert all(tokens == [] for tokens in entry_tokens(vm).values()), entry_tokens(vm)

    vm.reboot()
    assert cmdline_tokens(vm, KEY) == []
    assert_kernel_default(live_pages(vm), original)
    assert "not configured" in ttm(vm)["evidence"]
    assert grub_state(vm) == grub


def test_leftover_grub_file_is_not_what_the_plan_edits(uefi_vm):
    """The grub package is installed and /etc/default/grub is there, but systemd-boot booted
    this kernel: doctor names systemd-boot with kernel-install, and the plan writes only
    /etc/kernel/cmdline and runs only kernel-install, never GRUB's file or update-grub."""
    vm = uefi_vm
    vm.succeed("test -f /etc/default/grub && command -v update-grub")
    found = loader(vm)
    assert found["kind"] == "systemd-boot-kernel-install", found
    assert any("GRUB did not boot" in e for e in found["evidence"] + found.get("conflicts", [])), found
    result = vm.execute(SETUP + " --json")
    plan = json.loads(result.stdout)
    step = next(s for s in plan["steps"] if s["step"] == "gpu-memory")
    assert [(a["kind"], a["path"]) for a in step["actions"]] == [
        ("write_file", "/etc/kernel/cmdline")], step
    assert [h["argv"][:2] for h in step["handlers"].values()] == [["kernel-install", "add"]], step
    assert "grub" not in (ttm(vm)["fix"] or "").lower(), ttm(vm)
