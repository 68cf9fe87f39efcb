"""A blocked step says why in at most three short sentences, and its ways forward as a list:
on every machine folder, for the options a newcomer tries, with the network standing in as a
closed port (no address answers)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.setup_views import show_step
from ojai_setup.commands.terminal import Terminal
from ojai_setup.planning.result import StepResult, ways_forward

MACHINES = sorted(p for p in (Path(__file__).parents[1] / "machines").iterdir() if p.is_dir())
OPTIONS = [[], ["--model", "gemma-4-12b"], ["--llamacpp", "source"],
           ["--lemonade", "distro", "--systemd", "--model", "gemma-3-270m"],
           ["--ttm-via", "modprobe"], ["--lemonade", "release"]]


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", text.strip()) if s]


@pytest.mark.parametrize("machine", MACHINES, ids=lambda p: p.name)
def test_every_blocked_step_is_three_short_sentences_and_a_list(machine, monkeypatch):
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens, refused at once
    monkeypatch.setenv("HF_ENDPOINT", closed)
    monkeypatch.setenv("OJAI_GITHUB_API", closed)
    seen = 0
    for options in OPTIONS:
        result = CliRunner().invoke(app, ["setup", "--root", str(machine), "--json", *options])
        if result.exit_code == 64:
            continue  # an option this machine's profile refuses
        for step in json.loads(result.stdout)["steps"]:
            if step["status"] != "blocked":
                continue
            seen += 1
            said = step["sentence"]
            where = (machine.name, options, step["step"], said)
            assert len(sentences(said)) <= 3, where
            assert len(said) <= 320, where
            assert "Ways forward" not in said, where
            assert all(way and len(way) <= 320 for way in step["ways"]), where
    assert seen or machine.name in ("ojai-rebooted",), "no blocked step seen"


def test_the_ways_of_an_advice_become_items():
    sentence, ways = ways_forward(
        "could not reach the GitHub API (x). Ways forward: --llamacpp-tag TAG (a release; "
        "or one); --llamacpp none; or --llamacpp source (`a; b`). GITHUB_TOKEN raises the limit")
    assert sentence == "could not reach the GitHub API (x)."
    assert ways == ("--llamacpp-tag TAG (a release; or one)", "--llamacpp none",
                    "--llamacpp source (`a; b`)", "GITHUB_TOKEN raises the limit")
    assert ways_forward("nothing to list") == ("nothing to list", ())


def test_a_blocked_step_shows_its_ways_as_a_list(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    r = StepResult.blocked("model", "gemma: cannot reach the Hub. Ways forward: HF_ENDPOINT (a "
                           "mirror); or put the files into /var/lib/ojai/models yourself")
    out = io.StringIO()
    show_step(Terminal(stdout=out), r.status, r.step, r.sentence, r.ways)
    assert out.getvalue().splitlines() == [
        "  BLOCKED model: gemma: cannot reach the Hub.",
        "            ways forward:",
        "            - HF_ENDPOINT (a mirror)",
        "            - put the files into /var/lib/ojai/models yourself"]
