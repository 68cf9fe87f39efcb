"""The systemd-boot path on a real machine: Debian 12 in qemu under OVMF, rebooted through
systemd-boot 254 (bookworm-backports) with the entries kernel-install writes, or the unified
kernel image its ukify builds.

Each test starts a copy of one guest booted once per session from the cached UEFI image with
this checkout's ojai installed (tests/support/vm_uefi.py: the same debootstrap as the BIOS
guest, the ESP made in a chroot, a qemu snapshot of the running guest with its EFI variable
store), runs ojai there as root on ``/`` with the real ``bootctl`` and ``kernel-install``,
reboots, and asserts on ``/proc/cmdline``, the loader entries on the ESP and
``/sys/module/ttm/parameters/pages_limit``. The image has no ``/etc/kernel/cmdline`` (as a
fresh Debian install of systemd-boot), so ojai makes it from the running command line, and the
grub package is still installed, so ``/etc/default/grub`` is a leftover that decides nothing.
Its initramfs is dracut's (059, in place of initramfs-tools): the entry's loads the GPU's driver
early (``add_drivers+=" bochs "``, as AMD boxes add amdgpu), so ttm loads from it, and beside it
one without ttm; the modprobe.d route is proven
with each (rebuilt and copied to the ESP, or left alone).
"""

from __future__ import annotations

import json

import pytest

from support.vm_ojai import PAGES, SETUP, assert_kernel_default, cmdline_tokens, doctor, live_pages
from support.vm_uefi import DRM_CONF, WITHOUT_TTM, uefi_snapshot, uefi_vm  # noqa: F401


pytestmark = [pytest.mark.slow, pytest.mark.vm]

KEY = "ttm.pages_limit"
PARAM = f"{KEY}={PAGES}"
ENTRIES = "/boot/efi/loader/entries"
MODPROBE_SETUP = f"{SETUP} --ttm-via modprobe"
OJAI_MODPROBE = "/etc/modprobe.d/99-ojai-ttm.conf"
OJAI_DRACUT = "/etc/dracut.conf.d/99-ojai-ttm.conf"
OPTION = ["options", "ttm", f"pages_limit={PAGES}"]
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


def esp_initrd(vm, release: str) -> str:
    """The initramfs the loader entry loads: kernel-install's copy on the ESP."""
    found = vm.succeed(f"find /boot/efi -name 'initrd.img-{release}'").split()
    assert len(found) == 1, found
    return found[0]


def option_lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.startswith("options")]


def test_dracut_initramfs_with_ttm_is_rebuilt_and_the_modprobe_limit_boots(uefi_vm):
    """ttm loads from the initramfs (bochs, loaded early, brings it along), so the
    limit in /etc/modprobe.d counts only once the image the entry loads carries it: ojai
    names its file in a dracut.conf.d drop-in (without host-only, dracut leaves /etc/modprobe.d
    out), rebuilds /boot/initrd.img-R with dracut and has kernel-install copy it to the ESP; after
    the reboot the module holds the limit, with nothing on the kernel command line."""
    vm = uefi_vm
    release = vm.succeed("uname -r").strip()
    esp = esp_initrd(vm, release)
    assert "/ttm/ttm.ko" in vm.succeed(f"lsinitrd {esp}")
    assert live_pages(vm) != PAGES
    grub = grub_state(vm)

    out = vm.succeed(f"{MODPROBE_SETUP} --apply --yes", timeout=1800)
    assert f"dracut --force /boot/initrd.img-{release} {release}" in out, out
    assert "kernel-install add" in out and "update-grub" not in out, out
    assert option_lines(vm.succeed(f"cat {OJAI_MODPROBE}")) == [OPTION]
    # Debian's dracut leaves /etc/modprobe.d out of an image built without host-only: ojai's
    # drop-in names its file
    assert f'install_items+=" {OJAI_MODPROBE} "' in vm.succeed(f"cat {OJAI_DRACUT}")
    inside = vm.succeed(f"lsinitrd -f {OJAI_MODPROBE.lstrip('/')} {esp}")
    assert option_lines(inside) == [OPTION], inside
    vm.succeed("test ! -e /etc/kernel/cmdline")
    assert all(tokens == [] for tokens in entry_tokens(vm).values()), entry_tokens(vm)
    assert grub_state(vm) == grub

    vm.reboot()
    assert cmdline_tokens(vm, KEY) == []
    assert live_pages(vm) == PAGES
    assert ttm(vm)["severity"] == "pass", ttm(vm)
    vm.succeed(MODPROBE_SETUP)  # a new plan has nothing to do (exit code 0)


def test_dracut_initramfs_without_ttm_is_left_alone_and_the_modprobe_limit_boots(uefi_vm):
    """The image dracut makes without the early GPU driver has no ttm: the module loads from the
    root file system after the switch and reads /etc/modprobe.d there, so ojai writes its file
    and rebuilds nothing (the ESP's initramfs stays byte for byte); the reboot makes the limit
    live all the same."""
    vm = uefi_vm
    release = vm.succeed("uname -r").strip()
    vm.succeed(f"rm /etc/dracut.conf.d/{DRM_CONF} && "
               f"cp /boot/{WITHOUT_TTM}{release} /boot/initrd.img-{release} && "
               f"kernel-install add {release} /boot/vmlinuz-{release} /boot/initrd.img-{release}")
    esp = esp_initrd(vm, release)
    assert "/ttm/ttm.ko" not in vm.succeed(f"lsinitrd {esp}")
    before = vm.succeed(f"sha256sum {esp} /boot/initrd.img-{release}")

    plan = vm.execute(MODPROBE_SETUP)
    assert plan.exit_code == 2, plan
    assert "does not carry ttm" in " ".join(plan.stdout.split()), plan.stdout
    out = vm.succeed(f"{MODPROBE_SETUP} --apply --yes", timeout=1200)
    assert "dracut" not in out and "kernel-install" not in out, out
    assert option_lines(vm.succeed(f"cat {OJAI_MODPROBE}")) == [OPTION]
    assert vm.succeed(f"sha256sum {esp} /boot/initrd.img-{release}") == before
    vm.succeed(f"test ! -e {OJAI_DRACUT}")

    vm.reboot()
    assert cmdline_tokens(vm, KEY) == []
    assert live_pages(vm) == PAGES
    assert ttm(vm)["severity"] == "pass", ttm(vm)


#: kernel-install's configuration for unified kernel images built by ukify (kernel-install(8))
UKI_INSTALL_CONF = "layout=uki\nuki_generator=ukify\n"
LOADER_ENTRY_SELECTED = "/sys/firmware/efi/efivars/LoaderEntrySelected-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"


def test_uki_built_by_ukify_gets_the_limit_then_boots_with_it(uefi_vm):
    """kernel-install with ``layout=uki`` (systemd 254's ukify and its 60-ukify.install) builds
    a unified kernel image into EFI/Linux on the ESP, its command line sealed inside, and
    systemd-boot boots it: doctor names the path ``uki``; ojai makes /etc/kernel/cmdline and
    kernel-install add builds the image anew with it (its .cmdline section carries the
    limit); the reboot makes the limit live. No loader entry or GRUB file is written."""
    vm = uefi_vm
    release = vm.succeed("uname -r").strip()
    vm.write_file("/etc/kernel/install.conf", UKI_INSTALL_CONF)
    vm.succeed(f"kernel-install add {release} /boot/vmlinuz-{release} /boot/initrd.img-{release}",
               timeout=1200)
    ukis = vm.succeed("find /boot/efi/EFI/Linux -name '*.efi'").split()
    assert len(ukis) == 1 and release in ukis[0], ukis
    vm.succeed(f"rm {ENTRIES}/*.conf")  # the type 1 entry goes: only the image is left to boot
    vm.reboot()
    selected = vm.succeed(f"tr -d '\\000' < {LOADER_ENTRY_SELECTED}")
    assert ukis[0].rsplit("/", 1)[1] in selected, selected
    assert loader(vm)["kind"] == "uki", loader(vm)
    original = live_pages(vm)
    assert original != PAGES and cmdline_tokens(vm, KEY) == []
    grub = grub_state(vm)

    out = vm.succeed(f"{SETUP} --apply --yes", timeout=1800)
    assert "kernel-install add" in out and "update-grub" not in out, out
    assert PARAM in vm.succeed("cat /etc/kernel/cmdline").split()
    generated = doctor(vm)["facts"]["boot"]["generated"]
    assert generated["config"] == ukis[0] and PARAM in generated["tokens"], generated
    assert "reboot pending" in ttm(vm)["evidence"]
    assert vm.succeed(f"ls {ENTRIES}").split() == []
    assert grub_state(vm) == grub

    vm.reboot()
    assert ukis[0].rsplit("/", 1)[1] in vm.succeed(f"tr -d '\\000' < {LOADER_ENTRY_SELECTED}")
    assert cmdline_tokens(vm, KEY) == [PARAM]
    assert live_pages(vm) == PAGES
    assert ttm(vm)["severity"] == "pass", ttm(vm)
    vm.succeed(SETUP)  # a new plan has nothing to do (exit code 0)
