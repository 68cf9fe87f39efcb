"""A real terminal for the tests about what a person sees: a tmux window of a given size running
one shell command, whose screen a test reads (as shown, or with the lines the terminal wrapped
joined again, as a person's copy of them gets them) and into which it types keys.

    with Window(tmp_path, f"{OJAI} rollback --root {root}") as window:
        window.wait_for("Roll back?")
        window.send("n", "Enter")
        code = window.wait_done()
        shown = window.screen()

``screen(tmp_path, command)`` is the common case: run it to the end, return the screen.
The command's exit status is written to a file when it ends (``wait_done`` returns it), and the
window stays open afterwards so its last screen can be read; leaving the ``with`` block ends
the tmux server the window runs in (its own socket under ``tmp_path``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest


class Window:
    def __init__(self, tmp_path: Path, command: str, *, width: int = 80, height: int = 50,
                 env: dict[str, str] | None = None, name: str = "tmux") -> None:
        if shutil.which("tmux") is None:
            pytest.fail("tmux is needed for this test (Debian package tmux; .ci/run installs it)")
        self.sock = str(tmp_path / f"{name}.sock")
        self.rc = tmp_path / f"{name}.rc"
        self.rc.unlink(missing_ok=True)
        base = {**os.environ, "TERM": "xterm-256color"}
        base.pop("NO_COLOR", None)
        base.pop("COLUMNS", None)
        self.env = {**base, **(env or {})}
        self.command, self.width, self.height = command, width, height

    def __enter__(self) -> Window:
        # the exit status goes to a temp name first, so a reader never sees a half-written one
        subprocess.run(["tmux", "-S", self.sock, "new-session", "-d", "-x", str(self.width),
                        "-y", str(self.height),
                        f"{self.command}; echo $? > {self.rc}.part && mv {self.rc}.part "
                        f"{self.rc}; sleep 120"], check=True, env=self.env)
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True)

    def screen(self, *, joined: bool = False) -> str:
        """The window's screen and scroll-back (400 lines)."""
        return subprocess.run(["tmux", "-S", self.sock, "capture-pane", "-p",
                               *(["-J"] if joined else []), "-S", "-400"],
                              capture_output=True, text=True, check=True).stdout

    def send(self, *keys: str) -> None:
        """Type ``keys`` (tmux key names: ``"y"``, ``"Enter"``, ``"C-c"``)."""
        subprocess.run(["tmux", "-S", self.sock, "send-keys", *keys], check=True)

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """The screen once ``text`` is on it; fails with the screen after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            if text in shown:
                return shown
            assert time.monotonic() < deadline and not self.done(), \
                f"{text!r} did not show within {timeout} s:\n{shown}"
            time.sleep(0.05)

    def done(self) -> bool:
        return self.rc.exists()

    def wait_done(self, timeout: float = 60) -> int:
        """The command's exit status once it ended; fails with the screen after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not self.done():
            assert time.monotonic() < deadline, \
                f"{self.command} did not finish within {timeout} s:\n{self.screen()}"
            time.sleep(0.05)
        return int(self.rc.read_text())


def screen(tmp_path: Path, command: str, *, width: int = 80, height: int = 50,
           joined: bool = False, env: dict[str, str] | None = None,
           timeout: float = 60) -> str:
    """What ``command`` shows in a window ``width`` columns wide once it ended."""
    with Window(tmp_path, command, width=width, height=height, env=env) as window:
        window.wait_done(timeout)
        return window.screen(joined=joined)
