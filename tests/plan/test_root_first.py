"""Root is asked for before anything else: an apply that needs root, run by a user who is not,
is refused before the "Apply this plan?" question, with the whole ``sudo`` command line (the
same ``--root`` and options). Run as nobody (tests/support/as_nobody.py) in a real 80-column
terminal (tmux), on a machine folder that user may read but not write."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AS_NOBODY = REPO / "tests/support/as_nobody.py"


@pytest.fixture
def shared_machine():
    """A copy of ojai-fresh every user may read but only root may write, removed after."""
    where = Path(tempfile.mkdtemp(prefix="ojai-user-"))
    root = where / "m"
    shutil.copytree(REPO / "tests/machines/ojai-fresh", root, symlinks=True)
    for path in [where, *where.rglob("*")]:
        if not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode | stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0))
    yield root
    shutil.rmtree(where)


def in_terminal(tmp_path: Path, *args: object) -> str:
    """What ``ojai ARGS`` run as nobody shows in an 80-column tmux window within 30 s (its
    exit code on the last line, ``rc=N``), or the screen as it stands then (a question waiting
    for its answer)."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for this test (Debian package tmux; .ci/run installs it)")
    if os.geteuid() != 0:
        pytest.fail("this test drops to the user nobody: run it as root, as the suite runs")
    sock = str(tmp_path / "tmux.sock")
    command = " ".join([sys.executable, str(AS_NOBODY), *map(str, args)])
    env = {**os.environ, "TERM": "xterm-256color", "AS_NOBODY_TERMINAL": "1", "NO_COLOR": "1",
           "PYTHONPATH": str(REPO)}
    env.pop("COLUMNS", None)
    subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-x", "80", "-y", "50",
                    f"{command}; echo rc=$?; sleep 60"], check=True, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while True:
            screen = subprocess.run(["tmux", "-S", sock, "capture-pane", "-p", "-S", "-400"],
                                    capture_output=True, text=True, check=True).stdout
            if "rc=" in screen or "Apply this plan?" in screen or time.monotonic() > deadline:
                return screen
            time.sleep(0.05)
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)


def test_a_user_who_cannot_write_the_machine_is_told_sudo_before_the_question(
        shared_machine, tmp_path):
    state = shared_machine / "var/lib/ojai"
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o777)  # the lock can be taken; the files the plan writes cannot be written
    screen = in_terminal(tmp_path, "setup", "--root", shared_machine, "--llamacpp", "none",
                         "--apply")
    assert "Apply this plan?" not in screen, screen
    lines = [line.rstrip() for line in screen.splitlines() if line.strip()]
    assert lines[-1] == "rc=1", screen
    assert lines[-2] == f"  sudo ojai setup --root {shared_machine} --llamacpp none --apply"
    assert "applying this plan needs root" in " ".join(lines) and "nothing was changed" in screen
    assert not (shared_machine / "opt/ojai/routes").exists()


def test_a_machine_whose_lock_this_user_cannot_take_gets_the_sudo_command(shared_machine,
                                                                          tmp_path):
    screen = in_terminal(tmp_path, "setup", "--root", shared_machine, "--llamacpp", "none",
                         "--apply")
    lines = [line.rstrip() for line in screen.splitlines() if line.strip()]
    assert lines[-1] == "rc=1", screen
    assert lines[-2] == f"  sudo ojai setup --root {shared_machine} --llamacpp none --apply"
    assert "cannot open ojai's lock" in screen and "Applying here needs root; run:" in screen
