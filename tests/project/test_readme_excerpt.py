"""The dry run the setup guide (docs/setup.md) shows is a real one: its command runs again in a real terminal of
80 columns (``script``, a pseudo-terminal) and every line of the excerpt must be on screen, in
order, each ``[...]`` standing for lines left out."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OJAI = Path(sys.executable).parent / "ojai"
MARK = "<!-- dry-run excerpt -->"
#: what may legitimately differ between two runs: dates and times
_DATES = re.compile(r"\d{4}-\d\d-\d\d([ T]\d\d:\d\d(:\d\d)?)?( UTC|Z|[+-]\d\d:\d\d)?")


def _normal(line: str) -> str:
    return _DATES.sub("<date>", line.rstrip())


def excerpt() -> tuple[str, list[list[str]]]:
    """The guide's command and its excerpt, cut into runs of consecutive lines."""
    text = (REPO / "docs" / "setup.md").read_text(encoding="utf-8")
    assert MARK in text, "docs/setup.md lost its dry-run excerpt"
    block = text.split(MARK, 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    first, *rest = block.splitlines()
    assert first.startswith("$ ojai "), first
    runs: list[list[str]] = [[]]
    for line in rest:
        if line == "[...]":
            runs.append([])
        else:
            runs[-1].append(_normal(line))
    return first[2:], [r for r in runs if r]


def on_screen(command: str, tmp_path: Path) -> list[str]:
    """What ``command`` prints in an 80-column pseudo-terminal, as lines without colours."""
    if shutil.which("script") is None:
        pytest.fail("script (util-linux) is needed for this test")
    argv = shlex.split(command)
    argv[0] = str(OJAI)
    log = tmp_path / "typescript"
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "80", "LINES": "50"}
    env.pop("NO_COLOR", None)
    subprocess.run(["script", "-q", "-e", "-c", f"stty cols 80 rows 50; {shlex.join(argv)}",
                    str(log)], cwd=REPO, env=env, capture_output=True, timeout=300)
    raw = log.read_text(encoding="utf-8", errors="replace")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw).replace("\r", "")
    lines = [_normal(line) for line in text.splitlines()
             if not line.startswith(("Script started on", "Script done on"))]
    return lines


def test_the_guides_dry_run_is_what_ojai_prints_at_80_columns(tmp_path):
    command, runs = excerpt()
    assert "--root tests/machines/" in command  # a bundled machine, never this host
    screen = on_screen(command, tmp_path)
    assert all(len(line) <= 80 for line in screen if not line.startswith(("+", "-", " "))), \
        "a line other than a diff line is wider than the terminal"
    at = 0
    for run in runs:
        for start in range(at, len(screen) - len(run) + 1):
            if screen[start:start + len(run)] == run:
                at = start + len(run)
                break
        else:
            pytest.fail("docs/setup.md's excerpt is no longer what ojai prints; these lines are "
                        "not on screen in this order:\n" + "\n".join(run)
                        + "\n\nojai printed:\n" + "\n".join(screen))
