"""The dry run as a person sees it: in a real terminal (tmux) at 80 and 200 columns, through
``script``, and in a pipe, every changed line of the GRUB diff is whole on screen, and every
step and finding that wraps keeps its hanging indent (no line of them starts at column 0);
and what Ctrl-C and Ctrl-D at the question to apply leave on the screen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.terminal import screen

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


def _tmux(root: Path, tmp_path: Path, width: int, height: int, *, command: str | None = None,
          joined: bool = True) -> str:
    """What ``command`` (the dry run) shows in a tmux window of that size; ``joined``: the
    lines the terminal wrapped are joined again (``capture-pane -J``), else as on screen."""
    return screen(tmp_path, command or _command(root), width=width, height=height,
                  joined=joined)


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


def _sections(screen: str, width: int | None = None) -> dict[str, list[str]]:
    """The lines of the dry run's sections (findings, steps, files, follow-ups), by the head
    line that opens each, as they are on screen (with ``width``: a line the terminal wrapped
    at its edge joined again, as :func:`_at_column_0` sees it)."""
    sections: dict[str, list[str]] = {}
    current = None
    lines: list[str] = []
    for line in screen.splitlines():
        if width and lines and len(lines[-1]) == width and line[:1].strip():
            lines[-1] += line
        else:
            lines.append(line)
    for line in lines:
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            current = sections.setdefault(line.split(" (")[0].rstrip(":"), [])
        elif not line.strip() or line.startswith(("---", "+++", "@@", "Plan:", "A reboot")):
            current = None
        elif current is not None:
            current.append(line)
    return sections


#: the heads of the two sections a wrapped line must never leave: the only lines there that
#: start at column 0
HEADS = ("Doctor's findings on this machine", "Steps:")


def _at_column_0(screen: str, width: int | None = None) -> list[str]:
    """The lines above the first diff and file list (doctor's findings and the steps) that
    start at column 0 without being a section's head: a wrapped line that lost its indent.
    With ``width``, a line that continues one the terminal wrapped at its edge (a URL or a
    command longer than a line, which ojai never cuts) is not one."""
    top = screen.split("\n--- ", 1)[0].split("\nFiles ", 1)[0].split("\nOther files ", 1)[0]
    lines = top.splitlines()
    return [line for i, line in enumerate(lines)
            if line.strip() and not line[0].isspace() and not line.startswith(HEADS)
            and not (width and i and len(lines[i - 1]) == width)]


@pytest.mark.parametrize("width, height", [(80, 24), (200, 50)])
def test_wrapped_steps_and_findings_keep_their_hanging_indent_in_a_real_terminal(
        box, tmp_path, width, height):
    """At 80 columns the steps' sentences and doctor's findings wrap (a URL longer than a line
    too): every line the terminal shows of them starts under the text, never at column 0
    (where the status words are)."""
    command = f"{OJAI} setup --root {box} --no-npu --model gemma-4-26b-a4b --systemd"
    screen = _tmux(box, tmp_path, width, height, command=command, joined=False)
    assert _at_column_0(screen, width) == [], screen
    sections = _sections(screen, width)
    steps, findings = sections.get("Steps"), sections.get("Doctor's findings on this machine")
    assert steps and findings, screen
    heads = [line for line in steps if not line.startswith("   ")]
    assert [h.split()[1] for h in heads] == [
        "gpu-memory:", "llama.cpp:", "model:", "service-user:", "routes:", "sglang:", "power:",
        "lemonade:",
        "npu:"]
    if width == 80:  # the long ones did wrap, under their text
        assert len(steps) > len(heads) + 10
        assert any(line.startswith(" " * 10) and not line.startswith(" " * 11) for line in steps)
    # a line is within the width, or a URL ojai gave a line of its own, whole
    # (or one holding a URL or a command, which ojai never cuts: the terminal wrapped it)
    assert all(len(line.rstrip()) <= width or "https://" in line or "`ojai " in line
               for line in steps + findings), screen


@pytest.mark.parametrize("env_extra", [{"NO_COLOR": "1", "COLUMNS": "80"}, {"COLUMNS": "80"}])
def test_piped_steps_wrap_the_same_without_colour(box, env_extra):
    """In a pipe (``$COLUMNS`` wide, 80 without it) the steps and findings wrap with the same
    hanging indent; the diff lines stay whole."""
    env = {**os.environ, **env_extra}
    out = subprocess.run([*_command(box).split(), "--model", "gemma-4-26b-a4b"],
                         capture_output=True, text=True, env=env).stdout
    assert "\x1b[" not in out
    sections = _sections(out)
    lines = sections["Steps"] + sections["Doctor's findings on this machine"]
    assert all(line.startswith("  ") and len(line) <= 80 for line in lines), out
    assert any(line.startswith("          ") for line in sections["Steps"]), out  # wrapped
    assert ADDED in out.splitlines() and REMOVED in out.splitlines()


def _answer(root: Path, tmp_path: Path, command: str, question: str, keys: str) -> tuple[str, int]:
    """Run ``command`` in an 80-column tmux window, press ``keys`` once ``question`` is on the
    screen, and return the screen (wrapped lines as on it) and the exit code."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for this test (Debian package tmux; .ci/run installs it)")
    sock, rc = str(tmp_path / "tmux.sock"), tmp_path / "rc"
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("COLUMNS", None)
    subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-x", "80", "-y", "50",
                    f"{command}; echo $? > {rc}; sleep 60"], check=True, env=env)

    def screen() -> str:
        return subprocess.run(["tmux", "-S", sock, "capture-pane", "-p", "-S", "-400"],
                              capture_output=True, text=True, check=True).stdout

    try:
        deadline = time.monotonic() + 60
        while question not in screen():
            assert time.monotonic() < deadline, screen()
            time.sleep(0.05)
        subprocess.run(["tmux", "-S", sock, "send-keys", keys], check=True)
        while not rc.exists() or not rc.read_text().strip():
            assert time.monotonic() < deadline, screen()
            time.sleep(0.05)
        return screen(), int(rc.read_text())
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)


@pytest.mark.parametrize("keys", ["C-c", "C-d"])
def test_ctrl_c_or_ctrl_d_at_the_question_applies_nothing_and_says_so_on_a_line_of_its_own(
        box, tmp_path, keys):
    """At "Apply this plan?": Ctrl-C stops with exit 130 and the whole command to try again,
    Ctrl-D is a no (exit 1); either way the sentence starts on its own line, not after the
    prompt, and the machine is as it was."""
    before = (box / "etc/default/grub").read_bytes()
    text, code = _answer(box, tmp_path, _command(box) + " --apply", "Apply this plan?", keys)
    lines = [line.rstrip() for line in text.splitlines()]
    if keys == "C-c":
        assert code == 130, text
        said = "error: stopped by SIGINT before the first change; nothing was changed; to"
    else:
        assert code == 1, text
        said = "nothing was applied"
    start = next(i for i, line in enumerate(lines) if line.startswith(said.split(";")[0]))
    assert lines[start].startswith(said), text
    assert "Apply this plan?" in lines[start - 1], text
    if keys == "C-c":
        # the whole command, over as many lines as it takes (a path longer than the terminal's
        # width is folded inside it): compared without the line breaks and spaces
        rest = "".join("".join(lines[start:]).split())
        whole = f"to try again: ojai setup --root {box} --llamacpp none --no-npu --apply"
        assert "".join(whole.split()) in rest, text
    assert (box / "etc/default/grub").read_bytes() == before
