"""No silent wait on the network: while ojai asks GitHub or the Hub something, a terminal shows
what it asks and where, and an address that accepts the connection and never answers ends
within the request's timeout (seconds, not minutes), with the step blocked and its ways
forward. Run in a real 80-column terminal (tmux) against a real listening socket on
127.0.0.1 that never answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ojai_setup.core.asking import NETWORK_TIMEOUT
from support.terminal import Window

# each waits out a silent server's timeout (seconds of waiting): the fast loop leaves them to CI
pytestmark = pytest.mark.slow

OJAI = str(Path(sys.executable).parent / "ojai")


@pytest.fixture
def silent_address():
    """A socket that completes every connection (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_a_silent_github_is_said_while_waited_for_and_given_up_within_its_timeout(
        tmp_path, machine, silent_address):
    box = machine("ojai-fresh")
    command = f"{OJAI} setup --root {box} --llamacpp nightly --no-npu"
    started = time.monotonic()
    with Window(tmp_path, command,
                env={"OJAI_GITHUB_API": f"http://{silent_address}"}) as window:
        said = ""
        while not window.done() and time.monotonic() - started < 120:
            pane = window.screen(joined=True)
            if f"asking {silent_address} for" in pane:
                said = pane
            time.sleep(0.3)
        took = time.monotonic() - started
        assert window.done(), "ojai setup did not end within two minutes of a silent address"
        code = window.wait_done()
        shown = window.screen(joined=True)
    # while it waited, the status line said what it asked and where
    assert said, shown
    line = next(ln for ln in said.splitlines() if f"asking {silent_address} for" in ln)
    assert "release" in line or "llama" in line or "tag" in line, line
    # the status line is gone once answered (or given up), and the plan says why
    assert f"asking {silent_address}" not in shown, shown
    assert "timed out" in shown or "cannot reach" in shown or "unreachable" in shown, shown
    assert code != 0
    # a loose bound: each request gives up after its timeout, not after 30 or 60 s
    assert took < 4 * NETWORK_TIMEOUT + 20, took


def test_in_a_log_each_request_is_one_line_said_before_it_waits(tmp_path, machine,
                                                                silent_address):
    """Without a terminal (a pipe, cron's mail, a log file) there is no status line: each
    request is one line on stderr, written before the wait, so a log shows where a run hung."""
    box = machine("ojai-fresh")
    log = tmp_path / "setup.log"
    env = {**os.environ, "OJAI_GITHUB_API": f"http://{silent_address}"}
    started = time.monotonic()
    with log.open("w") as err:
        proc = subprocess.Popen([OJAI, "setup", "--root", str(box), "--llamacpp", "nightly",
                                 "--no-npu"], stdout=subprocess.PIPE, stderr=err, env=env,
                                text=True)
        # the line is in the log while the request still waits (not only after it ended)
        deadline = started + NETWORK_TIMEOUT / 2
        while time.monotonic() < deadline and f"asking {silent_address}" not in log.read_text():
            time.sleep(0.1)
        during = log.read_text()
        out, _ = proc.communicate(timeout=4 * NETWORK_TIMEOUT + 20)
    lines = [ln for ln in log.read_text().splitlines() if f"asking {silent_address}" in ln]
    assert f"asking {silent_address}" in during, during
    assert proc.returncode != 0
    assert lines and all(ln.startswith(f"ojai: asking {silent_address} for ") for ln in lines), \
        log.read_text()
    # plain lines: no spinner frames, carriage returns or colour codes in the log
    assert "\r" not in log.read_text() and "\x1b[" not in log.read_text(), log.read_text()
    assert "timed out" in out or "cannot reach" in out or "unreachable" in out, out


def test_json_output_has_no_request_lines(tmp_path, machine, silent_address):
    box = machine("ojai-fresh")
    env = {**os.environ, "OJAI_GITHUB_API": f"http://{silent_address}"}
    proc = subprocess.run([OJAI, "setup", "--root", str(box), "--llamacpp", "nightly",
                           "--no-npu", "--json"], capture_output=True, text=True, env=env,
                          timeout=4 * NETWORK_TIMEOUT + 20)
    assert "asking" not in proc.stderr, proc.stderr
    assert proc.stdout.lstrip().startswith("{"), proc.stdout[:200]
