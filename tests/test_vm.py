"""The boot path on a real machine: Debian 12 in qemu, rebooted through its own GRUB.

Each test boots a copy-on-write overlay of the cached image with this checkout's ojai installed
(tests/support/vm.py), runs ojai there as root on ``/`` with the real ``update-grub``,
``grub-mkconfig``, ``update-initramfs`` and the real ``ttm`` module (loaded by the bochs DRM
driver of ``-vga std``), reboots, and asserts on ``/proc/cmdline`` and
``/sys/module/ttm/parameters/pages_limit``. The guest has no AMD GPU, so doctor runs with a
forced profile; it has 6 GiB of RAM so that a 1 GiB GPU budget leaves the OS its 4 GiB.
"""

from __future__ import annotations

import json
import re

import pytest

from support.vm import Machine, overlay, vm_ojai_disk  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.vm]

GIB_PAGES = 262144
PAGES = GIB_PAGES  # --gpu-memory 1
SETUP = "ojai setup --llamacpp none --no-npu --gpu-memory 1"
DOCTOR = "ojai doctor --json --profile strix-halo"
LIVE = "/sys/module/ttm/parameters/pages_limit"
#: what Ubuntu's cloud images ship (/etc/default/grub.d/50-cloudimg-settings.cfg)
CLOUD_DROP_IN = """\
# Cloud Image specific Grub settings for Generic Cloud Images
# CLOUD_IMG: This file was created/modified by the Cloud Image build process

# Set the recordfail timeout
GRUB_RECORDFAIL_TIMEOUT=0

# Do not wait on grub prompt
GRUB_TIMEOUT=0

# Set the default commandline
GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0"
"""


@pytest.fixture
def vm(vm_ojai_disk, tmp_path, request):  # noqa: F811
    """A booted guest on its own overlay; killed (its qemu only) after the test."""
    disk = overlay(vm_ojai_disk, tmp_path / "disk.qcow2")
    machine = Machine(disk, tmp_path / "vm", name=request.node.name[:40])
    machine.start()
    machine.wait_for_boot()
    yield machine
    machine.kill()


def live_pages(vm: Machine) -> int:
    return int(vm.succeed(f"cat {LIVE}").strip())


def cmdline_tokens(vm: Machine, key: str) -> list[str]:
    return [t for t in vm.succeed("cat /proc/cmdline").split() if t.startswith(key + "=")]


def generated_tokens(vm: Machine, key: str) -> list[list[str]]:
    """The ``key=`` tokens of each kernel line in /boot/grub/grub.cfg."""
    lines = [line.split() for line in vm.succeed("cat /boot/grub/grub.cfg").splitlines()
             if re.match(r"\s*linux\s", line)]
    assert lines, "grub.cfg has no kernel line"
    return [[t for t in line if t.startswith(key + "=")] for line in lines]


def doctor(vm: Machine) -> dict:
    result = vm.execute(DOCTOR)
    try:
        return json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"doctor did not print JSON:\n{result}") from None


def ttm_finding(vm: Machine) -> dict:
    return next(f for f in doctor(vm)["findings"] if f["id"] == "ttm.active")


def kill_apply_after_grub_write(vm: Machine) -> str:
    """Start an apply, kill -9 its whole process group as soon as /etc/default/grub holds the
    new limit (before the follow-up commands can finish), and return its output."""
    out = vm.succeed(f"""
        setsid {SETUP} --apply --yes >/root/apply.log 2>&1 </dev/null &
        pid=$!
        for i in $(seq 1 30000); do
            grep -q 'ttm.pages_limit={PAGES}' /etc/default/grub && break
            sleep 0.01
        done
        kill -9 -- -$pid
        wait $pid
        echo "exit=$?"
    """, timeout=900)
    assert "exit=137" in out, f"the apply was not killed in the middle:\n{out}"
    return vm.succeed("cat /root/apply.log")


def test_apply_reboot_active_then_rollback_reboot_original(vm):
    original = live_pages(vm)
    assert original != PAGES
    assert cmdline_tokens(vm, "ttm.pages_limit") == []
    fresh = ttm_finding(vm)
    assert fresh["severity"] == "warn" and "not configured" in fresh["evidence"], fresh

    vm.succeed(f"{SETUP} --apply --yes")
    pending = ttm_finding(vm)
    assert pending["severity"] != "pass" and "reboot pending" in pending["evidence"], pending
    assert generated_tokens(vm, "ttm.pages_limit")[0] == [f"ttm.pages_limit={PAGES}"]

    vm.reboot()
    assert cmdline_tokens(vm, "ttm.pages_limit") == [f"ttm.pages_limit={PAGES}"]
    assert live_pages(vm) == PAGES
    active = ttm_finding(vm)
    assert active["severity"] == "pass", active
    vm.succeed(SETUP)  # a new plan has nothing to do (exit code 0)

    out = vm.succeed("ojai rollback --yes")
    assert "reboot" in out.lower(), out
    assert all(t == [] for t in generated_tokens(vm, "ttm.pages_limit")), \
        "rollback left the limit in grub.cfg"
    vm.reboot()
    assert cmdline_tokens(vm, "ttm.pages_limit") == []
    assert live_pages(vm) == original


def test_drop_in_overriding_the_main_file_ends_active(vm):
    vm.write_file("/etc/default/grub.d/50-cloudimg-settings.cfg", CLOUD_DROP_IN)
    vm.succeed("update-grub")
    vm.succeed(f"{SETUP} --apply --yes")
    vm.reboot()
    assert cmdline_tokens(vm, "ttm.pages_limit") == [f"ttm.pages_limit={PAGES}"]
    assert "console=tty1" in vm.succeed("cat /proc/cmdline").split(), \
        "a token of the drop-in's value was lost"
    assert live_pages(vm) == PAGES
    assert ttm_finding(vm)["severity"] == "pass"


def test_kill_during_apply_then_setup_ends_active(vm):
    kill_apply_after_grub_write(vm)
    report = doctor(vm)
    interrupted = [f for f in report["findings"] if "interrupt" in (f["evidence"] + f["title"]).lower()]
    assert interrupted and interrupted[0]["severity"] in ("warn", "fail"), \
        "doctor does not say an apply was interrupted"
    vm.succeed(f"{SETUP} --apply --yes")
    assert generated_tokens(vm, "ttm.pages_limit")[0] == [f"ttm.pages_limit={PAGES}"]
    vm.reboot()
    assert cmdline_tokens(vm, "ttm.pages_limit") == [f"ttm.pages_limit={PAGES}"]
    assert live_pages(vm) == PAGES
    assert ttm_finding(vm)["severity"] == "pass"
    vm.succeed(SETUP)


def test_kill_during_apply_then_rollback_ends_original(vm):
    original = live_pages(vm)
    grub_before = vm.succeed("sha256sum /etc/default/grub")
    kill_apply_after_grub_write(vm)
    vm.succeed("ojai rollback --yes")
    assert vm.succeed("sha256sum /etc/default/grub") == grub_before
    assert all(t == [] for t in generated_tokens(vm, "ttm.pages_limit"))
    vm.succeed("test -z \"$(find /etc /boot -name '*.ojai-tmp')\"")
    vm.reboot()
    assert cmdline_tokens(vm, "ttm.pages_limit") == []
    assert live_pages(vm) == original
    assert "not configured" in ttm_finding(vm)["evidence"]


def test_modprobe_option_rebuilds_the_initramfs_and_is_live(vm):
    old = GIB_PAGES // 2
    vm.write_file("/etc/modprobe.d/ttm.conf", f"options ttm pages_limit={old}\n")
    vm.succeed("update-initramfs -u", timeout=900)
    vm.succeed(f"{SETUP} --apply --yes", timeout=1200)
    assert vm.succeed("cat /etc/modprobe.d/ttm.conf").split() == [
        "options", "ttm", f"pages_limit={PAGES}"]
    # the initramfs of the kernel that will boot carries the new option
    vm.succeed("rm -rf /tmp/initrd && unmkinitramfs /boot/initrd.img-$(uname -r) /tmp/initrd")
    inside = vm.succeed("cat $(find /tmp/initrd -path '*etc/modprobe.d/ttm.conf')")
    assert inside.split() == ["options", "ttm", f"pages_limit={PAGES}"]
    vm.reboot()
    assert live_pages(vm) == PAGES
    report = doctor(vm)
    findings = {f["id"]: f for f in report["findings"]}
    assert findings["ttm.active"]["severity"] == "pass", findings["ttm.active"]
    assert findings["ttm.sources-agree"]["severity"] == "pass", findings["ttm.sources-agree"]
