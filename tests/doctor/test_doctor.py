"""ojai doctor on machines built from real captures (tests/machines/, see its README)."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.doctor import diagnose
from ojai_setup.core.root import Root
from ojai_setup.domain.checks import Severity, detect_profile, load_profile, run_checks
from ojai_setup.facts.collect import collect
from ojai_setup.formats import machine as parsers
from support.corpus import corpus_text

MACHINES = Path(__file__).parents[1] / "machines"
GOLDEN = sorted(p for p in MACHINES.glob("*.doctor.json"))


def machine_names() -> list[str]:
    return sorted(p.name for p in MACHINES.iterdir() if p.is_dir())


def doctor_json(root: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["doctor", "--json", "--root", str(root), *args])
    assert result.stdout.strip(), result.stderr
    # the machine folder's path (in the facts, and in the fixes' `ojai ... --root` commands)
    data = json.loads(result.stdout.replace(json.dumps(str(root))[1:-1], "<root>"))
    assert data["facts"]["root"] == "<root>"
    return result.exit_code, data


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda p: p.name.removesuffix(".doctor.json"))
def test_golden_doctor_report(golden: Path):
    name = golden.name.removesuffix(".doctor.json")
    code, got = doctor_json(MACHINES / name)
    if os.environ.get("OJAI_UPDATE_GOLDEN"):  # regenerate, then review the diff line by line
        golden.write_text(json.dumps(got, indent=2) + "\n")
    expected = json.loads(golden.read_text())
    assert got == expected
    assert code == (1 if expected["result"] == "fail" else 0)


def test_every_machine_has_a_golden_report():
    assert {g.name.removesuffix(".doctor.json") for g in GOLDEN} == set(machine_names())
    assert {"ojai-fresh", "ojai-applied", "ojai-rebooted", "strix-halo-dkms",
            "gfx1100-desktop", "no-amd-gpu"} <= set(machine_names())


def _finding(report, fid):
    return next(f for f in report.findings if f.id == fid)


def test_ojai_box_lifecycle_of_the_ttm_limit():
    fresh = diagnose(Root(MACHINES / "ojai-fresh"))
    applied = diagnose(Root(MACHINES / "ojai-applied"))
    rebooted = diagnose(Root(MACHINES / "ojai-rebooted"))
    assert fresh.profile.id == applied.profile.id == rebooted.profile.id == "ojai"
    assert _finding(fresh, "ttm.active").severity == "warn"
    assert "not configured" in _finding(fresh, "ttm.active").evidence
    pending = _finding(applied, "ttm.active")
    assert pending.severity == "warn" and "reboot pending" in pending.evidence
    assert _finding(rebooted, "ttm.active").severity == "pass"
    assert rebooted.facts.ttm.active_pages == 12582912


def test_rebooted_but_not_active_is_told_apart_from_pending(machine):
    root = machine("ojai-applied")
    (root / "proc/sys/kernel/random/boot_id").write_text("0f0e0d0c-0000-4000-8000-000000000001\n")
    report = diagnose(Root(root))
    finding = _finding(report, "ttm.active")
    assert "rebooted since apply but the limit is NOT active" in finding.evidence
    assert "update-grub" in finding.fix


def test_fresh_ojai_box_fails_on_old_bios_and_exit_code_is_1():
    code, data = doctor_json(MACHINES / "ojai-fresh")
    bios = next(f for f in data["findings"] if f["id"] == "bios.min")
    assert bios["severity"] == "fail" and "1.00" in bios["evidence"]
    assert bios["fix"] and bios["link"]
    assert code == 1


def test_strix_halo_with_dkms_uses_amdttm_and_flags_the_mismatch():
    report = diagnose(Root(MACHINES / "strix-halo-dkms"))
    assert report.profile.id == "strix-halo"
    assert report.facts.ttm.live_module == "amdttm"
    assert report.facts.amdgpu_dkms is True
    assert _finding(report, "driver.no-dkms").severity == "warn"
    assert _finding(report, "ttm.gttsize-deprecated").severity == "warn"


def test_no_amd_gpu_machine_gets_generic_profile_and_fails_gpu_check():
    code, data = doctor_json(MACHINES / "no-amd-gpu")
    assert data["profile"]["id"] == "generic"
    assert data["facts"]["cpu"]["vendor_id"] == "GenuineIntel"
    gpu = next(f for f in data["findings"] if f["id"] == "gpu.target")
    assert gpu["severity"] == "fail"
    assert code == 1


def test_profile_can_be_forced():
    code, data = doctor_json(MACHINES / "gfx1100-desktop", "--profile", "ojai")
    assert data["profile"] == {"id": "ojai", "name": data["profile"]["name"], "forced": True}
    gpu = next(f for f in data["findings"] if f["id"] == "gpu.target")
    assert gpu["severity"] == "fail" and "gfx1100" in gpu["evidence"]


def test_a_forced_profile_checks_the_ttm_limit_without_an_amd_gpu():
    _, detected = doctor_json(MACHINES / "no-amd-gpu")
    ttm = next(f for f in detected["findings"] if f["id"] == "ttm.active")
    assert ttm["severity"] == "info" and "no AMD GPU" in ttm["evidence"]
    assert "--profile" in ttm["evidence"]
    _, forced = doctor_json(MACHINES / "no-amd-gpu", "--profile", "strix-halo")
    ttm = next(f for f in forced["findings"] if f["id"] == "ttm.active")
    assert ttm["severity"] == "warn" and "not configured" in ttm["evidence"]


def test_unknown_profile_is_a_clear_error():
    result = CliRunner().invoke(app, ["doctor", "--root", str(MACHINES / "ojai-fresh"), "--profile", "nope"])
    assert result.exit_code == 64
    assert result.stderr.startswith("error: --profile nope: must be one of instinct, ojai, ")


def test_empty_root_reports_unknowns_and_never_crashes(tmp_path):
    report = diagnose(Root(tmp_path))
    assert set(report.facts.unknown) >= {"cpu", "memory", "kernel", "cmdline", "bios"}
    assert "/proc/cpuinfo" in report.facts.unknown["cpu"]
    assert report.result == Severity.FAIL  # no GPU


def test_unreadable_fact_is_unknown_with_reason(machine):
    root = machine("ojai-fresh")
    (root / "proc/meminfo").write_text("garbage\n")
    facts = collect(Root(root))
    assert facts.memory is None
    assert "MemTotal" in facts.unknown["memory"]


def test_human_report_has_no_colour_codes_when_not_a_terminal():
    result = CliRunner().invoke(app, ["doctor", "--root", str(MACHINES / "ojai-fresh")],
                                env={"NO_COLOR": "1"})
    assert "\x1b[" not in result.stdout
    assert "bios.min" in result.stdout and "gfx1150" in result.stdout
    assert result.exit_code == 1


def test_capture_replays_to_the_same_report(tmp_path):
    # a copy: the bundled example itself has fixes of its own (copy it before applying)
    src = tmp_path / "ojai-applied"
    shutil.copytree(MACHINES / "ojai-applied", src, symlinks=True)
    capture = tmp_path / "cap.tar.gz"
    result = CliRunner().invoke(app, ["doctor", "--json", "--root", str(src), "--capture", str(capture)])
    assert capture.is_file(), result.stderr
    original = json.loads(result.stdout.replace(str(src), "<root>"))
    dest = tmp_path / "replay"
    with tarfile.open(capture) as tar:
        tar.extractall(dest, filter="data")
    _, replayed = doctor_json(dest)
    # the same findings; the facts differ only by the root filesystem's UUID and the boot id
    assert replayed["findings"] == original["findings"]
    assert replayed["result"] == original["result"]
    assert "3b9e61a2-7c4d-4f1e-9a0b-5d2c8e7f1a64" not in json.dumps(replayed)
    assert replayed["facts"]["ttm"]["boot_id"] != original["facts"]["ttm"]["boot_id"]
    for key in ("cmdline", "ttm"):
        original["facts"].pop(key), replayed["facts"].pop(key)
    assert replayed == original


def test_capture_keeps_what_globs_found(tmp_path, machine):
    root = machine("strix-halo-dkms")
    shutil.rmtree(root / "sys/module/amdttm")  # amdgpu-dkms known only by its folder in /var/lib/dkms
    capture = tmp_path / "cap.tar.gz"
    CliRunner().invoke(app, ["doctor", "--root", str(root), "--capture", str(capture)])
    dest = tmp_path / "replay"
    with tarfile.open(capture) as tar:
        tar.extractall(dest, filter="data")
    _, replayed = doctor_json(dest)
    _, original = doctor_json(root)
    assert replayed["facts"]["amdgpu_dkms"] is True
    assert replayed["findings"] == original["findings"]
    for key in ("cmdline", "ttm"):  # filesystem UUID and boot id replaced
        original["facts"].pop(key), replayed["facts"].pop(key)
    assert replayed == original


def test_capture_removes_gpu_uuid(tmp_path):
    root = MACHINES / "gfx1100-desktop"
    assert "GPU-dd12161dec38e7a2" in (root / ".ojai/commands/rocminfo/stdout").read_text()
    capture = tmp_path / "cap.tar.gz"
    CliRunner().invoke(app, ["doctor", "--root", str(root), "--capture", str(capture)])
    with tarfile.open(capture) as tar:
        text = tar.extractfile(".ojai/commands/rocminfo/stdout").read().decode()
    assert "GPU-dd12161dec38e7a2" not in text and "GPU-XX" in text


def test_bundled_example_runs_without_hardware():
    result = CliRunner().invoke(app, ["doctor", "--example", "ojai-fresh", "--json"])
    data = json.loads(result.stdout)
    assert data["profile"]["id"] == "ojai"


# -- parsers on the real corpus ----------------------------------------------------------------

def test_rocminfo_strix_point_has_gfx1150_and_npu_agent():
    agents = parsers.read_rocminfo(corpus_text("strix-point-hx370-rocm-issue-6271/rocminfo.txt")).agents
    gpus = [a for a in agents if a.device_type == "GPU"]
    assert [a.name for a in gpus] == ["gfx1150"]
    assert gpus[0].marketing_name == "AMD Radeon 890M Graphics"
    assert gpus[0].compute_units == 16
    assert "gfx1150" in gpus[0].isas
    npu = [a for a in agents if a.device_type == "DSP"]
    assert [(a.name, a.marketing_name) for a in npu] == [("aie2p", "RyzenAI-npu4")]


def test_rocminfo_discrete_gfx1100():
    agents = parsers.read_rocminfo(corpus_text("rdna3-rx7900xtx-rocm-issue-3949/rocminfo.txt")).agents
    assert [(a.name, a.device_type) for a in agents] == [
        ("AMD Ryzen 7 7800X3D 8-Core Processor", "CPU"), ("gfx1100", "GPU")]


def test_rocminfo_garbage_is_a_parse_error():
    with pytest.raises(parsers.ParseError):
        parsers.read_rocminfo("ROCk module is NOT loaded, possibly no GPU devices\n")


def test_cpuinfo_intel_excerpt_and_engineering_sample():
    cpu = parsers.parse_cpuinfo(corpus_text("non-amd-intel-i9-13980hx-throttled-issue-375/proc-cpuinfo-excerpt.txt"))
    assert cpu.model_name == "13th Gen Intel(R) Core(TM) i9-13980HX" and cpu.family == 6
    es = parsers.parse_cpuinfo("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: 100-000000994-03\n\n"
                               "processor\t: 1\nvendor_id\t: AuthenticAMD\nmodel name\t: 100-000000994-03\n")
    assert es.engineering_sample and es.logical_cpus == 2
    no_name = parsers.parse_cpuinfo("processor : 0\nCPU implementer : 0x41\n")
    assert no_name.model_name is None and no_name.logical_cpus == 1


def test_kernel_release_flavours():
    assert parsers.parse_kernel_release("6.17.0-1012-oem").version == (6, 17, 0, 1012)
    assert parsers.parse_kernel_release("6.17.0-1012-oem").flavour == "oem"
    assert parsers.parse_kernel_release("7.0.9-arch1-1").flavour == "arch"
    assert parsers.parse_kernel_release("6.14.0-1014-oem\n").release == "6.14.0-1014-oem"
    with pytest.raises(parsers.ParseError):
        parsers.parse_kernel_release("linux")


def test_xrt_smi_examine_corpus():
    info = parsers.parse_xrt_smi(corpus_text("strix-point-hx370-gmktec-evo-x1-mlir-aie-issue-2167/xrt-smi-examine.txt"))
    assert info["firmware_version"] == "1.0.0.63"
    assert info["amdxdna_version"] == "2.19.0_20250330"
    assert "RyzenAI-npu4" in info["devices"]


def test_bios_versions():
    assert parsers.bios_version_tuple("AI X1 Pro 1.01") == (1, 1)
    assert parsers.bios_version_tuple("NucBox EVO-X1 1.03") == (1, 3)
    assert parsers.bios_version_tuple("") == ()


def test_profiles_load_and_detect():
    ojai = load_profile("ojai")
    ids = [c.id for c in ojai.checks]
    assert len(ids) == len(set(ids))
    assert {"gpu.target", "kernel.min", "bios.min", "ttm.active", "npu.firmware",
            "npu.iommu", "kernel.nomodeset", "ttm.gttsize-deprecated"} <= set(ids)
    facts = collect(Root(MACHINES / "strix-halo-dkms"))
    assert detect_profile(facts).id == "strix-halo"
    assert all(f.severity in ("pass", "info", "warn", "fail") for f in run_checks(facts, ojai))


def test_bad_profile_file_names_file_and_field(tmp_path):
    (tmp_path / "bad.toml").write_text('id = "bad"\nname = "x"\n[[checks]]\nid = "a"\nkind = "gpu_target"\n')
    from ojai_setup.domain.checks import ProfileError

    with pytest.raises(ProfileError, match=r"bad.toml: checks.0.title is missing \(it is required\)"):
        load_profile("bad", tmp_path)


def test_thread_count_comes_from_siblings_when_the_capture_holds_fewer_blocks():
    # the bundled OJAI capture keeps two of its 24 processor blocks: siblings says 24
    text = (MACHINES / "ojai-fresh/proc/cpuinfo").read_text()
    assert text.count("processor\t:") == 2 and "siblings\t: 24" in text
    assert parsers.parse_cpuinfo(text).logical_cpus == 24
    # two packages of 8 threads, one block each
    two = "".join(f"processor\t: {i}\nphysical id\t: {i}\nsiblings\t: 8\n\n" for i in range(2))
    assert parsers.parse_cpuinfo(two).logical_cpus == 16
    # more blocks than siblings says (siblings of one package): the blocks count
    full = "".join(f"processor\t: {i}\nphysical id\t: 0\nsiblings\t: 4\n\n" for i in range(6))
    assert parsers.parse_cpuinfo(full).logical_cpus == 6


def test_doctors_machine_table_says_24_threads_for_the_bundled_ojai_box():
    result = CliRunner().invoke(app, ["doctor", "--example", "ojai-fresh"], env={"COLUMNS": "120"})
    assert "AMD Ryzen AI 9 HX 470 w/ Radeon 890M (24 threads)" in result.stdout
