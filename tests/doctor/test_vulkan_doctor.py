"""doctor's view of the Vulkan stack on the machine folders of a RADV, an AMDVLK and a
llvmpipe-only box (tests/machines/README.md says where each value comes from)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ojai_setup.commands.doctor import diagnose
from ojai_setup.core.root import COMMANDS_DIR, Root, command_key
from ojai_setup.formats.vulkan import parse_dri_listing, parse_summary

MACHINES = Path(__file__).parents[1] / "machines"


def finding(root: Path, fid: str):
    return next(f for f in diagnose(Root(root)).findings if f.id == fid)


def summary_file(root: Path) -> Path:
    return root / COMMANDS_DIR / command_key(["vulkaninfo", "--summary"]) / "stdout"


def test_the_summary_parser_reads_both_formats_and_skips_warnings():
    text = (MACHINES / "vulkan-llvmpipe-only" / COMMANDS_DIR /
            command_key(["vulkaninfo", "--summary"]) / "stdout").read_text()
    s = parse_summary(text)
    assert s.instance_version == "1.3.204"
    [(index, fields)] = s.devices
    assert index == 0 and fields["deviceType"] == "PHYSICAL_DEVICE_TYPE_CPU"
    assert fields["driverInfo"] == "Mesa 22.0.5 (LLVM 14.0.5)"
    old = ("Devices:\n========\nGPU0:\n\tapiVersion     = 4206830 (1.3.238)\n"
           "\tdeviceName     = AMD Radeon Graphics (RADV GFX1150)\nGPU1:\n"
           "\tdeviceName     = llvmpipe (LLVM 15.0.6, 256 bits)\n\tdeviceType = PHYSICAL_DEVICE_TYPE_CPU\n")
    s = parse_summary(old)
    assert [d.fields["deviceName"] for d in s.devices] == [
        "AMD Radeon Graphics (RADV GFX1150)", "llvmpipe (LLVM 15.0.6, 256 bits)"]
    assert s.devices[0].fields["apiVersion"] == "1.3.238"
    assert parse_summary("Cannot create Vulkan instance.\n").devices == []


def test_the_dri_listing_parser_keeps_character_devices():
    nodes = parse_dri_listing("total 0\ndrwxr-xr-x  2 root root 80 Dec  5 09:00 by-path\n"
                              "crw-rw----+ 1 root video  226,   1 Dec  5 09:00 card1\n"
                              "crw-rw----  1 root render 226, 128 Dec  5 09:00 renderD128\n")
    assert [(n.name, n.mode, n.group) for n in nodes] == [
        ("card1", "crw-rw----", "video"), ("renderD128", "crw-rw----", "render")]


def test_radv_drives_the_8060s():
    report = diagnose(Root(MACHINES / "strix-halo-vulkan-radv"))
    v = report.facts.vulkan
    assert v.loader == "/usr/lib64/libvulkan.so.1"
    assert v.icds == ["/usr/share/vulkan/icd.d/radeon_icd.x86_64.json"]
    [gpu] = v.devices
    assert (gpu.name, gpu.type, gpu.driver_id) == (
        "AMD Radeon Graphics (RADV GFX1151)", "integrated", "MESA_RADV")
    f = next(f for f in report.findings if f.id == "vulkan.driver")
    assert f.severity == "pass"
    assert "RADV (Mesa), Mesa 25.2.8 drives AMD Radeon Graphics (RADV GFX1151)" in f.evidence
    r = next(f for f in report.findings if f.id == "vulkan.render")
    assert r.severity == "pass" and "renderD128 crw-rw-rw- group render" in r.evidence


def test_amdvlk_is_warned_about_its_2_gib_allocation_cap():
    f = finding(MACHINES / "strix-halo-vulkan-amdvlk", "vulkan.driver")
    assert f.severity == "warn"
    assert "AMDVLK, 2025.Q2.1 (LLPC) drives AMD Radeon Graphics" in f.evidence
    assert "caps one allocation at 2 GiB" in f.evidence
    assert "AMDVLK/issues/413" in f.evidence
    assert "install Mesa's RADV" in f.fix  # RADV is not installed here


def test_amdvlk_beside_radv_is_told_to_pick_radv(machine):
    root = machine("strix-halo-vulkan-amdvlk")
    text = summary_file(root).read_text()
    radv = (MACHINES / "strix-halo-vulkan-radv" / summary_file(Path(".")).relative_to(".")).read_text()
    summary_file(root).write_text(text + radv.split("Devices:\n========\n", 1)[1].replace("GPU0:", "GPU1:"))
    f = finding(root, "vulkan.driver")
    assert f.severity == "warn" and "RADV is installed too" in f.evidence
    assert "`AMD_VULKAN_ICD=RADV`" in f.fix


def test_only_llvmpipe_means_no_gpu_and_no_render_node():
    root = MACHINES / "vulkan-llvmpipe-only"
    f = finding(root, "vulkan.driver")
    assert f.severity == "warn"
    assert "llvmpipe (LLVM 14.0.5, 256 bits): no GPU" in f.evidence
    assert "mesa-vulkan-drivers" in f.fix
    r = finding(root, "vulkan.render")
    assert r.severity == "warn" and "no render node in /dev/dri" in r.evidence


def test_a_render_node_the_service_cannot_open(machine):
    root = machine("strix-halo-vulkan-radv")
    listing = root / COMMANDS_DIR / command_key(["ls", "-l", "/dev/dri"]) / "stdout"
    listing.write_text(listing.read_text().replace("crw-rw-rw-  1 root render", "crw-rw----  1 root root  "))
    r = finding(root, "vulkan.render")
    assert r.severity == "warn"
    assert "cannot open /dev/dri/renderD128 (crw-rw---- group root)" in r.evidence
    assert 'GROUP="render"' in r.fix


def test_without_vulkaninfo_the_stack_is_still_named(machine):
    root = machine("strix-halo-vulkan-radv")
    shutil.rmtree(summary_file(root).parent)
    f = finding(root, "vulkan.driver")
    assert f.severity == "info"
    assert "ICD manifests: radeon_icd.x86_64.json; vulkaninfo is not installed" in f.evidence
    assert "vulkan-tools" in f.fix


def test_a_machine_without_vulkan_has_no_vulkan_findings():
    report = diagnose(Root(MACHINES / "ojai-fresh"))
    assert report.facts.vulkan is None
    assert not [f for f in report.findings if f.id.startswith("vulkan.")]
