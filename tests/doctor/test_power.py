"""--power performance: the ACPI platform profile set the distribution's way (tuned,
power-profiles-daemon, or ojai's small unit), shown as a diff and rolled back like every change.

The machines are copies of ``ojai-fresh`` with the platform profile files the kernel documents
(docs.kernel.org/userspace-api/sysfs-platform_profile.html: ``platform_profile`` and
``platform_profile_choices``, values such as ``low-power balanced performance``), and the files
power-profiles-daemon (``/var/lib/power-profiles-daemon/state.ini``, its README) and tuned
(``/etc/tuned/active_profile``, tuned-adm(8)) keep.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.doctor import diagnose
from ojai_setup.core.root import COMMANDS_DIR, Root, command_key


def with_profile(root: Path, current: str = "balanced") -> Path:
    acpi = root / "sys/firmware/acpi"
    acpi.mkdir(parents=True, exist_ok=True)
    (acpi / "platform_profile").write_text(current + "\n")
    (acpi / "platform_profile_choices").write_text("low-power balanced performance\n")
    for argv in (["systemctl", "daemon-reload"], ["systemctl", "restart", "tuned"],
                 ["systemctl", "restart", "power-profiles-daemon"]):
        answer(root, argv)
    return root


def answer(root: Path, argv: list[str], stdout: str = "") -> None:
    folder = root / COMMANDS_DIR / command_key(argv)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stdout").write_text(stdout)


def setup(root: Path, *args: str):
    return CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none",
                                    "--no-npu", *args])


def power_step(root: Path, *args: str) -> dict:
    plan = json.loads(setup(root, "--json", *args).stdout)
    return next(s for s in plan["steps"] if s["step"] == "power")


def test_doctor_reports_the_platform_profile(machine):
    root = with_profile(machine("ojai-fresh"))
    f = next(f for f in diagnose(Root(root)).findings if f.id == "power.profile")
    assert f.severity == "info"
    assert "platform profile balanced (choices: low-power balanced performance)" in f.evidence
    assert "--power performance" in f.evidence


def test_without_a_manager_a_unit_sets_it_at_boot_and_rollback_removes_it(machine):
    root = with_profile(machine("ojai-fresh"))
    step = power_step(root, "--power", "performance")
    assert step["status"] == "change" and "ojai-power.service" in step["sentence"]
    applied = setup(root, "--power", "performance", "--apply", "--yes")
    assert applied.exit_code == 0, applied.output
    unit = root / "etc/systemd/system/ojai-power.service"
    assert "echo performance > /sys/firmware/acpi/platform_profile" in unit.read_text()
    link = root / "etc/systemd/system/multi-user.target.wants/ojai-power.service"
    assert str(link.readlink()) == "/etc/systemd/system/ojai-power.service"
    assert power_step(root, "--power", "performance")["status"] == "satisfied"
    undone = CliRunner().invoke(app, ["rollback", "--root", str(root), "--yes"])
    assert undone.exit_code == 0, undone.output
    assert not unit.exists() and not link.is_symlink()


def test_power_profiles_daemon_gets_its_saved_profile_changed_by_key(machine):
    root = with_profile(machine("ojai-fresh"))
    answer(root, ["powerprofilesctl", "get"], "balanced\n")
    state = root / "var/lib/power-profiles-daemon/state.ini"
    state.parent.mkdir(parents=True)
    state.write_text("[State]\nDriver=amd_pmf\nProfile=balanced\n")
    dry = setup(root, "--power", "performance")
    assert "-Profile=balanced" in dry.stdout and "+Profile=performance" in dry.stdout
    applied = setup(root, "--power", "performance", "--apply", "--yes")
    assert applied.exit_code == 0, applied.output
    assert state.read_text() == "[State]\nDriver=amd_pmf\nProfile=performance\n"
    assert CliRunner().invoke(app, ["rollback", "--root", str(root), "--yes"]).exit_code == 0
    assert state.read_text() == "[State]\nDriver=amd_pmf\nProfile=balanced\n"


def test_tuned_gets_a_performance_profile(machine):
    root = with_profile(machine("ojai-fresh"))
    answer(root, ["tuned-adm", "active"], "Current active profile: balanced\n")
    (root / "etc/tuned").mkdir(parents=True)
    (root / "etc/tuned/active_profile").write_text("balanced\n")
    step = power_step(root, "--power", "performance")
    assert step["status"] == "change" and "tuned profile accelerator-performance" in step["sentence"]
    after = {a["path"]: a.get("after") for a in step["actions"]}
    assert after["/etc/tuned/active_profile"] == "accelerator-performance\n"


def test_no_performance_choice_is_blocked(machine):
    root = with_profile(machine("ojai-fresh"))
    (root / "sys/firmware/acpi/platform_profile_choices").write_text("low-power balanced\n")
    step = power_step(root, "--power", "performance")
    assert step["status"] == "blocked" and "offers no performance profile" in step["sentence"]


def test_the_default_leaves_power_alone(machine):
    step = power_step(with_profile(machine("ojai-fresh")))
    assert step["status"] == "satisfied" and "power left as it is" in step["sentence"]
