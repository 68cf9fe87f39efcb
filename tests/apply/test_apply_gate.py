"""The correctness gate at the end of `ojai setup --apply`: each route the apply wrote is started
once from its launch script and compared with its build's CPU backend before it is reported
ready. The build is the real CPU llama-server in the layout of Lemonade's ROCm zip (served by the
GitHub stand-in), the route a tiny Gemma 4 pair from the Hub stand-in; the wrong build is the
same server behind a wrapper that, like a GPU backend reading wrong buffers, computes from other
weights unless it is told to use no device (the CPU reference's ``--device none``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.fake_github import (  # noqa: F401 - fake_github is a fixture
    Entry,
    FakeGitHub,
    fake_github,
    make_zip,
    nightly_entries_from_build,
)
from support.fake_hub import FakeHub, fake_hub  # noqa: F401 - a fixture
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.stand_ins import route_toml
from support.text import flat
from support.tiny_models import tiny_vocab, write_llama_model, write_mtp_pair
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.domain.nightly import asset_name

# real llama-servers for each gate: the fast loop leaves them to CI
pytestmark = pytest.mark.slow

REPO = "ojai-test/tiny-gemma4-GGUF"
ROUTE = "tiny"

#: a wrong GPU backend: the real server, reading other weights unless no device is asked for
WRONG_ON_GPU = """#!/bin/bash
args=()
prev=""
cpu=0
for a in "$@"; do [ "$prev" = "--device" ] && [ "$a" = "none" ] && cpu=1; prev="$a"; done
prev=""
for a in "$@"; do
    orig="$a"
    if [ "$cpu" = 0 ] && [ "$prev" = "-m" -o "$prev" = "--model" ]; then a="{other}"; fi
    args+=("$a")
    prev="$orig"
done
exec "$(dirname "$0")/llama-server.real" "${{args[@]}}"
"""


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def a_box(machine, tmp_path: Path, fake_github: FakeGitHub, fake_hub: FakeHub,
          llama_server_bin: Path, *, wrong: bool = False) -> list:
    """ojai-fresh, a nightly (right, or wrong on the GPU) and a tiny route published; the setup
    command that applies them."""
    root = machine("ojai-fresh")
    entries = nightly_entries_from_build(llama_server_bin.parent, llama_server_bin)
    if wrong:
        other = write_llama_model(tmp_path / "other.gguf", 64, 2, seed=7, vocab=tiny_vocab(),
                                  successor=tiny_vocab().draft_succ(miss_every=1))
        real = next(e for e in entries if e.name == "llama-server")
        entries = [Entry("llama-server.real", real.data, 0o100755),
                   Entry("llama-server", WRONG_ON_GPU.format(other=other).encode(), 0o100755),
                   *[e for e in entries if e.name != "llama-server"]]
    fake_github.add_release("b1311", {asset_name("b1311", "gfx1150"): make_zip(
        tmp_path / "nightly.zip", entries)})
    pair = write_mtp_pair(tmp_path / "published")
    fake_hub.add_path(REPO, pair.main.name, pair.main)
    fake_hub.add_path(REPO, pair.draft.name, pair.draft)
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(route_toml(ROUTE, REPO, pair.main, pair.draft))
    return ["setup", "--root", root, "--no-npu", "--catalog", catalog, "--llamacpp", "nightly",
            "--llamacpp-tag", "b1311", "--model", ROUTE, "--apply", "--yes"]


def test_a_route_that_computes_what_the_cpu_computes_is_reported_ready(
        machine, tmp_path, fake_github: FakeGitHub, fake_hub: FakeHub, llama_server_bin: Path):
    setup = a_box(machine, tmp_path, fake_github, fake_hub, llama_server_bin)
    applied = ojai(*setup, "--json")
    assert applied.exit_code == 0, applied.output
    [gate] = json.loads(applied.stdout)["gates"]
    assert gate["route"] == ROUTE and gate["passed"] is True, gate  # the plain route of the pair
    figures = gate["gate"]["figures"]
    assert figures["agreement"] == 1.0 and figures["positions"] > 50, figures
    assert gate["gate"]["reference_from"] == "computed" and gate["gate"]["reference_file"]

    again = ojai(*setup[:-2], "--apply", "--yes")  # nothing changed: nothing to gate again
    assert again.exit_code == 0 and "nothing to do" in again.stdout, again.output
    assert "gate:" not in again.stdout


def test_the_human_report_says_ready_and_the_next_steps_follow(
        machine, tmp_path, fake_github: FakeGitHub, fake_hub: FakeHub, llama_server_bin: Path):
    setup = a_box(machine, tmp_path, fake_github, fake_hub, llama_server_bin)
    applied = ojai(*setup)
    assert applied.exit_code == 0, applied.output
    out = flat(applied.stdout)
    assert f"gate: {ROUTE}: ready: computes what its build's CPU backend computes (top-1 " \
           "agreement 100.0 %" in out, out
    assert f"start {ROUTE}: /opt/ojai/routes/{ROUTE}.sh; then check it as it serves" in out
    assert f"start {ROUTE}-mtp: /opt/ojai/routes/{ROUTE}-mtp.sh; then check it as it serves" in out


def test_a_wrong_backend_fails_the_apply_and_is_not_reported_ready(
        machine, tmp_path, fake_github: FakeGitHub, fake_hub: FakeHub, llama_server_bin: Path):
    setup = a_box(machine, tmp_path, fake_github, fake_hub, llama_server_bin, wrong=True)
    applied = ojai(*setup)
    assert applied.exit_code == 1, applied.output
    out = flat(applied.stdout)
    assert f"gate: {ROUTE}: NOT READY: route {ROUTE}: the backend does not compute what the CPU " \
           "computes on the same file" in out, out
    assert "Do not serve it" in out
    assert f"do not serve {ROUTE}: it failed the correctness gate at apply" in out
    assert f"do not serve {ROUTE}-mtp" in out  # the drafted route of the same model too
    assert "check it as it serves" not in out
    assert "not ready: " in flat(applied.stderr)

    as_json = json.loads(ojai(*setup, "--json").stdout)  # nothing left to apply: no gate again
    assert as_json.get("gates") in (None, []), as_json


def test_no_gate_leaves_it_to_verify(machine, tmp_path, fake_github: FakeGitHub,
                                     fake_hub: FakeHub, llama_server_bin: Path):
    setup = a_box(machine, tmp_path, fake_github, fake_hub, llama_server_bin, wrong=True)
    applied = ojai(*setup, "--no-gate")
    assert applied.exit_code == 0, applied.output
    out = flat(applied.stdout)
    assert "gate:" not in out
    assert "--no-gate was given, so this is the correctness gate" in out


def test_a_stand_in_that_does_not_serve_is_not_gated_and_verify_is_named(
        machine, tmp_path, fake_hub: FakeHub):
    """A captured machine's llama-server stand-in answers only --help: the apply says the
    route was not gated (not that it failed) and leaves the gate to `ojai verify`."""
    from support.stand_ins import give_llama_server

    root = machine("ojai-fresh")
    give_llama_server(root, "gfx1150")
    pair = write_mtp_pair(tmp_path / "published")
    fake_hub.add_path(REPO, pair.main.name, pair.main)
    fake_hub.add_path(REPO, pair.draft.name, pair.draft)
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(route_toml(ROUTE, REPO, pair.main, pair.draft))
    setup = ["setup", "--root", root, "--no-npu", "--catalog", catalog, "--llamacpp", "none",
             "--model", ROUTE, "--apply", "--yes"]
    applied = ojai(*setup)
    assert applied.exit_code == 0, applied.output
    out = flat(applied.stdout)
    assert f"gate: {ROUTE}: not gated: /opt/ojai/llama.cpp/current/llama-server is a script, not " \
           "a llama-server build, and it did not serve" in out, out
    assert f"start {ROUTE}: /opt/ojai/routes/{ROUTE}.sh; then check it before serving it " \
           "(health, and its output against its own build's CPU backend: the apply could not " \
           "start it here, so this is the correctness gate)" in out, out


def test_ctrl_c_during_the_gate_keeps_the_apply_and_says_what_was_not_checked(
        machine, tmp_path, fake_github: FakeGitHub, fake_hub: FakeHub, llama_server_bin: Path,
        monkeypatch):
    from ojai_setup.commands import apply_gate

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(apply_gate, "gate_route", stopped)
    setup = a_box(machine, tmp_path, fake_github, fake_hub, llama_server_bin)
    applied = ojai(*setup)
    assert applied.exit_code == 130, applied.output
    out = flat(applied.stdout)
    assert "applied: changed" in out  # the apply itself finished and is kept
    assert f"gate: {ROUTE}: not gated: the gate was stopped (Ctrl-C) before it checked this " \
           "route; check it with `ojai verify`" in out, out
    root = Path(setup[setup.index("--root") + 1])
    assert (root / f"opt/ojai/routes/{ROUTE}.sh").is_file()
