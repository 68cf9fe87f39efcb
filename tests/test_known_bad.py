"""The known-bad combinations of checks/tables/known-bad.toml: one test per row, on a machine
folder that shows it (a test machine, or a copy of one with the files the row is about changed
to what a public capture shows: tests/data/captures/SOURCES.md), and the same machine without
the bad part, where the row stays silent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.stand_ins import give_lemonade
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.doctor import diagnose
from ojai_setup.core.root import COMMANDS_DIR, Root, command_key
from ojai_setup.domain.known_bad import KnownBadError, load_rows
from ojai_setup.domain.profiles import checks_dir

CAPTURES = Path(__file__).parent / "data" / "captures"
LLAMA_HELP = Path(__file__).parent / "data" / "llama-help"
TABLE = checks_dir() / "tables" / "known-bad.toml"


def known_bad(root: Path) -> dict[str, dict]:
    report = diagnose(Root(root))
    return {f.id: f.model_dump() for f in report.findings if f.id.startswith("known-bad")}


def capture(rel: str) -> str:
    return (CAPTURES / rel).read_text(encoding="utf-8")


def answer(root: Path, argv: list[str], stdout: str = "", stderr: str = "") -> None:
    folder = root / COMMANDS_DIR / command_key(argv)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stdout").write_text(stdout)
    (folder / "stderr").write_text(stderr)


def pacman_package(root: Path, name: str, version: str) -> None:
    desc = root / "var/lib/pacman/local" / f"{name}-{version}" / "desc"
    desc.parent.mkdir(parents=True, exist_ok=True)
    desc.write_text(f"%NAME%\n{name}\n\n%VERSION%\n{version}\n\n")


def test_every_row_cites_a_public_source_and_has_a_test_here():
    rows = load_rows(TABLE)
    assert len(rows) >= 7
    tests = Path(__file__).read_text(encoding="utf-8")
    for row in rows:
        assert row.source.startswith("https://github.com/"), row.id
        assert row.covers and row.fix
        assert f'"known-bad.{row.id}"' in tests, f"row {row.id} has no test"


def test_a_bad_row_is_an_error_naming_the_file_and_row(tmp_path: Path):
    bad = tmp_path / "known-bad.toml"
    bad.write_text('[[row]]\nid = "x"\ntitle = "t"\nsource = "http://example.invalid"\n'
                   'covers = "c"\nfix = "f"\nwhen = { kernel_min = "6.18" }\n')
    with pytest.raises(KnownBadError, match=r"known-bad.toml: row 1 \(x\):.*https://"):
        load_rows(bad)


# -- one test per row ----------------------------------------------------------------------------

def test_linux_firmware_20251125_on_strix_halo(machine):
    """The Strix Halo box on an Arch-based system (CachyOS splits the firmware package; the
    version as the poster of ROCm/ROCm#5724 had it)."""
    root = machine("strix-halo-dkms")
    assert "20251125-2" in capture("known-bad/rocm-5724-cachyos-linux-firmware-version.txt")
    pacman_package(root, "linux-firmware-amdgpu", "20251125-2")
    found = known_bad(root)["known-bad.linux-firmware-20251125"]
    assert found["severity"] == "fail"
    assert "linux-firmware-amdgpu 20251125-2 (pacman)" in found["evidence"]
    assert found["link"] == "https://github.com/kyuz0/amd-strix-halo-toolboxes/issues/37"
    shutil.rmtree(root / "var/lib/pacman/local/linux-firmware-amdgpu-20251125-2")
    pacman_package(root, "linux-firmware-amdgpu", "20251111-1")
    assert "known-bad.linux-firmware-20251125" not in known_bad(root)


def test_linux_firmware_20251125_from_the_rpm_database(machine):
    """Fedora's split package, as the poster of kyuz0/amd-strix-halo-toolboxes#37 downgraded it
    from (the 20251111 release of amd-gpu-firmware, fc43); rpm is asked, its database being no
    text file."""
    root = machine("strix-halo-dkms")
    (root / "var/lib/rpm").mkdir(parents=True)
    answer(root, ["rpm", "-qa", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\\n"],
           "kernel-core 6.18.6-200.fc43\namd-gpu-firmware 20251125-1.fc43\n")
    found = known_bad(root)["known-bad.linux-firmware-20251125"]
    assert "amd-gpu-firmware 20251125-1.fc43 (rpm)" in found["evidence"]


def test_linux_firmware_20251125_is_not_reported_for_gfx1150(machine):
    root = machine("ojai-fresh")
    pacman_package(root, "linux-firmware-amdgpu", "20251125-2")
    assert "known-bad.linux-firmware-20251125" not in known_bad(root)


def test_rocm_before_7_2_on_gfx1151(machine):
    """strix-halo-dkms is ROCm/ROCm#5595's box with ROCm 7.0.2 as posted."""
    root = machine("strix-halo-dkms")
    found = known_bad(root)["known-bad.gfx1151-rocm-vgpr"]
    assert "ROCm 7.0.2" in found["evidence"] and found["link"].endswith("TheRock/issues/2991")
    (root / "opt/rocm/.info/version").write_text("7.2.0-43\n")
    assert "known-bad.gfx1151-rocm-vgpr" not in known_bad(root)
    assert "known-bad.gfx1151-rocm-vgpr" not in known_bad(machine("ojai-fresh"))  # gfx1150


def test_amdgpu_dkms_6_16_13_on_kernel_6_18_14(machine):
    """ROCm/amdgpu#209: the poster's kernel and DKMS tree, on the DKMS box."""
    root = machine("strix-halo-dkms")
    text = capture("known-bad/amdgpu-209-uname-and-dkms-path.txt")
    assert "6.18.14-061814-generic" in text and "amdgpu/6.16.13-2278356.24.04" in text
    dkms = root / "var/lib/dkms/amdgpu"
    (dkms / "6.14.14-2222935.24.04").rename(dkms / "6.16.13-2278356.24.04")
    (root / "proc/sys/kernel/osrelease").write_text("6.18.14-061814-generic\n")
    found = known_bad(root)["known-bad.amdgpu-dkms-kernel-6.18.14"]
    assert found["severity"] == "fail"
    assert "amdgpu-dkms 6.16.13-2278356.24.04" in found["evidence"]
    assert "kernel 6.18.14-061814-generic" in found["evidence"]
    (root / "proc/sys/kernel/osrelease").write_text("6.18.7-061807-generic\n")
    assert "known-bad.amdgpu-dkms-kernel-6.18.14" not in known_bad(root)


def test_iommu_off_hides_the_npu(machine):
    root = machine("ojai-fresh")
    assert "Running without IOMMU" in capture("known-bad/nix-amd-ai-123-amdxdna-no-iommu.txt")
    cmdline = root / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().strip() + " iommu=off\n")
    found = known_bad(root)["known-bad.iommu-off-npu"]
    assert "iommu=off on the kernel command line" in found["evidence"]
    cmdline.write_text(cmdline.read_text().replace(" iommu=off", " iommu=pt"))
    assert "known-bad.iommu-off-npu" not in known_bad(root)


def test_mes_hangs_in_the_kernel_log_without_the_cwsr_workaround(machine):
    root = machine("strix-halo-dkms")  # kernel 6.14.0-1014-oem, before 6.18
    answer(root, ["dmesg"], capture("known-bad/rocm-6273-dmesg-mes.txt"))
    found = known_bad(root)["known-bad.mes-hang-cwsr"]
    assert "2 line(s) like" in found["evidence"] and "MES failed to respond" in found["evidence"]
    assert "amdgpu.cwsr_enable=0" in found["fix"]
    cmdline = root / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().strip() + " amdgpu.cwsr_enable=0\n")
    assert "known-bad.mes-hang-cwsr" not in known_bad(root)


def test_without_a_kernel_log_the_row_says_it_could_not_look(machine):
    root = machine("strix-halo-dkms")
    (root / "opt/rocm/.info/version").write_text("7.2.0-43\n")  # no other row matches
    [only] = known_bad(root).values()
    assert only["severity"] == "pass" and "not known here: the kernel log" in only["evidence"]


def test_rocm_build_on_gfx1151_warns_of_long_prompts(machine, monkeypatch):
    """An ojai-installed ROCm llama-server (build 11434's real --version and --help, answered
    from the captures) on the Strix Halo box."""
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    root = machine("strix-halo-dkms")
    server = root / "opt/ojai/llama.cpp/current/llama-server"
    server.parent.mkdir(parents=True)
    server.write_text("")
    server.chmod(0o755)
    argv = "/opt/ojai/llama.cpp/current/llama-server"
    answer(root, [argv, "--version"],
           stderr=(LLAMA_HELP / "upstream-b11434-cpu-version.txt").read_text())
    answer(root, [argv, "--help"], (LLAMA_HELP / "upstream-b11434-cpu-help.txt").read_text())
    record = server.parent / "ojai-install.json"
    record.write_text(json.dumps({"tag": "b1311", "family": "gfx1151", "asset": "a.zip",
                                  "url": "https://example.invalid/a.zip", "sha256": "0" * 64,
                                  "files_digest": "0" * 64}))  # a nightly: Lemonade's ROCm build
    found = known_bad(root)["known-bad.rocm-long-prompt-gfx1151"]
    assert "llama-server hip build 11434" in found["evidence"]
    assert found["link"] == "https://github.com/lemonade-sdk/lemonade/issues/3610"
    record.write_text(json.dumps({"backend": "cpu"}))  # a CPU source build
    assert "known-bad.rocm-long-prompt-gfx1151" not in known_bad(root)


def test_mtp_route_on_vulkan_in_lemonade(machine):
    root = machine("strix-halo-dkms")
    give_lemonade(root, (), user_models=json.dumps({"gemma-4-26b-a4b": {
        "checkpoints": {"main": "/m/main.gguf", "draft": "/m/mtp.gguf"}, "recipe": "llamacpp",
        "labels": ["custom", "mtp"]}}),
        recipe_options=json.dumps({"user.gemma-4-26b-a4b": {"llamacpp_backend": "vulkan"}}))
    found = known_bad(root)["known-bad.mtp-on-vulkan"]
    assert "gemma-4-26b-a4b on vulkan" in found["evidence"]
    (root / "var/lib/lemonade/recipe_options.json").write_text(
        json.dumps({"user.gemma-4-26b-a4b": {"llamacpp_backend": "rocm"}}))
    assert "known-bad.mtp-on-vulkan" not in known_bad(root)


def test_setup_shows_a_matching_row_among_its_findings(machine):
    root = machine("strix-halo-dkms")
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none",
                                      "--no-npu", "--json"])
    plan = json.loads(result.stdout)
    ids = [f["id"] for f in plan["preconditions"]]
    assert "known-bad.gfx1151-rocm-vgpr" in ids
