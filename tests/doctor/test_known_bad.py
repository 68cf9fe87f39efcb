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

CAPTURES = Path(__file__).parents[1] / "data" / "captures"
LLAMA_HELP = Path(__file__).parents[1] / "data" / "llama-help"
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
                   'date = "2026-01-01"\ncovers = "c"\nfix = "f"\nwhen = { kernel_min = "6.18" }\n')
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


def ojai_llama_server(root: Path, build: int, record: dict) -> None:
    """An ojai-installed llama-server answering build 11434's real --version (with ``build`` for
    its build number: 10566 is the build llama.cpp#28211 reproduced the bug on) and --help."""
    server = root / "opt/ojai/llama.cpp/current/llama-server"
    server.parent.mkdir(parents=True, exist_ok=True)
    server.write_text("")
    server.chmod(0o755)
    argv = "/opt/ojai/llama.cpp/current/llama-server"
    version = (LLAMA_HELP / "upstream-b11434-cpu-version.txt").read_text()
    answer(root, [argv, "--version"], stderr=version.replace("build 11434", f"build {build}"))
    answer(root, [argv, "--help"], (LLAMA_HELP / "upstream-b11434-cpu-help.txt").read_text())
    (server.parent / "ojai-install.json").write_text(json.dumps(record))


NIGHTLY = {"tag": "b1311", "family": "gfx1151", "asset": "a.zip",
           "url": "https://example.invalid/a.zip", "sha256": "0" * 64, "files_digest": "0" * 64}


def test_rocm_build_on_gfx1151_returns_wrong_output_between_its_bounds(machine, monkeypatch):
    """An ojai-installed ROCm llama-server (a nightly: Lemonade's ROCm build) on the Strix Halo
    box: build 10566 is inside the row's bounds, build 11434 (integrated = false for every
    device) is past its upper one, and a CPU build is no HIP build."""
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    root = machine("strix-halo-dkms")
    ojai_llama_server(root, 10566, NIGHTLY)
    found = known_bad(root)["known-bad.rocm-long-prompt-gfx1151"]
    assert "llama-server hip build 10566" in found["evidence"]
    assert "512 tokens" in found["title"]
    assert found["link"] == "https://github.com/ggml-org/llama.cpp/issues/28211"
    ojai_llama_server(root, 11434, NIGHTLY)
    assert "known-bad.rocm-long-prompt-gfx1151" not in known_bad(root)
    ojai_llama_server(root, 10566, {"backend": "cpu"})  # a CPU source build
    assert "known-bad.rocm-long-prompt-gfx1151" not in known_bad(root)


def test_rocm_build_on_gfx1150_returns_wrong_output_too(machine, monkeypatch):
    """The same builds on the OJAI box's gfx1150 (noamsto/nix-amd-ai#130), which the gfx1151
    row never reported."""
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    root = machine("ojai-fresh")
    ojai_llama_server(root, 10566, {**NIGHTLY, "family": "gfx1150"})
    found = known_bad(root)
    assert "known-bad.rocm-long-prompt-gfx1151" not in found
    row = found["known-bad.rocm-host-buffer-gfx1150"]
    assert "GPU gfx1150" in row["evidence"] and "hip build 10566" in row["evidence"]
    assert row["link"] == "https://github.com/noamsto/nix-amd-ai/issues/130"
    ojai_llama_server(root, 11434, {**NIGHTLY, "family": "gfx1150"})
    assert "known-bad.rocm-host-buffer-gfx1150" not in known_bad(root)


def test_therock_nightlies_of_the_0609_to_0612_window(machine):
    """ROCm/TheRock#5763: a TheRock nightly of that window in /opt/rocm on the Strix Halo box;
    0608 and 0613 are outside it."""
    root = machine("strix-halo-dkms")
    version = root / "opt/rocm/.info/version"
    for inside in ("7.14.0a20260609", "7.14.0a20260612"):
        version.write_text(inside + "\n")
        found = known_bad(root)["known-bad.therock-nightly-hsa-init-segfault"]
        assert f"ROCm {inside}" in found["evidence"] and found["severity"] == "fail"
    for outside in ("7.14.0a20260608", "7.14.0a20260613"):
        version.write_text(outside + "\n")
        assert "known-bad.therock-nightly-hsa-init-segfault" not in known_bad(root)


def test_the_withdrawn_nightly_b1293_installed(machine, monkeypatch):
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    root = machine("strix-halo-dkms")
    ojai_llama_server(root, 11434, {**NIGHTLY, "tag": "b1293"})
    found = known_bad(root)["known-bad.llamacpp-rocm-b1293-withdrawn"]
    assert "llama.cpp nightly b1293 installed" in found["evidence"]
    assert found["link"] == "https://github.com/lemonade-sdk/llamacpp-rocm/issues/110"
    ojai_llama_server(root, 11434, {**NIGHTLY, "tag": "b1292"})
    assert "known-bad.llamacpp-rocm-b1293-withdrawn" not in known_bad(root)


def test_fastflowlm_after_0_9_44_on_krackan_point(machine):
    """ROCm/FastFlowLM#655: the OJAI box's folder with the Krackan iGPU's PCI id (0x1114,
    gfx1152: checks/tables/igpus.toml) and FastFlowLM's version as `flm version` gives it."""
    root = machine("ojai-fresh")
    (root / "sys/class/drm/card1/device/device").write_text("0x1114\n")
    answer(root, ["flm", "version"], "FLM v0.9.45\n")
    found = known_bad(root)["known-bad.flm-krackan-hwctx"]
    assert "GPU gfx1152" in found["evidence"] and "FastFlowLM FLM v0.9.45" in found["evidence"]
    answer(root, ["flm", "version"], "FLM v0.9.44\n")
    assert "known-bad.flm-krackan-hwctx" not in known_bad(root)
    (root / "sys/class/drm/card1/device/device").write_text("0x150e\n")  # gfx1150
    answer(root, ["flm", "version"], "FLM v0.9.45\n")
    assert "known-bad.flm-krackan-hwctx" not in known_bad(root)


def test_krackan_point_is_not_told_to_take_a_nightly_that_does_not_exist(machine):
    root = machine("ojai-fresh")
    (root / "sys/class/drm/card1/device/device").write_text("0x1114\n")
    report = diagnose(Root(root))
    gpu = next(f for f in report.findings if f.id == "gpu.target")
    assert gpu.severity == "fail" and "want gfx1152" in gpu.evidence
    assert "no nightly build for gfx1152" in gpu.fix and "#24129" in gpu.fix
    assert "nightly build, which bundles" not in gpu.fix


def test_every_row_is_dated_and_the_newest_date_is_what_doctor_knows(machine):
    from ojai_setup.domain.known_bad import knowledge_date

    rows = load_rows(TABLE)
    newest = max(r.date for r in rows)
    assert knowledge_date(TABLE) == newest == "2026-09-17"
    root = machine("ojai-fresh")
    assert diagnose(Root(root)).knowledge_date == newest
    text = CliRunner().invoke(app, ["doctor", "--root", str(root)]).output
    assert f"knows of reports up to {newest}" in " ".join(text.split())
    data = json.loads(CliRunner().invoke(app, ["doctor", "--root", str(root), "--json"]).stdout)
    assert data["knowledge_date"] == newest


@pytest.mark.parametrize("build, family, fires", [
    (11474, "vulkan", True),     # the build ROCmFPX#23 saw it on
    (11475, "vulkan", False),    # another build: for measurement, not assumed
    (11434, "vulkan", False),
    (11474, "gfx1151", False),   # the same build on ROCm drafted at 60 %
])
def test_mtp_on_vulkan_only_for_the_build_it_was_seen_on(machine, build, family, fires):
    from support.stand_ins import give_llama_server

    root = machine("strix-halo-dkms")
    server = give_llama_server(root, family)
    server.write_text(server.read_text().replace("build 11434", f"build {build}"))
    # Lemonade running an MTP route on its own Vulkan build no longer matches by itself
    give_lemonade(root, (), user_models=json.dumps({"gemma-4-26b-a4b": {
        "checkpoints": {"main": "/m/main.gguf", "draft": "/m/mtp.gguf"}, "recipe": "llamacpp",
        "labels": ["custom", "mtp"]}}),
        recipe_options=json.dumps({"user.gemma-4-26b-a4b": {"llamacpp_backend": "vulkan"}}))
    found = known_bad(root).get("known-bad.mtp-on-vulkan")
    assert (found is not None) == fires, found
    if fires:
        assert "llama-server vulkan build 11474" in found["evidence"]


def test_setup_shows_a_matching_row_among_its_findings(machine):
    root = machine("strix-halo-dkms")
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none",
                                      "--no-npu", "--json"])
    plan = json.loads(result.stdout)
    ids = [f["id"] for f in plan["preconditions"]]
    assert "known-bad.gfx1151-rocm-vgpr" in ids


def test_links_go_where_the_rocm_issues_now_live():
    """ROCm/ROCm was renamed ROCm/legacy-rocm-build (its old name is to be reused by TheRock):
    no check or row links an issue under the old name."""
    for path in checks_dir().rglob("*.toml"):
        assert "github.com/ROCm/ROCm/issues" not in path.read_text(encoding="utf-8"), path
