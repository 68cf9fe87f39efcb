"""Rollbacks killed with SIGKILL at every boundary, and what a rollback leaves behind.

As tests/apply/test_interrupted.py does for apply: ``ojai rollback`` runs in a child process
(tests/support/kill_at.py) that kills itself at a fault point, so nothing is cleaned up. The
follow-up commands of what the killed rollback already put back or removed (``systemctl
daemon-reload`` after the units, ``update-grub`` after the GRUB drop-ins, ``limine-update``
after the Limine drop-in) are then owed: ``ojai doctor`` names them, and the next rollback or
apply runs them. The machines are ojai-fresh with an Ubuntu cloud image drop-in and an ACPI
platform profile (``--power performance`` writes ``ojai-power.service`` and its wants link),
and cachyos-limine; their commands are answered from their captures, so what ran is read
from the journal.

Also here: a rollback the person declines (or that has no terminal to ask on) leaves an
interrupted apply interrupted; a rollback takes away the empty folders the apply made; a
second ojai always names the lock's holder; a rollback with nothing to do exits 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.terminal import Window
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.root import COMMANDS_DIR, command_key

KILLER = Path(__file__).parents[1] / "support" / "kill_at.py"
OJAI = str(Path(sys.executable).parent / "ojai")
CLOUD = 'GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0 amdgpu.gttsize=512"\n'
POWER = ["--llamacpp", "none", "--no-npu", "--power", "performance"]
LIMINE = ["--llamacpp", "none", "--no-npu"]
DAEMON_RELOAD, UPDATE_GRUB, LIMINE_UPDATE = "systemctl daemon-reload", "update-grub", "limine-update"


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def powered(machine) -> Path:
    """ojai-fresh with a cloud-image GRUB drop-in and a platform profile ojai's unit sets."""
    root = machine("ojai-fresh")
    (root / "etc/default/grub.d").mkdir(parents=True)
    (root / "etc/default/grub.d/50-cloudimg-settings.cfg").write_text(CLOUD)
    acpi = root / "sys/firmware/acpi"
    acpi.mkdir(parents=True)
    (acpi / "platform_profile").write_text("balanced\n")
    (acpi / "platform_profile_choices").write_text("low-power balanced performance\n")
    answer = root / COMMANDS_DIR / command_key(["systemctl", "daemon-reload"])
    answer.mkdir(parents=True)
    (answer / "stdout").write_text("")
    return root


def tree(root: Path) -> dict[str, bytes | str]:
    """Every file (its bytes), link (its target) and folder under /etc."""
    out: dict[str, bytes | str] = {}
    for p in sorted((root / "etc").rglob("*")):
        key = str(p.relative_to(root))
        out[key] = (f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes() if p.is_file()
                    else "folder")
    return out


def state(root: Path) -> dict:
    return json.loads((root / "var/lib/ojai/state.json").read_text())


def journal_entries(root: Path) -> list[dict]:
    entries = [json.loads(p.read_text()) for p in (root / "var/lib/ojai/journal").glob("*.json")]
    return sorted(entries, key=lambda e: e["started"])


def apply_finding(root: Path) -> dict:
    report = json.loads(ojai("doctor", "--json", "--root", root).stdout)
    return next(f for f in report["findings"] if f["id"] == "ojai.apply")


def killed_rollback(root: Path, stage: str, nth: int) -> None:
    proc = subprocess.run([sys.executable, str(KILLER), stage, str(nth), "rollback", "--yes",
                           "--root", str(root)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])


#: (fault point, which time) -> the follow-ups owed once a rollback is killed there. The
#: rollback goes 99-ojai.cfg (removed), the cloud drop-in (restored), the wants link and the
#: unit (removed), then daemon-reload and update-grub.
POWER_BOUNDARIES = {
    ("restore-start", 1): [],
    ("restore-done", 1): [UPDATE_GRUB],
    ("restore-start", 2): [UPDATE_GRUB],
    ("restore-done", 2): [UPDATE_GRUB],
    ("restore-start", 3): [UPDATE_GRUB],
    ("restore-done", 3): [UPDATE_GRUB],  # the wants link owes no reload
    ("restore-start", 4): [UPDATE_GRUB],
    ("restore-done", 4): [UPDATE_GRUB, DAEMON_RELOAD],
    ("handler-done", 1): [UPDATE_GRUB],
    ("handler-done", 2): [],
}
#: the same, finished by an apply instead of a rollback (where the rollback already removed
#: the units, and where it ran only daemon-reload)
APPLY_AFTER = [("restore-done", 4), ("handler-done", 1)]


def ran_by(entry: dict) -> list[str]:
    return [" ".join(h["argv"]) for h in entry["handlers"] if h.get("exit_code") == 0]


def assert_owed_and_named(root: Path, owed: list[str]) -> None:
    finding = apply_finding(root)
    assert finding["severity"] == "fail" and "rollback" in finding["evidence"], finding
    for command in owed:
        assert command in finding["evidence"].split("owed: ", 1)[-1], finding
    if not owed:
        assert "owed" not in finding["evidence"], finding


@pytest.mark.parametrize("stage,nth", list(POWER_BOUNDARIES),
                         ids=[f"{s}-{n}" for s, n in POWER_BOUNDARIES])
def test_a_killed_rollback_owes_its_follow_ups_and_the_next_rollback_runs_them(machine, stage,
                                                                                nth):
    root = powered(machine)
    original = tree(root)
    assert ojai("setup", "--root", root, *POWER, "--apply", "--yes").exit_code == 0
    killed_rollback(root, stage, nth)
    owed = POWER_BOUNDARIES[(stage, nth)]
    assert_owed_and_named(root, owed)
    dry = ojai("rollback", "--root", root)  # no terminal: the preview, then a refusal
    assert dry.exit_code == 1
    for command in owed:  # the preview lists what it owes among the commands it will run
        assert command in dry.stdout.split("Then, as root", 1)[-1], dry.stdout
    undo = ojai("rollback", "--root", root, "--yes")
    assert undo.exit_code == 0, undo.output
    last = journal_entries(root)[-1]
    assert last["kind"] == "rollback" and last["status"] == "complete", last
    for command in owed:
        assert command in ran_by(last), (command, last["handlers"])
    assert state(root)["pending_handlers"] == []
    assert tree(root) == original  # every file back, and the folders the apply made gone
    assert apply_finding(root)["severity"] == "pass"


@pytest.mark.parametrize("stage,nth", APPLY_AFTER, ids=[f"{s}-{n}" for s, n in APPLY_AFTER])
def test_a_killed_rollback_s_follow_ups_are_run_by_the_next_apply(machine, stage, nth):
    root = powered(machine)
    assert ojai("setup", "--root", root, *POWER, "--apply", "--yes").exit_code == 0
    killed_rollback(root, stage, nth)
    owed = POWER_BOUNDARIES[(stage, nth)]
    assert_owed_and_named(root, owed)
    dry = ojai("setup", "--root", root, *POWER)
    assert dry.exit_code == 2 and "was interrupted" in dry.stdout, dry.output
    done = ojai("setup", "--root", root, *POWER, "--apply", "--yes")
    assert done.exit_code == 0, done.output
    last = journal_entries(root)[-1]
    assert last["kind"] == "apply", last
    for command in owed:
        assert command in ran_by(last), (command, last["handlers"])
    assert state(root)["pending_handlers"] == []
    assert apply_finding(root)["severity"] == "pass"


@pytest.mark.parametrize("stage,nth,owed", [("restore-start", 1, []),
                                            ("restore-done", 1, [LIMINE_UPDATE]),
                                            ("handler-done", 1, [])])
def test_a_rollback_killed_on_limine_owes_limine_update(machine, stage, nth, owed):
    """Killed after it removed the Limine drop-in, before limine-update: without it the next
    boot keeps the limit that was rolled back, so doctor names it and the next rollback runs
    it, although the drop-in is already gone."""
    root = machine("cachyos-limine")
    original = tree(root)
    ojai("setup", "--root", root, *LIMINE, "--apply", "--yes")  # 1: limine.conf is a capture
    dropin = root / "etc/limine-entry-tool.d/99-ojai.conf"
    assert dropin.is_file() and LIMINE_UPDATE in ran_by(journal_entries(root)[-1])
    killed_rollback(root, stage, nth)
    assert_owed_and_named(root, owed)
    undo = ojai("rollback", "--root", root, "--yes")
    assert undo.exit_code == 0, undo.output
    last = journal_entries(root)[-1]
    assert last["kind"] == "rollback" and last["status"] == "complete", last
    for command in owed:
        assert command in ran_by(last), last["handlers"]
    assert state(root)["pending_handlers"] == []
    assert tree(root) == original  # the drop-in and the folder made for it gone
    assert apply_finding(root)["severity"] == "pass"


# -- a rollback that is not carried out settles nothing ---------------------------------------
def killed_apply(root: Path) -> None:
    proc = subprocess.run([sys.executable, str(KILLER), "action-done", "1", "setup", "--root",
                           str(root), "--apply", "--yes", *POWER], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]


def _tmux_answer(tmp_path: Path, command: str, question: str, *keys: str) -> tuple[str, int]:
    """Run ``command`` in an 80-column tmux window, type ``keys`` once ``question`` shows."""
    with Window(tmp_path, command) as window:
        window.wait_for(question)
        window.send(*keys)
        code = window.wait_done()
        return window.screen(), code


@pytest.mark.parametrize("how", ["n", "no-terminal", "json"])
def test_a_declined_rollback_leaves_an_interrupted_apply_interrupted(machine, tmp_path, how):
    root = powered(machine)
    killed_apply(root)
    before = apply_finding(root)
    assert before["severity"] == "fail" and "was interrupted" in before["evidence"], before
    files = tree(root)
    if how == "n":
        screen, code = _tmux_answer(tmp_path, f"{OJAI} rollback --root {root}", "Roll back?",
                                    "n", "Enter")
        assert code == 1 and "nothing was restored" in screen, screen
    else:
        said = ojai("rollback", "--root", root, *(["--json"] if how == "json" else []))
        assert said.exit_code == 1 and "refusing to roll back without review" in said.stderr
    assert apply_finding(root) == before  # doctor still names the interrupted apply
    assert tree(root) == files
    assert state(root)["running"] is not None
    undo = ojai("rollback", "--root", root, "--yes")  # and a rollback said yes to undoes it
    assert undo.exit_code == 0, undo.output
    assert apply_finding(root)["severity"] == "pass"


# -- what a rollback leaves ------------------------------------------------------------------
def test_a_rollback_removes_the_empty_folders_the_apply_made(machine):
    root = powered(machine)
    original = tree(root)
    assert not (root / "etc/systemd").exists()
    assert ojai("setup", "--root", root, *POWER, "--apply", "--yes").exit_code == 0
    assert (root / "etc/systemd/system/multi-user.target.wants").is_dir()
    undo = ojai("rollback", "--root", root, "--yes", "--json")
    assert undo.exit_code == 0, undo.output
    report = json.loads(undo.stdout)
    assert report["left"] == []
    for folder in ("/etc/systemd/system/multi-user.target.wants", "/etc/systemd/system",
                   "/etc/systemd"):
        assert folder in report["removed"], report["removed"]
    assert tree(root) == original


def test_a_rollback_keeps_a_folder_the_apply_made_when_something_else_is_in_it(machine):
    root = powered(machine)
    assert ojai("setup", "--root", root, *POWER, "--apply", "--yes").exit_code == 0
    mine = root / "etc/systemd/system/other.service"
    mine.write_text("[Unit]\n")
    assert ojai("rollback", "--root", root, "--yes").exit_code == 0
    assert mine.read_text() == "[Unit]\n"
    assert not (root / "etc/systemd/system/multi-user.target.wants").exists()


def test_a_rollback_with_nothing_to_do_exits_0(machine):
    root = powered(machine)
    assert ojai("setup", "--root", root, *POWER, "--apply", "--yes").exit_code == 0
    assert ojai("rollback", "--root", root, "--yes").exit_code == 0
    again = ojai("rollback", "--root", root, "--yes")
    assert again.exit_code == 0, again.output
    assert "nothing to roll back" in again.stdout and "nothing was changed" in again.stdout
    as_json = ojai("rollback", "--root", root, "--yes", "--json")
    assert as_json.exit_code == 0
    report = json.loads(as_json.stdout)
    assert report["nothing"] is True and report["exit_code"] == 0 and report["restored"] == []


# -- the lock --------------------------------------------------------------------------------
def test_the_refusal_always_names_the_lock_s_holder(tmp_path):
    """Threads (each its own open file, so flock sets them against each other as it does
    processes) take and let go of the lock as fast as they can: every refusal names a
    holder, never "another process" (the pid is in the file before the lock has its name)."""
    from ojai_setup.apply.lock import LockHeld, MachineLock

    refusals: list[str] = []
    stop = time.monotonic() + 1.5

    def hammer() -> None:
        while time.monotonic() < stop:
            lock = MachineLock(tmp_path, "ojai setup --apply")
            try:
                lock.acquire()
            except LockHeld as exc:
                refusals.append(str(exc))
                continue
            lock.release()

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(refusals) > 100, len(refusals)
    unnamed = [r for r in refusals if f"process {os.getpid()} (`ojai setup --apply`" not in r]
    assert unnamed == [], (len(unnamed), len(refusals), unnamed[:1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock"]  # no temp file left
