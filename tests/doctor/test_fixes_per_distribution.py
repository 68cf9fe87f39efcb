"""Fixes in each machine's own terms, on the machine folders of tests/machines: the package
manager of its distribution (checks/tables/distributions.toml), no driver to install where the
running kernel carries it (amdxdna is in-tree from Linux 7.0: FastFlowLM's Linux guide), the one
command this machine's boot path regenerates with, no NPU advice where there is no NPU, and the
boot path's own name in doctor's table of facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.doctor import diagnose
from ojai_setup.core.root import Root
from tests.support.text import flat

MACHINES = Path(__file__).parents[1] / "machines"


def finding(name: str, fid: str) -> dict:
    report = diagnose(Root(MACHINES / name))
    return next(f.model_dump() for f in report.findings if f.id == fid)


@pytest.mark.parametrize("name, command, kernel", [
    ("arch-sdboot-leftover-grub", "`sudo pacman -S xrt xrt-plugin-amdxdna`", "6.17.9-arch1-1"),
    ("cachyos-limine", "`sudo pacman -S xrt xrt-plugin-amdxdna`", "6.19.8-1-cachyos"),
    ("fedora-bls-stale", "Fedora and RHEL package no XRT", "6.17.7-300.fc43.x86_64"),
    ("opensuse-grub", "no openSUSE package of XRT", "6.17.8-1-default"),
])
def test_npu_driver_fix_speaks_the_distributions_package_manager(name, command, kernel):
    """Kernels before 7.0 on distributions without Lemonade's PPA: a 7.0 kernel (whose amdxdna
    is the driver) and the runtime by the distribution's own manager, never the Ubuntu PPA."""
    fix = finding(name, "npu.device")["fix"]
    assert command in fix, fix
    assert "Boot a Linux 7.0 or newer kernel" in fix and f"running {kernel}" in fix
    assert "ppa:" not in fix and "apt " not in fix and "amdxdna-dkms" not in fix


def test_ubuntu_before_7_0_gets_the_ppa_and_the_dkms_driver():
    fix = finding("strix-halo-dkms", "npu.device")["fix"]  # Ubuntu, 6.14.0-1014-oem
    assert ("`sudo add-apt-repository ppa:lemonade-team/stable && sudo apt update && sudo apt "
            "install libxrt-npu2 amdxdna-dkms`") in fix


def test_debian_is_not_sent_to_an_ubuntu_ppa():
    fix = finding("strix-halo-debian13-grub-dropin", "npu.device")["fix"]
    assert "ppa:" not in fix and "no Debian package of XRT" in fix


def test_no_driver_to_install_where_the_running_kernel_carries_it():
    """NixOS on kernel 7.1.0 with /dev/accel/accel0: the in-tree amdxdna (which has no version
    file in sysfs) is the driver; nothing says to install one."""
    found = finding("strix-halo-z13-nixos", "npu.device")
    assert found["severity"] == "pass", found
    assert "amdxdna in-tree in kernel 7.1.0" in found["evidence"]


def test_npu_firmware_fix_on_cachyos_uses_pacman():
    fix = finding("strix-point-cachyos-npu-firmware", "npu.firmware")["fix"]
    assert "`sudo pacman -S linux-firmware`" in fix and "ppa" not in fix.lower()
    assert "`ojai setup --root" in fix and "--no-npu`" in fix


@pytest.mark.parametrize("name, command", [
    ("ojai-fresh", "sudo update-grub"),
    ("opensuse-grub", "sudo grub2-mkconfig -o /boot/grub2/grub.cfg"),
])
def test_doctor_names_the_one_grub_command_of_this_machine(name, command):
    fix = finding(name, "ttm.active")["fix"]
    assert f"then {command})" in fix, fix
    assert " / " not in fix  # not three commands to choose from


def test_grub_fix_for_a_token_on_the_command_line_uses_this_machines_tool():
    """`amd_iommu=off` on the openSUSE GRUB machine: its own grub2-mkconfig, not update-grub."""
    from ojai_setup.domain.checks import KINDS, detect_profile
    from ojai_setup.facts.collect import collect

    facts = collect(Root(MACHINES / "opensuse-grub"))
    facts = facts.model_copy(update={"cmdline": [*facts.cmdline, "amd_iommu=off"]})
    out = KINDS["cmdline_absent"](facts, detect_profile(facts),
                                  {"token": "amd_iommu", "value": "off", "only_with_npu": True})
    assert out.ok is False
    assert "`sudo grub2-mkconfig -o /boot/grub2/grub.cfg`" in out.fix and "update-grub" not in out.fix


def test_no_npu_advice_on_a_node_without_an_npu(machine):
    root = machine("mi300x-8gpu-sglang")
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--json"])
    npu = next(s for s in json.loads(result.stdout)["steps"] if s["step"] == "npu")
    assert npu["status"] == "satisfied"
    assert npu["sentence"].startswith("no NPU on this machine")
    assert "FastFlowLM" not in npu["sentence"]


def test_the_machine_table_names_the_boot_path_it_reads():
    out = flat(CliRunner().invoke(app, ["doctor", "--root", str(MACHINES / "cachyos-limine")],
                                  env={"COLUMNS": "200"}).output)
    assert "Limine (limine-entry-tool) not set" in out
    assert "GRUB not set" not in out
    grub = flat(CliRunner().invoke(app, ["doctor", "--root", str(MACHINES / "ojai-fresh")],
                                   env={"COLUMNS": "200"}).output)
    assert "GRUB not set" in grub


def test_amd_iommu_off_is_a_known_trade_where_the_npu_is_not_used(machine):
    """kyuz0/amd-strix-halo-toolboxes#66: amd_iommu=off measured 5-12 % faster for llama.cpp.
    Where FastFlowLM is not installed it is noted, not failed; where the NPU route is wanted
    (the OJAI box runs flm validate) it still fails."""
    unused = machine("cachyos-limine")  # no FastFlowLM
    cmdline = unused / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().strip() + " amd_iommu=off\n")
    found = diagnose(Root(unused))
    iommu = next(f for f in found.findings if f.id == "npu.iommu")
    assert iommu.severity == "info" and "5-12 % faster" in iommu.evidence
    assert "before you set up the NPU route" in iommu.fix
    used = machine("ojai-fresh")
    cmdline = used / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().strip() + " amd_iommu=off\n")
    iommu = next(f for f in diagnose(Root(used)).findings if f.id == "npu.iommu")
    assert iommu.severity == "fail" and "faster" not in iommu.evidence
