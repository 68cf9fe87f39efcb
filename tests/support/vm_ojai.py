"""What the boot scenarios on the Debian 12 test machine share: a booted guest per test, and
readers of the three states of the TTM limit in it (configured, generated, active)."""

from __future__ import annotations

import json
import re

import pytest

from support.vm import Machine, from_snapshot, vm_booted  # noqa: F401  (fixture)

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
def vm(vm_booted, tmp_path, request):  # noqa: F811
    """A booted guest on its own disk, started from the session's snapshot of a booted guest
    (no boot awaited); killed (its qemu only) after the test."""
    machine = from_snapshot(vm_booted, tmp_path / "vm", request.node.name[:40])
    yield machine
    machine.kill()


def live_pages(vm: Machine) -> int:
    return int(vm.succeed(f"cat {LIVE}").strip())


def assert_kernel_default(live: int, before: int) -> None:
    """``live`` is the kernel's own limit again: half the RAM the kernel counted at boot, which
    moves by a page or so from one boot to the next, and not the planned one."""
    assert live != PAGES, "the planned limit is still live"
    assert abs(live - before) <= before // 1000, f"{live} pages is not the kernel default {before}"


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


