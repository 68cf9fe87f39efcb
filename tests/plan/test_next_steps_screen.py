"""What a newcomer copies from the screen, in a real 80-column terminal (tmux): ``ojai models``
one line a route with the name to type whole; commands, paths and URLs never cut inside a
word; every ``ojai`` command ojai tells a person carries the machine it acts on; nothing
tells a person to apply to the bundled example."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from support.machine_state import record_state
from support.terminal import screen
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.resources import example_root
from ojai_setup.core.root import Root

OJAI = str(Path(sys.executable).parent / "ojai")


def test_models_at_80_columns_is_one_line_a_route_with_its_name_whole(tmp_path):
    shown = screen(tmp_path, f"{OJAI} models --example ojai-fresh")
    lines = shown.rstrip().splitlines()
    assert all(len(line) <= 80 for line in lines)
    header = next(line for line in lines if line.startswith("route"))
    assert header.split() == ["route", "drafting", "context", "memory", "fits", "downloaded"]
    rows = {line.split()[0]: line.split()[1:] for line in lines
            if re.match(r"^(gemma|qwen|deepseek|gpt|nomic)", line)}
    assert list(rows) == ["nomic-embed-text-v1", "gemma-4-12b", "gpt-oss-20b", "gemma-4-26b-a4b",
                          "qwen3.6-27b", "qwen3-coder-30b-a3b", "gemma-4-31b",
                          "qwen3.6-35b-a3b", "gpt-oss-120b"]  # by the memory they need; no test routes
    assert rows["nomic-embed-text-v1"][0] == "embeddings"
    assert rows["gpt-oss-120b"][-2:] == ["no", "no"]  # does not fit the 48 GiB budget
    assert rows["gemma-4-26b-a4b"] == ["MTP", "sidecar", "32768", "~18.2", "GiB", "yes", "no"]
    assert rows["qwen3.6-27b"][:2] == ["MTP", "in-file"]
    assert "2 routes for ojai's own tests not shown (--all shows them)" in shown
    assert "  ojai setup --example ojai-fresh --model NAME" in lines


def test_models_all_and_json_show_the_test_routes_too(tmp_path):
    every = screen(tmp_path, f"{OJAI} models --example ojai-fresh --all")
    assert re.search(r"^gemma-3-270m-self +self-draft +8192 +0\.8 GiB +yes +no$", every, re.M)
    assert re.search(r"^gemma-3-270m +n-gram +8192 ", every, re.M)
    run = CliRunner().invoke
    names = [r["name"] for r in json.loads(run(app, ["models", "--example", "ojai-fresh",
                                                     "--json"]).stdout)["routes"]]
    assert "gemma-3-270m" not in names and "gemma-4-26b-a4b" in names
    rows = json.loads(run(app, ["models", "--example", "ojai-fresh", "--json", "--all"]).stdout)
    assert {r["name"]: r["for_tests"] for r in rows["routes"]}["gemma-3-270m"] is True


def test_models_wide_runs_past_the_edge_rather_than_cutting(tmp_path):
    shown = screen(tmp_path, f"{OJAI} models --example ojai-fresh --wide", joined=True)
    row = next(line for line in shown.splitlines() if line.startswith("gemma-4-26b-a4b "))
    assert row.split()[:8] == ["gemma-4-26b-a4b", "Gemma", "4", "26B-A4B", "(MoE)", "+", "MTP",
                               "assistant"]
    assert re.search(r"MTP sidecar +32768 +~18\.2 GiB +yes +262144 +~16\.2 GiB +no", row)


def test_models_on_a_machine_folder_says_the_setup_command_for_that_folder(machine, tmp_path):
    root = machine("ojai-fresh")
    shown = screen(tmp_path, f"{OJAI} models --root {root}", joined=True)
    # a line of its own, never cut inside a word (the terminal wraps it; a copy joins it)
    assert f"  ojai setup --root {root} --model NAME" in shown.splitlines()


def test_doctor_on_the_example_never_applies_to_it_and_cuts_no_word(tmp_path):
    shown = screen(tmp_path, f"{OJAI} doctor --example ojai-fresh", joined=True)
    bundled = str(example_root("ojai-fresh"))
    fixes = shown[shown.index("What to do:"):]
    # the URL whole on one line
    assert re.search(r"^ +see https://rocm\.docs\.amd\.com/projects/radeon-ryzen/en/latest/docs/"
                     r"install/installryz/native_linux/install-ryzen\.html$", fixes, re.M), fixes
    assert f"--root {bundled}" not in shown and "--example ojai-fresh --apply" not in shown
    # each command in backticks is whole on its line
    text = " ".join(fixes.split())
    assert "`ojai setup --example ojai-fresh`" in text
    assert (f"`cp -r {bundled} ojai-fresh` (a copy: the bundled example is everyone's), then "
            "`ojai setup --root ojai-fresh --apply`") in text
    for line in fixes.splitlines():
        assert line.count("`") % 2 == 0, line


def test_a_copied_machine_folder_gets_its_own_root_in_doctors_fixes(machine):
    root = machine("ojai-fresh")
    data = json.loads(CliRunner().invoke(app, ["doctor", "--root", str(root), "--json"]).stdout)
    fix = next(f["fix"] for f in data["findings"] if f["id"] == "ttm.active")
    assert f"`ojai setup --root {root} --apply`" in fix and "cp -r" not in fix


def test_apply_verify_and_tune_name_the_machine_in_the_commands_they_give(machine):
    from ojai_setup.commands.verify import next_steps

    root = machine("ojai-applied")
    record_state(Root(root), "routes", {
        "gemma-3-270m-ngram": {"port": 8080, "script": "/opt/ojai/routes/gemma-3-270m-ngram.sh",
                               "model": "gemma-3-270m", "spec_type": "ngram-simple"}})
    steps = next_steps(Root(root))
    assert steps and all(f"ojai verify --root {root} --route" in s for s in steps), steps

    run = CliRunner().invoke
    empty = machine("ojai-fresh")
    verify = run(app, ["verify", "--root", str(empty)], env={"COLUMNS": "300"})
    assert f"`ojai setup --root {empty} --model NAME --apply` writes them" in verify.stderr
    tune = run(app, ["tune", "nosuch", "--root", str(empty)], env={"COLUMNS": "300"})
    assert tune.exit_code == 1
    assert f"`ojai setup --root {empty} --model NAME --apply`" in tune.stderr
    assert "--mtp-url" not in tune.stderr  # tune has no such option
    bench = run(app, ["bench", "--root", str(empty)], env={"COLUMNS": "300"})
    assert "--mtp-url and --plain-url" in bench.stderr  # bench has


def test_tune_with_an_unknown_route_suggests_the_closest(machine):
    root = machine("ojai-applied")
    record_state(Root(root), "routes", {
        "gemma-3-270m-ngram": {"port": 8080, "model": "gemma-3-270m", "spec_type": "ngram-simple"},
        "gemma-3-270m": {"port": 8081, "model": "gemma-3-270m"}})
    result = CliRunner().invoke(app, ["tune", "gemma3-270m", "--root", str(root)],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 1
    assert ("no route or model named 'gemma3-270m'; did you mean gemma-3-270m or "
            "gemma-3-270m-ngram?") in result.stderr
    assert "--mtp-url" not in result.stderr


def test_the_dry_run_names_the_machine_in_the_commands_it_quotes(machine, tmp_path):
    root = machine("ojai-fresh")
    shown = screen(tmp_path, f"{OJAI} setup --root {root} --llamacpp none --no-npu", joined=True)
    text = " ".join(shown.split())
    assert f"Doctor's findings on this machine (`ojai doctor --root {root}` for all):" in text
    assert f"`ojai models --root {root}` lists them" in text
    assert "`ojai doctor` for all" not in text and "`ojai models` lists" not in text
    # the plan's JSON stays the machine's own words
    data = json.loads(CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none",
                                               "--no-npu", "--json"]).stdout)
    model = next(s for s in data["steps"] if s["step"] == "model")
    assert "`ojai models` lists them" in model["sentence"]


def test_an_error_puts_the_command_it_gives_on_a_line_of_its_own_whole(tmp_path):
    """An error that ends in a command (a rollback refused for want of a terminal to ask on)
    never folds the command between its words: it starts a line of its own, so the
    terminal's own wrapping of a long path is the only break, and a copy gets it whole."""
    root = tmp_path / "a-folder-with-a-long-name-for-this-machine" / "and-a-second-long-one" / "box"
    shutil.copytree(Path(__file__).parents[1] / "machines" / "ojai-fresh", root, symlinks=True)
    applied = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none",
                                       "--no-npu", "--apply", "--yes"])
    assert applied.exit_code == 0, applied.output
    command = f"ojai rollback --root {root} --remove-downloads --yes"
    assert len(command) > 80
    shown = screen(tmp_path, f"{OJAI} rollback --root {root} --remove-downloads < /dev/null",
                   joined=True)
    assert "refusing to roll back without review" in shown, shown
    assert any(line.strip() == f"`{command}`" for line in shown.splitlines()), shown
