"""ojai setup end to end on copies of the test machines: plan, apply twice, stale plans,
rollback, and every bad GRUB input left untouched with a clear message."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ojai_setup.core.status import ExitStatus
from typer.testing import CliRunner

from ojai_setup.apply.executor import apply
from ojai_setup.apply.validate import bash_read_var
from ojai_setup.cli import app
from ojai_setup.commands.setup import build_plan
from ojai_setup.core.progress import NullProgress
from ojai_setup.core.root import Root
from ojai_setup.formats.kernel_params import parse_cmdline
from ojai_setup.model.settings import Settings
from tests.support.text import flat

NO_LLAMA = ["--llamacpp", "none"]


def ojai(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def grub_tokens(root: Path) -> list[str]:
    return parse_cmdline(bash_read_var(root / "etc/default/grub", "GRUB_CMDLINE_LINUX_DEFAULT"))


def test_dry_run_shows_diff_and_reboot_and_exits_2(machine):
    root = machine("ojai-fresh")
    before = (root / "etc/default/grub").read_bytes()
    result = ojai("setup", "--root", str(root), *NO_LLAMA)
    assert result.exit_code == 2, result.output
    assert '+GRUB_CMDLINE_LINUX_DEFAULT="quiet splash ttm.pages_limit=12582912"' in result.stdout
    assert '-GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"' in result.stdout
    assert "update-grub  (regenerate the boot configuration" in result.stdout
    assert "reboot is needed" in result.stdout
    assert (root / "etc/default/grub").read_bytes() == before


def test_apply_twice_second_changes_nothing(machine):
    root = machine("ojai-fresh")
    first = ojai("setup", "--root", str(root), "--apply", "--yes", *NO_LLAMA)
    assert first.exit_code == 0, first.output
    assert "ran update-grub" in first.stdout
    assert grub_tokens(root) == ["quiet", "splash", "ttm.pages_limit=12582912"]
    grub_after_first = (root / "etc/default/grub").read_bytes()
    state = json.loads((root / "var/lib/ojai/state.json").read_text())
    boot_id = (root / "proc/sys/kernel/random/boot_id").read_text().strip()
    assert state["records"]["ttm"]["expected_pages"] == 12582912
    assert state["records"]["ttm"]["boot_id"] == boot_id
    backups = list((root / "var/lib/ojai/backups").rglob("grub"))
    assert len(backups) == 1 and b"ttm.pages_limit" not in backups[0].read_bytes()

    second = ojai("setup", "--root", str(root), "--apply", "--yes", *NO_LLAMA)
    assert second.exit_code == 0, second.output
    assert "nothing to do" in second.stdout
    assert "ttm.pages_limit=12582912 (48 GiB for the GPU) is already set" in flat(second.stdout)
    assert (root / "etc/default/grub").read_bytes() == grub_after_first
    assert len(list((root / "var/lib/ojai/journal").glob("*.json"))) == 1

    doctor = ojai("doctor", "--json", "--root", str(root))
    ttm = next(f for f in json.loads(doctor.stdout)["findings"] if f["id"] == "ttm.active")
    assert "reboot pending" in ttm["evidence"]


def test_gpu_memory_override_and_refusal(machine):
    root = machine("ojai-fresh")
    ok = ojai("setup", "--root", str(root), "--gpu-memory", "56", *NO_LLAMA)
    assert ok.exit_code == 2 and "ttm.pages_limit=14680064" in ok.stdout
    too_much = ojai("setup", "--root", str(root), "--gpu-memory", "62", *NO_LLAMA)
    assert too_much.exit_code == 1
    assert "keep at least 4 GiB" in too_much.stdout


def test_strix_halo_dkms_uses_amdttm_and_aligns_modprobe(machine):
    root = machine("strix-halo-dkms")
    result = ojai("setup", "--root", str(root), "--apply", "--yes", *NO_LLAMA)
    assert result.exit_code == 0, result.output
    tokens = grub_tokens(root)
    pages = [t for t in tokens if "pages_limit" in t]
    assert len(pages) == 1 and pages[0].startswith("amdttm.pages_limit=")
    assert not any(t.startswith("amdgpu.gtt") for t in tokens)
    conf = (root / "etc/modprobe.d/ttm.conf").read_text()
    assert conf.strip() == "options amdttm pages_limit=" + pages[0].split("=")[1]
    assert "update-initramfs" in result.stdout
    report = json.loads(ojai("doctor", "--json", "--root", str(root)).stdout)
    key = next(f for f in report["findings"] if f["id"] == "ttm.module-key")
    assert key["severity"] == "pass"


def test_saved_plan_applies_exactly_and_stale_plan_is_refused(machine, tmp_path):
    root = machine("ojai-fresh")
    plan = tmp_path / "plan.json"
    made = ojai("setup", "--root", str(root), "--out", str(plan), *NO_LLAMA)
    assert made.exit_code == 2 and plan.is_file()
    grub = root / "etc/default/grub"
    original = grub.read_text()
    grub.write_text(original.replace('GRUB_TIMEOUT=0', 'GRUB_TIMEOUT=5'))
    stale = ojai("setup", "--root", str(root), "--apply", "--plan", str(plan))
    assert stale.exit_code == 1
    assert "saved plan is stale" in stale.stderr and "/etc/default/grub changed" in stale.stderr
    # the hint quotes the whole command the plan was made with, --root and options included
    assert f"`ojai setup --root {root} --llamacpp none --out {plan}` again" in " ".join(stale.stderr.split())
    assert "ttm.pages_limit" not in grub.read_text()

    grub.write_text(original)
    fresh = ojai("setup", "--root", str(root), "--apply", "--plan", str(plan))
    assert fresh.exit_code == 0, fresh.output
    assert "ttm.pages_limit=12582912" in grub.read_text()


def test_apply_without_terminal_or_yes_refuses(machine):
    root = machine("ojai-fresh")
    result = ojai("setup", "--root", str(root), "--apply", *NO_LLAMA)
    assert result.exit_code == 1
    assert "refusing to apply without review" in result.stderr
    assert "ttm.pages_limit" not in (root / "etc/default/grub").read_text()


def test_rollback_restores_last_apply(machine):
    root = machine("ojai-fresh")
    original = (root / "etc/default/grub").read_bytes()
    assert ojai("setup", "--root", str(root), "--apply", "--yes", *NO_LLAMA).exit_code == 0
    result = ojai("rollback", "--root", str(root), "--yes")
    assert result.exit_code == 0, result.output
    assert (root / "etc/default/grub").read_bytes() == original
    again = ojai("setup", "--root", str(root), *NO_LLAMA)
    assert again.exit_code == 2


def test_fault_between_temp_file_and_rename_keeps_original(machine):
    root_dir = machine("ojai-fresh")
    root = Root(root_dir)
    original = (root_dir / "etc/default/grub").read_bytes()
    plan = build_plan(root, Settings(llamacpp="none"))

    def fault(stage: str) -> None:
        if stage == "before-rename":
            raise KeyboardInterrupt("power cut")

    with pytest.raises(KeyboardInterrupt):
        apply(plan, root, NullProgress(), fault_hook=fault)
    assert (root_dir / "etc/default/grub").read_bytes() == original
    leftovers = [p for p in (root_dir / "etc/default").iterdir() if p.name != "grub"]
    assert leftovers == []
    result = ojai("setup", "--root", str(root_dir), "--apply", "--yes", *NO_LLAMA)
    assert result.exit_code == 0, result.output
    assert grub_tokens(root_dir)[-1] == "ttm.pages_limit=12582912"


# -- bad GRUB inputs: the file is left untouched and the message says what is wrong --------------

BAD_GRUB = {
    "missing": (None, "/etc/default/grub does not exist"),
    "no-cmdline-var": ('GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\n', "sets neither GRUB_CMDLINE_LINUX_DEFAULT"),
    "defined-twice": ('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n'
                      'GRUB_CMDLINE_LINUX_DEFAULT="splash"\n', "is assigned 2 times (lines 1, 3)"),
    "unbalanced-quotes": ('GRUB_CMDLINE_LINUX_DEFAULT="quiet splash\nGRUB_CMDLINE_LINUX=""\n', "quote"),
    "crlf": ('GRUB_DEFAULT=0\r\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\r\n', "CRLF"),
}


@pytest.mark.parametrize("case", sorted(BAD_GRUB))
def test_bad_grub_file_blocks_with_clear_message(machine, case):
    root = machine("ojai-fresh")
    grub = root / "etc/default/grub"
    text, message = BAD_GRUB[case]
    if text is None:
        grub.unlink()
    else:
        grub.write_bytes(text.encode())
    result = ojai("setup", "--root", str(root), "--apply", "--yes", *NO_LLAMA)
    # the GPU-memory step is blocked; the steps that do not need it (the NPU's launch script)
    # are applied, and the apply ends saying what it left out, with its own exit status
    assert result.exit_code == ExitStatus.INCOMPLETE, result.output
    assert message in flat(result.stdout) + flat(result.stderr)
    assert flat(result.stdout).endswith(
        "Applied what it could; not applied: gpu-memory is blocked.")
    if text is None:
        assert not grub.exists()
    else:
        assert grub.read_bytes() == text.encode()
    for entry in (root / "var/lib/ojai/journal").glob("*.json"):
        assert "/etc/default/grub" not in entry.read_text()


def test_read_only_grub_file_fails_cleanly(machine):
    """An immutable file (read-only even for root, as on an image-based /etc) is never
    half-replaced: the apply stops with the reason and the next apply can finish."""
    root = machine("ojai-fresh")
    grub = root / "etc/default/grub"
    original = grub.read_bytes()
    subprocess.run(["chattr", "+i", str(grub)], check=True)
    try:
        result = ojai("setup", "--root", str(root), "--apply", "--yes", *NO_LLAMA)
        assert result.exit_code == 1
        assert "apply failed" in result.stderr and "/etc/default/grub" in result.stderr
        assert "not permitted" in result.stderr.replace("\n", " ")
        said = " ".join(result.stderr.split())
        assert f"to finish: ojai setup --root {root} {' '.join(NO_LLAMA)} --apply" in said, said
        assert f"to undo: ojai rollback --root {root}" in said, said
        # the boot goes last: the NPU's launch script was written, the boot left as it was
        assert "the boot configuration was not touched" in said, said
        assert "backed up" not in said  # a new file has no original to back up
        assert grub.read_bytes() == original
        assert [p.name for p in grub.parent.iterdir()] == ["grub"]
    finally:
        subprocess.run(["chattr", "-i", str(grub)], check=True)
    result = ojai("setup", "--root", str(root), "--apply", "--yes", *NO_LLAMA)
    assert result.exit_code == 0, result.output


def test_tricky_token_list_keeps_everything_else(machine):
    root = machine("ojai-fresh")
    grub = root / "etc/default/grub"
    text = grub.read_text().replace(
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"',
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet splash ttm.pages_limit=100 $EXTRA "
        "acpi_osi=\\\"Windows 2020\\\" ttm.pages_limit=200 mitigations=off\"")
    grub.write_text("EXTRA=nosmt\n" + text)
    result = ojai("setup", "--root", str(root), "--apply", "--yes", *NO_LLAMA)
    assert result.exit_code == 0, result.output
    tokens = grub_tokens(root)
    assert [t for t in tokens if "pages_limit" in t] == ["ttm.pages_limit=12582912"]
    assert tokens == ["quiet", "splash", "ttm.pages_limit=12582912", "nosmt",
                      'acpi_osi="Windows 2020"', "mitigations=off"]
    assert grub.read_text().startswith("EXTRA=nosmt\n")


def test_failed_follow_up_command_runs_on_the_next_apply(machine):
    root = machine("ojai-fresh")
    exit_code = root / ".ojai/commands/update-grub/exit_code"
    exit_code.write_text("1\n")
    failed = ojai("setup", "--root", str(root), "--apply", "--yes", *NO_LLAMA)
    assert failed.exit_code == 1
    assert "`update-grub` failed with exit code 1" in failed.stderr
    assert "ttm.pages_limit=12582912" in (root / "etc/default/grub").read_text()

    exit_code.write_text("0\n")
    again = ojai("setup", "--root", str(root), "--apply", *NO_LLAMA)  # no --yes needed: no change
    assert again.exit_code == 0, again.output
    assert "an earlier apply left work owed" in flat(again.stdout)
    assert "ran update-grub" in flat(again.stdout)
    assert "still due" not in flat(again.stdout) and "still owed" not in flat(again.stdout)
    done = ojai("setup", "--root", str(root), "--apply", *NO_LLAMA)
    assert "nothing to do" in done.stdout


def test_the_plan_lists_the_failing_preconditions_first(machine):
    """A BIOS below Minisforum's minimum is said above the steps, with its fix; the TTM limit
    the plan itself sets is not repeated as a finding."""
    from typer.testing import CliRunner

    from ojai_setup.cli import app

    root = machine("ojai-fresh")
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none",
                                      "--no-npu"], env={"COLUMNS": "200"})
    out = result.stdout
    assert out.index("Minisforum BIOS 1.01 or newer") < out.index("gpu-memory:")
    assert "fix: Update the BIOS to 1.01" in out
    assert "GPU memory limit not configured" not in out
    data = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none", "--json"])
    ids = [f["id"] for f in __import__("json").loads(data.stdout)["preconditions"]]
    assert "bios.min" in ids and not any(i.startswith("ttm.") for i in ids)


def test_a_named_profile_is_forced_in_setup_as_in_doctor(machine):
    """``--profile`` gives the same checks to setup's preconditions as to doctor: forced, the
    TTM check runs on a machine without an AMD GPU instead of calling itself moot."""
    root = machine("no-amd-gpu")
    doctor = json.loads(ojai("doctor", "--root", str(root), "--json", "--profile", "ojai").stdout)
    assert doctor["profile"]["forced"] is True
    warned = {f["id"]: f["evidence"] for f in doctor["findings"] if f["severity"] in ("warn", "fail")}
    assert "ttm.active" in warned
    plan = json.loads(ojai("setup", "--root", str(root), "--json", "--profile", "ojai",
                           "--llamacpp", "none", "--no-npu").stdout)
    pre = {f["id"]: f["evidence"] for f in plan["preconditions"]}
    assert pre["ttm.active"] == warned["ttm.active"]
    assert "no AMD GPU" not in pre["ttm.active"]
