"""The boot path on a real machine: Debian 12 in qemu, rebooted through its own GRUB.

Each test starts a copy of one guest booted once per session from the cached image with this
checkout's ojai installed (tests/support/vm.py: a qemu snapshot of the running guest, so no
test waits for a first boot), runs ojai there as root on ``/`` with the real ``update-grub``,
``grub-mkconfig``, ``update-initramfs`` and the real ``ttm`` module (loaded by the bochs DRM
driver of ``-vga std``), reboots, and asserts on ``/proc/cmdline`` and
``/sys/module/ttm/parameters/pages_limit``. The guest has no AMD GPU, so doctor runs with a
forced profile; it has 6 GiB of RAM so that a 1 GiB GPU budget leaves the OS its 4 GiB.

Scenarios: apply, reboot, active, rollback, reboot, original; a modprobe.d option rebuilt into
the initramfs and live; a ``grub.d`` drop-in that sets GRUB_CMDLINE_LINUX_DEFAULT (as cloud
images ship) overriding /etc/default/grub, where the edit must land in what grub-mkconfig
takes; ``kill -9`` in the middle of an apply (after the GRUB write, before update-grub), then
``setup`` or ``rollback``, consistent after a reboot; a model download that fails after
planning (the hub stand-in, inside the guest, stopped) leaves the guest booting with its old
limit, and the apply run again finishes the job.
"""

from __future__ import annotations

import pytest

from support.vm_ojai import (  # noqa: F401  (vm, vm_booted: fixtures)
    CLOUD_DROP_IN,
    GIB_PAGES,
    PAGES,
    SETUP,
    assert_kernel_default,
    cmdline_tokens,
    doctor,
    generated_tokens,
    kill_apply_after_grub_write,
    live_pages,
    put_model_route,
    start_guest_hub,
    stop_guest_hub,
    ttm_finding,
    vm,
    vm_booted,
)

pytestmark = [pytest.mark.slow, pytest.mark.vm]


def test_a_reset_boots_in_a_new_qemu_and_a_power_off_ends_the_guest(vm):
    """The driver's reboots: the guest's own reset (``systemctl reboot`` sent, not awaited)
    ends its qemu (``-no-reboot``) and a new one boots the same disk through its GRUB, the
    guest's writes kept; a power-off by the guest ends it for good."""
    from support.vm import VMError

    first, boot = vm._proc.pid, vm.boot_id
    vm.succeed("echo kept > /root/before-reset && sync")
    vm.send("systemctl reboot")
    assert vm.wait_for_boot() != boot
    assert vm._proc.pid != first and vm._generation == 2
    assert "BOOT_IMAGE=" in vm.succeed("cat /proc/cmdline")
    assert vm.succeed("cat /root/before-reset").strip() == "kept"
    vm.send("systemctl poweroff")
    with pytest.raises(VMError, match="qemu exited while waiting"):
        vm.execute("sleep 600", timeout=300)
    assert vm._proc.returncode == 0 and vm._generation == 2


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
    assert_kernel_default(live_pages(vm), original)


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
    assert_kernel_default(live_pages(vm), original)
    assert "not configured" in ttm_finding(vm)["evidence"]


def test_a_download_failing_after_planning_leaves_the_old_boot_and_a_rerun_finishes(vm, tmp_path):
    from support.gguf_files import gemma4_assistant, gemma4_main

    repo = "ojai-test/tiny-gemma4-GGUF"
    files = [gemma4_main(tmp_path / "gemma-4-tiny-it-Q4_K_M.gguf", payload_bytes=4096),
             gemma4_assistant(tmp_path / "mtp-gemma-4-tiny-it.gguf", payload_bytes=4096)]
    setup = put_model_route(vm, repo, "tiny-gemma", files)
    original = live_pages(vm)
    boot_files = "sha256sum /etc/default/grub /boot/grub/grub.cfg"
    before = vm.succeed(boot_files)
    start_guest_hub(vm, repo, cut_after=1000)  # answers planning, then cuts the download
    vm.succeed(f"{setup}; test $? -eq 2")  # planned: the hub serves both files

    failed = vm.fail(f"{setup} --apply --yes")
    said = " ".join(failed.stderr.split())
    assert failed.exit_code == 1 and "download stopped after" in said, failed
    assert "the boot configuration was not touched" in said, failed
    stop_guest_hub(vm)
    assert vm.succeed(boot_files) == before
    owed = next(f for f in doctor(vm)["findings"] if f["id"] == "ojai.apply")
    assert owed["severity"] == "pass", owed  # nothing owed: no regeneration, no half apply
    vm.reboot()
    assert cmdline_tokens(vm, "ttm.pages_limit") == []
    assert_kernel_default(live_pages(vm), original)

    start_guest_hub(vm, repo)
    vm.succeed(f"{setup} --apply --yes")
    got = vm.succeed("find /var/lib/ojai/models -name '*.gguf' -printf '%f\\n' | sort").split()
    assert got == sorted(f.name for f in files)
    assert generated_tokens(vm, "ttm.pages_limit")[0] == [f"ttm.pages_limit={PAGES}"]
    pending = ttm_finding(vm)
    assert "reboot pending" in pending["evidence"], pending
    vm.succeed(setup)  # nothing left to do
