"""The dry run as a person sees it: in a real terminal (tmux) at 80 and 200 columns, through
``script``, and in a pipe, every changed line of the GRUB diff is whole on screen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

OJAI = str(Path(sys.executable).parent / "ojai")
LONG = ("quiet splash root=UUID=0b7e0f6e-8d1c-4a53-9c2e-7a3f1d2b9e44 amd_iommu=off "
        "amdgpu.cwsr_enable=0 iommu=pt mitigations=auto nowatchdog loglevel=3")
ADDED = f'+GRUB_CMDLINE_LINUX_DEFAULT="{LONG} ttm.pages_limit=12582912"'
REMOVED = f'-GRUB_CMDLINE_LINUX_DEFAULT="{LONG}"'


@pytest.fixture
def box(machine) -> Path:
    root = machine("ojai-fresh")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace('GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"',
                                             f'GRUB_CMDLINE_LINUX_DEFAULT="{LONG}"'))
    return root


def _command(root: Path) -> str:
    return f"{OJAI} setup --root {root} --llamacpp none --no-npu"


def _tmux(root: Path, tmp_path: Path, width: int, height: int) -> str:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for this test (Debian package tmux; .ci/run installs it)")
    sock, done = str(tmp_path / "tmux.sock"), tmp_path / "done"
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    env.pop("COLUMNS", None)
    subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-x", str(width), "-y", str(height),
                    f"{_command(root)}; touch {done}; sleep 60"], check=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while not done.exists():
            assert time.monotonic() < deadline, "ojai setup did not finish in the terminal"
            time.sleep(0.2)
        screen = subprocess.run(["tmux", "-S", sock, "capture-pane", "-p", "-J", "-S", "-200"],
                                capture_output=True, text=True, check=True).stdout
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)
    return screen


@pytest.mark.parametrize("width, height", [(80, 24), (200, 50)])
def test_diff_lines_are_whole_in_a_real_terminal(box, tmp_path, width, height):
    screen = _tmux(box, tmp_path, width, height)
    lines = [line.rstrip() for line in screen.splitlines()]
    assert ADDED in lines, screen
    assert REMOVED in lines, screen


def test_diff_lines_are_whole_through_script(box, tmp_path):
    env = {**os.environ, "COLUMNS": "80", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    log = tmp_path / "typescript"
    subprocess.run(["script", "-q", "-e", "-c", _command(box), str(log)], env=env,
                   capture_output=True)
    import re

    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", log.read_text(errors="replace")).replace("\r", "")
    assert ADDED in text.splitlines(), text
    assert REMOVED in text.splitlines(), text


@pytest.mark.parametrize("env_extra", [{"NO_COLOR": "1"}, {"COLUMNS": "40"}, {}])
def test_diff_lines_are_whole_in_a_pipe(box, env_extra):
    env = {**os.environ, **env_extra}
    out = subprocess.run(_command(box).split(), capture_output=True, text=True, env=env).stdout
    assert ADDED in out.splitlines()
    assert REMOVED in out.splitlines()
    assert "\x1b[" not in out


def test_changed_words_are_marked_when_colour_is_on():
    from rich.console import Console

    from ojai_setup.commands.diffview import diff_lines

    diff = f"--- a\n+++ b\n@@ -1 +1 @@\n{REMOVED}\n{ADDED}\n"
    console = Console(force_terminal=True, color_system="standard", width=80, soft_wrap=True)
    with console.capture() as cap:
        for line in diff_lines(diff):
            console.print(line, soft_wrap=True)
    out = cap.get()
    # the added token alone is in reverse video (SGR 7), the rest of the line is not
    assert "\x1b[7" in out or ";7m" in out
    marked = [seg for seg in out.split("\x1b[") if seg.startswith(("7;", "32;7", "7m")) or ";7m" in seg[:8]]
    assert any("ttm.pages_limit=12582912" in seg for seg in marked), out


def test_apply_json_in_a_real_terminal_refuses_instead_of_asking(box, tmp_path):
    """``--apply --json`` prints no plan, so it cannot ask to apply one: in a real terminal it
    refuses (naming the commands to review and to apply), and nothing changes."""
    before = (box / "etc/default/grub").read_bytes()
    env = {**os.environ, "COLUMNS": "80", "TERM": "xterm-256color"}
    log = tmp_path / "typescript"
    proc = subprocess.run(["script", "-q", "-e", "-c", _command(box) + " --apply --json",
                           str(log)], env=env, capture_output=True, stdin=subprocess.DEVNULL,
                          timeout=120)
    import re

    text = " ".join(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", log.read_text(errors="replace"))
                    .replace("\r", "").split())
    assert proc.returncode == 1, text
    assert "Apply this plan?" not in text
    assert "refusing to apply without review: with --json, --apply prints only what was done" \
        in text, text
    assert "--apply --yes --json" in text
    assert (box / "etc/default/grub").read_bytes() == before
