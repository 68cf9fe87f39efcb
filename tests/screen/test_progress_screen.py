"""Honest progress, as a person sees it in a real 80-column terminal (tmux): a download's bar
shows its rate and the time left in binary units while it runs, and when Ctrl-C stops it the
bar stays where the work stopped (not jumped to 100 %), above the words saying what was
kept. The Hub stand-in on 127.0.0.1 sends the model at a set pace, so the bar is seen part way."""

from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from support.fake_hub import FakeHub, fake_hub  # noqa: F401 - fake_hub is a fixture
from support.gguf_files import gemma4_assistant, gemma4_main
from support.stand_ins import route_toml
from support.terminal import Window

OJAI = str(Path(sys.executable).parent / "ojai")
REPO = "ojai-test/paced-GGUF"
MIB = 1 << 20


def test_ctrl_c_leaves_the_download_bar_where_it_stopped_with_rate_and_binary_units(
        tmp_path, machine, fake_hub: FakeHub):
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for this test (Debian package tmux; .ci/run installs it)")
    published = tmp_path / "published"
    published.mkdir()
    main = gemma4_main(published / "paced-main.gguf", payload_bytes=12 * MIB)
    draft = gemma4_assistant(published / "paced-draft.gguf")
    fake_hub.add_path(REPO, main.name, main)
    fake_hub.add_path(REPO, draft.name, draft)
    fake_hub.rate = 2 * MIB  # 12 MiB: about six seconds
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(route_toml("paced", REPO, main, draft))
    box = machine("ojai-rebooted")
    command = (f"{OJAI} setup --root {box} --llamacpp none --no-npu --catalog {catalog} "
               f"--model paced --apply --yes")
    with Window(tmp_path, command) as window:
        running, started = "", time.monotonic()
        while time.monotonic() - started < 60 and not window.done():
            bar = [ln for ln in window.screen().splitlines()
                   if "paced-main" in ln and "MiB/s" in ln]
            if bar and re.search(r"\b[2-9]\.\d/12\.0 MiB", bar[-1]):
                running = bar[-1]
                break
            time.sleep(0.05)
        assert running, window.screen()
        window.send("C-c")
        code = window.wait_done(timeout=30)
        shown = window.screen()
    # while it ran: amount, rate and time left, in binary units, on one 80-column line
    assert re.search(r"\d+\.\d/12\.0 MiB\s+\d+(\.\d+)? MiB/s\s+\d:\d\d:\d\d", running), running
    assert len(running) <= 80, running
    # after Ctrl-C: the bar is where the work stopped, never 12.0/12.0 MiB
    final = [ln for ln in shown.splitlines() if "paced-main" in ln and "/12.0 MiB" in ln]
    assert final, shown
    amount = float(re.search(r"(\d+\.\d)/12\.0 MiB", final[-1]).group(1))
    assert 0 < amount < 12.0, final[-1]
    assert not re.search(r"\d (MB|GB|kB)\b", shown), shown  # no decimal units anywhere
    assert code == 130, shown
    assert "stopped" in shown.lower() or "interrupted" in shown.lower(), shown
