"""doctor on messy real machines: rocminfo excerpts, unrecorded overrides, the box in front of it.

Every input here is a real public capture (tests/data/captures/SOURCES.md) or a test machine built
from one (tests/machines/README.md). Where a test changes a capture (colour codes, a pager line),
it says how, and the capture itself stays as posted.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.doctor import diagnose
from ojai_setup.core.paths import GIB
from ojai_setup.core.root import Root
from ojai_setup.domain.checks import detect_profile, igpu, load_profile, run_checks
from ojai_setup.facts.collect import collect
from ojai_setup.formats import machine as parsers
from ojai_setup.formats.flm import parse_validate
from support.corpus import corpus_text

MACHINES = Path(__file__).parents[1] / "machines"
CAPTURES = Path(__file__).parents[1] / "data" / "captures"
PASTES = sorted((CAPTURES / "rocminfo-pastes").glob("*.txt"))


def capture(rel: str) -> str:
    return (CAPTURES / rel).read_text(encoding="utf-8")


def finding(report, fid):
    return next(f for f in report.findings if f.id == fid)


# -- rocminfo as people paste it --------------------------------------------------------------

def test_agent_block_without_the_hsa_agents_header_is_read():
    report = parsers.read_rocminfo(capture("ds4-475-strix-halo-96g-carveout/rocminfo-excerpt.txt"))
    [gpu] = report.agents
    assert (gpu.number, gpu.name, gpu.device_type, gpu.chip_id) == (2, "gfx1151", "GPU", "0x1586")
    assert gpu.marketing_name == "AMD Radeon 8060S Graphics"
    assert "no 'HSA Agents' header: read as an excerpt" in report.notes
    assert "agent 1 is not in the text" in report.notes
    assert any("ends after 'Max Clock Freq. (MHz)'" in n for n in report.notes)


def test_grep_output_of_two_gpus_without_any_header():
    """`rocminfo | grep gfx` with its prompt: two GPU agents, told apart by their Name lines."""
    report = parsers.read_rocminfo(capture("rocm-5696-strix-halo-r9700-override/rocminfo-grep-gfx-after.txt"))
    assert [(a.name, a.device_type, a.isas) for a in report.agents] == [
        ("gfx1201", "GPU", ["gfx1201", "gfx12-generic"]),
        ("gfx1151", "GPU", ["gfx1151", "gfx11-generic"])]
    assert report.notes[0] == "no 'Agent N' headers: agents told apart by their Name lines"
    assert any("left out 1 line that is not rocminfo output" in n for n in report.notes)
    assert any("no Device Type line; read as a GPU by its gfx name" in n for n in report.notes)


def test_prompts_grep_output_and_an_elided_cpu_agent():
    report = parsers.read_rocminfo(capture("rocminfo-pastes/gfx803-rocm-13-prompts-and-elision.txt"))
    assert [(a.number, a.name, a.marketing_name) for a in report.agents] == [
        (2, "gfx803", "Radeon RX 590 Series")]
    assert any("left out 3 lines" in n for n in report.notes)  # the three root@...$ prompts
    assert "agent 1 is not in the text" in report.notes
    assert "no 'HSA Agents' header: read as an excerpt" not in report.notes


def test_a_line_of_dots_instead_of_the_agent_separator():
    report = parsers.read_rocminfo(capture("rocminfo-pastes/ollama-2453-dotted-excerpt.txt"))
    [gpu] = report.agents
    assert (gpu.name, gpu.chip_id, gpu.device_type) == ("gfx803", "0x67df", "GPU")


def test_dollar_prompt_and_stripped_padding():
    report = parsers.read_rocminfo(capture("rocminfo-pastes/rocm-1756-prompt-agent2-excerpt.txt"))
    [gpu] = report.agents
    assert (gpu.name, gpu.compute_units, gpu.chip_id) == ("gfx1032", 28, "0x73e3")


def decorate(text: str) -> str:
    """A real excerpt as a terminal and a pager show it: a coloured prompt, colour codes on the
    field names (real ESC bytes, ``less``'s ``ESC[`` spelling and bare SGRs whose ESC a paste
    lost), CRLF line ends and the pager's ``(END)``."""
    out = ["\x1b[01;32mme@box\x1b[00m:\x1b[01;34m~\x1b[00m$ rocminfo | less -R"]
    for i, line in enumerate(text.splitlines()):
        if ":" in line:
            key, _, value = line.partition(":")
            style = ("\x1b[1m{}\x1b[0m", "ESC[1m{}ESC[0m", "[1m{}[0m")[i % 3]
            line = style.format(key) + ":" + value
        out.append(line)
    out.append("(END)")
    return "\r\n".join(out) + "\r\n"


@pytest.mark.parametrize("rel", ["ds4-475-strix-halo-96g-carveout/rocminfo-excerpt.txt",
                                 "rocminfo-pastes/gfx803-rocm-13-prompts-and-elision.txt",
                                 "rocminfo-pastes/rocm-1756-prompt-agent2-excerpt.txt"])
def test_colour_codes_crlf_and_pager_lines_do_not_change_what_is_read(rel):
    plain = parsers.read_rocminfo(capture(rel))
    decorated = parsers.read_rocminfo(decorate(capture(rel)))
    assert decorated.agents == plain.agents
    assert any("(shell prompts, pager lines)" in n for n in decorated.notes)


def test_the_complete_corpus_output_reads_as_before_and_has_no_notes():
    report = parsers.read_rocminfo(corpus_text("strix-point-hx370-rocm-issue-6271/rocminfo.txt"))
    assert [(a.number, a.name, a.device_type) for a in report.agents] == [
        (1, "AMD Ryzen AI 9 HX 370 w/ Radeon 890M", "CPU"), (2, "gfx1150", "GPU"), (3, "aie2p", "DSP")]
    assert report.agents[1].chip_id == "0x150e" and report.agents[0].chip_id is None
    assert report.notes == []


def test_a_block_without_its_name_line_is_said_not_guessed():
    report = parsers.read_rocminfo(capture("ds4-475-strix-halo-96g-carveout/rocminfo-excerpt.txt")
                                   + capture("rocm-5696-strix-halo-r9700-override/rocminfo-8060s-excerpt.txt"))
    # the second excerpt has no header and no Name: it joins agent 2's block, whose Name stays
    assert [a.name for a in report.agents] == ["gfx1151"]
    with pytest.raises(parsers.ParseError, match="no agent could be read"):
        parsers.read_rocminfo(capture("rocm-5696-strix-halo-r9700-override/rocminfo-8060s-excerpt.txt"))


_fragments = st.sampled_from(
    [line for p in PASTES for line in p.read_text().splitlines()]
    + ["*******", "Agent 7", "Agent x", "  Name:", "  Chip ID:   zz(0xZZ)", "  Device Type:",
       "\x1b[", "ESC[", "[0m", "(END)", "--More--", "$ ", ">", ":", "  Compute Unit: -1"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_fragments, st.text(max_size=40)), max_size=60))
def test_any_text_reads_or_says_why_never_crashes(lines):
    text = "\n".join(lines)
    try:
        report = parsers.read_rocminfo(text)
    except parsers.ParseError as exc:
        assert str(exc).startswith("no agent could be read")
        return
    assert report.agents
    for agent in report.agents:
        assert agent.name.strip() and agent.device_type.strip()
        assert agent.chip_id is None or re.fullmatch(r"0x[0-9a-f]{4,}", agent.chip_id)
        assert agent.number is None or agent.number >= 0


# -- the iGPU table --------------------------------------------------------------------------

@pytest.mark.parametrize("device, target, family", [
    ("0x150e", "gfx1150", "strix-point"), ("0x1114", "gfx1152", "strix-point"),
    ("0x1586", "gfx1151", "strix-halo"), ("0x150E", "gfx1150", "strix-point")])
def test_igpu_table_rows(device, target, family):
    row = igpu(device)
    assert (row.target, row.family) == (target, family)
    assert row.seen.startswith(("rocminfo", "kfd")) and "https://" in row.seen


def test_igpu_table_knows_no_discrete_card():
    assert igpu("0x744c") is None and igpu("0x7551") is None and igpu(None) is None


# -- an override nobody recorded -------------------------------------------------------------

def test_strix_halo_renamed_gfx1201_fails_the_target_check():
    report = diagnose(Root(MACHINES / "strix-halo-r9700-override"))
    assert report.profile.id == "strix-halo"
    assert report.facts.gpu.environment_unknown
    assert [a.name for a in report.facts.gpu.agents] == ["gfx1201"]  # as rocminfo printed them
    assert report.facts.gpu.targets == ["gfx1151"]  # what a build must target
    target = finding(report, "gpu.target")
    assert target.severity == "fail"
    assert "gfx1201" in target.evidence and "Chip ID 0x1586" in target.evidence
    assert "own target is gfx1151" in target.evidence and "no record" in target.evidence
    assert "Unset HSA_OVERRIDE_GFX_VERSION" in target.fix
    assert finding(report, "gpu.hsa-override").severity == "warn"


def test_the_override_fails_under_any_profile_even_generic():
    facts = collect(Root(MACHINES / "strix-halo-r9700-override"))
    generic = run_checks(facts, load_profile("generic"))
    assert next(f for f in generic if f.id == "gpu.target").severity == "fail"


def test_without_chip_ids_the_sysfs_id_still_says_which_target_is_missing(machine):
    root = machine("strix-halo-r9700-override")
    stdout = root / ".ojai/commands/rocminfo/stdout"
    stdout.write_text("".join(line for line in stdout.read_text().splitlines(keepends=True)
                              if "Chip ID" not in line))
    report = diagnose(Root(root))
    target = finding(report, "gpu.target")
    assert target.severity == "fail"
    assert "sysfs card1 is PCI device 0x1586" in target.evidence and "(gfx1151)" in target.evidence


def test_no_record_of_the_environment_is_unknown_not_unset(machine):
    root = machine("strix-point-cachyos-npu-firmware")
    hsa = finding(diagnose(Root(root)), "gpu.hsa-override")
    assert hsa.severity == "info" and hsa.evidence.startswith("unknown: ")
    excerpt = diagnose(Root(MACHINES / "strix-halo-96g-rocminfo-excerpt"))
    agreed = finding(excerpt, "gpu.hsa-override")  # rocminfo's name matches its Chip ID
    assert agreed.severity == "pass" and "no override was in effect" in agreed.evidence


def test_excerpt_machine_reads_the_gpu_and_says_what_is_missing():
    report = diagnose(Root(MACHINES / "strix-halo-96g-rocminfo-excerpt"))
    target = finding(report, "gpu.target")
    assert target.severity == "pass"
    assert "gfx1151" in target.evidence and "read as an excerpt" in target.evidence
    assert report.facts.gpu.rocminfo_error is None
    assert report.facts.kernel is None and "kernel" in report.facts.unknown
    assert finding(report, "kernel.min").evidence.startswith("unknown: ")


# -- the profile: the hardware family, the box only where DMI says so ------------------------

def test_hx370_mini_pc_that_is_not_a_minisforum_is_its_family():
    report = diagnose(Root(MACHINES / "hx370-evo-x1"))
    assert report.profile.id == "strix-point" and report.profile.gpu_target == "gfx1150"
    assert "Minisforum" not in report.profile.name
    bios = finding(report, "bios.min")
    assert bios.severity == "info" and "no BIOS minimum is known for GMKtec NucBox EVO-X1" in bios.evidence
    memory = finding(report, "memory.size")
    assert "GPU budget of 11 GiB, leaving 4.2 GiB to the OS" in memory.evidence


def test_the_ojai_box_is_chosen_by_its_dmi_and_keeps_its_bios_rule(machine):
    assert diagnose(Root(MACHINES / "ojai-fresh")).profile.id == "ojai"
    root = machine("ojai-fresh")
    for f in ("sys_vendor", "product_name", "board_vendor", "board_name"):
        (root / "sys/class/dmi/id" / f).write_text("GMKtec\n")
    other = diagnose(Root(root))
    assert other.profile.id == "strix-point"
    assert finding(other, "bios.min").severity == "info"  # BIOS 1.00 is a Minisforum fact


@pytest.mark.parametrize("total_gib, family, budget", [
    (63.15, "strix-point", 48), (15.23, "strix-point", 11), (31.0, "strix-point", 24),
    (23.3, "strix-point", 18), (124.46, "strix-halo", 116), (30.98, "strix-halo", 22),
    (6.0, "strix-point", 2)])
def test_default_budget_follows_the_ram(total_gib, family, budget):
    profile = load_profile(family)
    assert profile.gpu_budget_gib(total_gib) == budget
    assert total_gib - budget >= profile.os_min_gib


def test_setup_on_the_16_gib_box_proposes_a_budget_that_fits(machine):
    root = machine("hx370-evo-x1")
    shutil.copytree(MACHINES / "ojai-fresh/.ojai/commands/update-grub", root / ".ojai/commands/update-grub")
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none", "--no-npu"])
    assert "leaves the OS" not in result.stdout, result.stdout
    assert f"ttm.pages_limit={11 * GIB // 4096}" in result.stdout, result.stdout
    assert result.exit_code == 2, result.stdout


# -- the NPU route ---------------------------------------------------------------------------

def test_flm_incompatible_firmware_fails_when_the_npu_route_is_wanted():
    report = diagnose(Root(MACHINES / "strix-point-cachyos-npu-firmware"))
    fw = finding(report, "npu.firmware")
    assert fw.severity == "fail"
    assert "1.0.0.63" in fw.evidence and "incompatible" in fw.evidence and "wanted" in fw.evidence
    assert "npu_7.sbin" in fw.fix and "--no-npu" in fw.fix
    memlock = finding(report, "npu.memlock")
    assert memlock.severity == "info"
    assert "output is there but has no memlock line" in memlock.evidence


def test_old_firmware_without_fastflowlm_stays_a_warning():
    fw = finding(diagnose(Root(MACHINES / "hx370-evo-x1")), "npu.firmware")
    assert fw.severity == "warn" and "FastFlowLM is not installed" in fw.evidence


@pytest.mark.parametrize("rel, fw_ok, drm", [
    ("fastflowlm-421-strix-point-npu-firmware/flm-validate.txt", False, "0.6"),
    ("fastflowlm-docker-4-krackan-npu-firmware/flm-validate.txt", False, "0.0")])
def test_flm_validate_captures_with_incompatible_firmware(rel, fw_ok, drm):
    status = parse_validate(capture(rel), 1)
    assert status.firmware.ok is fw_ok and status.amdxdna.observed == drm
    assert status.memlock.ok is None and status.unread == []
    assert not status.ready


def test_a_memlock_line_that_cannot_be_read_is_said(machine):
    root = machine("strix-point-cachyos-npu-firmware")
    out = root / ".ojai/commands/flm validate/stdout"
    out.write_text(out.read_text() + "[Linux]  Memlock Limit: unlimited (soft)\n")
    memlock = finding(diagnose(Root(root)), "npu.memlock")
    assert memlock.severity == "info"
    assert "'[Linux] Memlock Limit: unlimited (soft)', which could not be read" in memlock.evidence


# -- the BIOS carve-out ------------------------------------------------------------------------

DEBIAN_DROPIN = "strix-halo-debian13-grub-dropin"  # ROCm/ROCm#5671, see tests/machines/README.md


def test_small_carve_out_passes_with_its_advice():
    """The real 512 MiB carve-out of ROCm/ROCm#5671 (dmesg "512M of VRAM memory ready")."""
    carve = finding(diagnose(Root(MACHINES / DEBIAN_DROPIN)), "gpu.carve-out")
    assert carve.severity == "pass" and carve.evidence.startswith("VRAM carve-out 0.5 GiB of 125.6 GiB")
    assert "After a BIOS update, re-check the carve-out and the TTM limit" in carve.evidence
    assert carve.title == "Small BIOS VRAM carve-out (UMA Frame Buffer Size)"
    assert carve.link == "https://rocm.docs.amd.com/en/latest/reference/system-optimization/rdna3-5.html"
    # the poster set the limit to nearly all the RAM on purpose: not a carve-out that grew
    assert "a BIOS update?" not in carve.evidence
    assert "leaves the OS 0.1 GiB" in carve.evidence and "the carve-out did not cause it" in carve.evidence


def test_the_debian_drop_in_machine_is_read_right():
    """The rest of that machine: its family, the limit its appending drop-in sets, the DKMS driver."""
    report = diagnose(Root(MACHINES / DEBIAN_DROPIN))
    assert report.profile.id == "strix-halo" and report.profile.gpu_target == "gfx1151"
    ttm = report.facts.ttm
    assert (ttm.live_module, ttm.active_pages) == ("amdttm", 32768000)
    assert (ttm.config_key, ttm.config_pages, ttm.config_file) == (
        "amdttm.pages_limit", 32768000, "/etc/default/grub.d/amdgpu.cfg")
    assert (ttm.cmdline_key, ttm.cmdline_pages) == ("amdttm.pages_limit", 32768000)
    assert report.facts.grub.winners["GRUB_CMDLINE_LINUX"] == "/etc/default/grub.d/amdgpu.cfg"
    assert report.facts.grub.tokens == [  # the main file's value, then the drop-in's appended
        "ttm.pages_limit=32768000", "ttm.page_pool_size=32768000", "amdttm.pages_limit=32768000",
        "amdttm.page_pool_size=32768000", "amdgpu.cwsr_enable=0", "quiet"]
    active = finding(report, "ttm.active")
    assert active.severity == "pass"
    assert "configured 32768000 pages (125.0 GiB) in /etc/default/grub.d/amdgpu.cfg" in active.evidence
    assert "active 32768000 pages (125.0 GiB) (amdttm)" in active.evidence
    assert finding(report, "ttm.module-key").severity == "pass"
    assert report.facts.amdgpu_dkms is True
    dkms = finding(report, "driver.no-dkms")
    assert dkms.severity == "warn" and "amdgpu-dkms is installed" in dkms.evidence
    assert finding(report, "memory.size").severity == "pass"
    assert finding(report, "rocm.min").evidence.startswith("ROCm 7.1.0")


@pytest.mark.parametrize("name, gib", [("strix-halo-96g-rocminfo-excerpt", 96), ("hx370-evo-x1", 16)])
def test_large_carve_out_warns_with_the_bios_setting(name, gib):
    carve = finding(diagnose(Root(MACHINES / name)), "gpu.carve-out")
    assert carve.severity == "warn" and f"VRAM carve-out {gib}.0 GiB" in carve.evidence
    assert "UMA Frame Buffer Size" in carve.fix and "BIOS update" in carve.fix


def test_a_ttm_limit_the_os_can_no_longer_back_is_caught(machine):
    """After a BIOS update raised the carve-out, the old limit is more than the OS has."""
    root = machine("ojai-rebooted")  # 48 GiB limit, active
    (root / "proc/meminfo").write_text((root / "proc/meminfo").read_text().replace(
        "MemTotal:       66217392 kB", "MemTotal:       32212254 kB"))
    # the BIOS now sets aside 32 GiB instead of 0.5: that is where the OS's memory went
    (root / "sys/class/drm/card1/device/mem_info_vram_total").write_text(f"{32 * GIB}\n")
    carve = finding(diagnose(Root(root)), "gpu.carve-out")
    assert carve.severity == "warn" and "a BIOS update?" in carve.evidence
    assert "VRAM carve-out 32.0 GiB" in carve.evidence
    assert f"Re-run `ojai setup --root {root}`" in carve.fix


# -- the report, as a program reads it --------------------------------------------------------

@pytest.mark.parametrize("name", ["strix-halo-96g-rocminfo-excerpt", "strix-halo-r9700-override",
                                  "strix-point-cachyos-npu-firmware"])
def test_unknown_facts_name_machine_paths_not_where_the_capture_lies(name):
    result = CliRunner().invoke(app, ["doctor", "--json", "--root", str(MACHINES / name)])
    data = json.loads(result.stdout)
    text = json.dumps({"findings": data["findings"], "unknown": data["facts"]["unknown"]})
    # the fixes' `ojai ... --root` commands name the folder, as they must; nothing else does
    assert str(MACHINES) not in text.replace(f"--root {MACHINES / name}", "--root <root>")
    assert detect_profile(collect(Root(MACHINES / name))).id == data["profile"]["id"]
