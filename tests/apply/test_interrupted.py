"""Applies killed with SIGKILL at every action boundary, the machine lock, and a full disk.

The kill is real: ``ojai setup --apply`` runs in a child process (tests/support/kill_at.py)
that sends itself SIGKILL when it reaches the chosen point, so no ``finally`` and no
exception handler runs. Afterwards ``ojai doctor`` must say an apply was interrupted, and
either ``ojai setup --apply`` finishes it (the owed update-grub runs, a dry run then has
nothing to do) or ``ojai rollback`` puts every file back byte for byte. The machine is
ojai-fresh with an Ubuntu cloud image drop-in, so the plan has two file actions (the drop-in
edited, ojai's own drop-in created) and one follow-up command.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.apply.executor import apply
from ojai_setup.apply.lock import LockHeld, MachineLock
from ojai_setup.cli import app
from ojai_setup.commands.setup import build_plan
from ojai_setup.core.progress import NullProgress
from ojai_setup.core.root import Root
from ojai_setup.facts.grub_env import configured_cmdline, source_grub_files
from ojai_setup.model.settings import Settings

KILLER = Path(__file__).parents[1] / "support" / "kill_at.py"
ARGS = ["--llamacpp", "none", "--no-npu"]
CLOUD = 'GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0 amdgpu.gttsize=512"\n'
LIMIT = "ttm.pages_limit=12582912"
FINAL = ["console=tty1", "console=ttyS0", LIMIT]

#: every boundary of the apply: (fault point, which time it is reached)
BOUNDARIES = [
    ("journal-opened", 1), ("backups-written", 1),
    ("action-start", 1), ("before-rename", 1), ("action-done", 1),
    ("action-start", 2), ("before-rename", 2), ("action-done", 2),
    ("handler-start", 1), ("handler-done", 1),
]


def ojai(*args: str):
    return CliRunner().invoke(app, list(args))


def fresh(machine) -> Path:
    root = machine("ojai-fresh")
    d = root / "etc/default/grub.d"
    d.mkdir(parents=True)
    (d / "50-cloudimg-settings.cfg").write_text(CLOUD)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted((root / "etc").rglob("*")) if p.is_file()}


def killed_apply(root: Path, stage: str, nth: int) -> None:
    proc = subprocess.run([sys.executable, str(KILLER), stage, str(nth), "setup", "--root",
                           str(root), "--apply", "--yes", *ARGS],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])


def leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*") if p.name.endswith((".ojai-tmp", ".tmp"))]


def apply_finding(root: Path) -> dict:
    report = json.loads(ojai("doctor", "--json", "--root", str(root)).stdout)
    return next(f for f in report["findings"] if f["id"] == "ojai.apply")


def journal_entries(root: Path) -> list[dict]:
    """The journal entries, oldest first (ids made in the same second sort by their suffix)."""
    entries = [json.loads(p.read_text()) for p in (root / "var/lib/ojai/journal").glob("*.json")]
    return sorted(entries, key=lambda e: e["started"])


@pytest.mark.parametrize("stage,nth", BOUNDARIES, ids=[f"{s}-{n}" for s, n in BOUNDARIES])
def test_a_killed_apply_is_reported_then_finished_by_setup(machine, stage, nth):
    root = fresh(machine)
    killed_apply(root, stage, nth)
    finding = apply_finding(root)
    assert finding["severity"] == "fail" and "was interrupted" in finding["evidence"], finding
    # the whole command of the killed apply, for this machine folder, and the one that undoes it
    assert finding["fix"] == (f"Run `ojai setup --root {root} --llamacpp none --no-npu --apply` "
                              "to finish it (it runs what is owed) or `ojai rollback --root "
                              f"{root}` to undo it; then reboot."), finding
    dry = ojai("setup", "--root", str(root), *ARGS)
    assert dry.exit_code == 2, dry.output
    assert "was interrupted" in dry.stdout

    done = ojai("setup", "--root", str(root), "--apply", "--yes", *ARGS)
    assert done.exit_code == 0, done.output
    assert "finished first:" in done.stdout
    assert configured_cmdline(source_grub_files(root / "etc")) == FINAL
    assert leftovers(root) == []
    entries = journal_entries(root)
    assert entries[0]["status"] == "interrupted"
    ran = [h["name"] for e in entries for h in e["handlers"] if h.get("exit_code") == 0]
    assert "update-grub" in ran  # the owed regeneration ran, in the kill's apply or after it
    again = ojai("setup", "--root", str(root), *ARGS)
    assert again.exit_code == 0, again.output  # nothing to do, nothing owed
    assert apply_finding(root)["severity"] == "pass"


@pytest.mark.parametrize("stage,nth", BOUNDARIES, ids=[f"{s}-{n}" for s, n in BOUNDARIES])
def test_a_killed_apply_is_undone_by_rollback(machine, stage, nth):
    root = fresh(machine)
    original = snapshot(root)
    killed_apply(root, stage, nth)
    undo = ojai("rollback", "--root", str(root), "--yes")
    assert undo.exit_code == 0, undo.output
    assert snapshot(root) == original
    assert leftovers(root) == []
    changed_any = any(e["files"] for e in journal_entries(root) if e["kind"] == "apply")
    if changed_any:
        assert "ran update-grub" in undo.stdout
    else:
        assert "nothing to roll back" in undo.stdout
    assert apply_finding(root)["severity"] == "pass"
    plan = ojai("setup", "--root", str(root), *ARGS)
    assert plan.exit_code == 2 and "99-ojai.cfg" in plan.stdout


#: every boundary of the rollback of that apply (two files restored, update-grub)
ROLLBACK_BOUNDARIES = [("restore-start", 1), ("restore-done", 1), ("restore-start", 2),
                       ("restore-done", 2), ("handler-done", 1)]


@pytest.mark.parametrize("stage,nth", ROLLBACK_BOUNDARIES,
                         ids=[f"{s}-{n}" for s, n in ROLLBACK_BOUNDARIES])
def test_a_killed_rollback_is_finished_by_the_next_rollback(machine, stage, nth):
    root = fresh(machine)
    original = snapshot(root)
    assert ojai("setup", "--root", str(root), "--apply", "--yes", *ARGS).exit_code == 0
    proc = subprocess.run([sys.executable, str(KILLER), stage, str(nth), "rollback", "--yes",
                           "--root", str(root)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    finding = apply_finding(root)
    assert finding["severity"] == "fail" and "rollback" in finding["evidence"]
    undo = ojai("rollback", "--root", str(root), "--yes")
    assert undo.exit_code == 0, undo.output
    assert snapshot(root) == original


def test_a_second_apply_or_rollback_names_the_lock_holder_and_touches_nothing(machine):
    root = fresh(machine)
    before = snapshot(root)
    with MachineLock(root / "var/lib/ojai", "ojai setup --apply"):
        for args in (["setup", "--root", str(root), "--apply", "--yes", *ARGS],
                     ["rollback", "--root", str(root), "--yes"]):
            result = ojai(*args)
            assert result.exit_code == 1, result.output
            err = " ".join(result.stderr.split())
            assert "another ojai" in err and "ojai setup --apply" in err, err
        plan = build_plan(Root(root), Settings(llamacpp="none", npu=False))
        with pytest.raises(LockHeld, match=r"process \d+"):
            apply(plan, Root(root), NullProgress())
    assert snapshot(root) == before
    assert not (root / "var/lib/ojai/journal").exists() or not list(
        (root / "var/lib/ojai/journal").iterdir())


def test_the_lock_of_a_killed_process_is_free_again(machine):
    root = fresh(machine)
    killed_apply(root, "action-done", 1)
    assert ojai("setup", "--root", str(root), "--apply", "--yes", *ARGS).exit_code == 0


@pytest.mark.parametrize("stage", ["before-rename", "action-done", "handler-start"])
def test_a_full_disk_stops_with_a_clear_message_and_no_half_written_file(machine, stage, monkeypatch):
    root = fresh(machine)
    original = snapshot(root)

    def full(name: str) -> None:
        if name == stage:
            raise OSError(errno.ENOSPC, "No space left on device")

    from ojai_setup.apply import faults

    faults.set_fault_hook(full)
    try:
        result = ojai("setup", "--root", str(root), "--apply", "--yes", *ARGS)
    finally:
        faults.set_fault_hook(None)
    assert result.exit_code == 1
    said = " ".join(result.stderr.split())
    assert "No space left on device" in said
    if stage == "before-rename":  # the first write never landed: nothing to undo
        assert "nothing on the machine was changed" in said and "to try again: ojai setup" in said
        assert "backed up" not in said
    else:
        assert "to undo: ojai rollback" in said and "to finish: ojai setup" in said
    for path, data in snapshot(root).items():  # every file is the old or the planned text
        assert data == original.get(path) or path.endswith(("99-ojai.cfg", "50-cloudimg-settings.cfg"))
    assert leftovers(root) == []
    undo = ojai("rollback", "--root", str(root), "--yes")
    if stage == "before-rename":  # the first write never landed
        assert undo.exit_code == 0 and "nothing to roll back" in undo.stdout, undo.output
    else:
        assert undo.exit_code == 0, undo.output
    assert snapshot(root) == original
