"""What the dry run puts first and what it counts: the edit of a file that exists (the boot
configuration) whole and before anything ojai creates; new files listed with their size and
shown whole only when asked (``--show-new``, ``--show PATH``, ``--plan FILE --show PATH``); one
line counting what will happen before the question, and the same counts in ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from tests.support.fake_hub import announce_route, fake_hub  # noqa: F401 - fake_hub is a fixture
from tests.support.machine_state import store_capture
from tests.support.stand_ins import give_llama_server
from tests.support.text import flat

MODEL = ["--llamacpp", "none", "--model", "gemma-4-26b-a4b", "--systemd"]
UNIT = "/etc/systemd/system/ojai-gemma-4-26b-a4b-mtp.service"
SCRIPT = "/opt/ojai/routes/gemma-4-26b-a4b-mtp.sh"


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "80"})


@pytest.fixture
def box(machine, fake_hub) -> Path:
    from ojai_setup.core.root import CommandResult
    from ojai_setup.domain.catalog import load_catalog

    root = machine("ojai-fresh")
    give_llama_server(root)  # so that the routes are planned with --llamacpp none
    # planning asks whether the units' daemon-reload can run and whether the hub serves the
    # model's files: a machine with systemd, a hub that has them
    store_capture(root, CommandResult(("systemctl", "daemon-reload"), 0, ""))
    announce_route(fake_hub, load_catalog(None).get("gemma-4-26b-a4b"))
    return root


def test_the_boot_edit_comes_first_and_whole_and_new_files_are_listed_with_their_size(box):
    result = ojai("setup", "--root", box, *MODEL)
    assert result.exit_code == 2, result.output
    out = result.stdout
    edit = out.index("--- /etc/default/grub\n+++ /etc/default/grub\n")
    created = out.index("Other files it creates (6;")
    assert edit < created
    assert '+GRUB_CMDLINE_LINUX_DEFAULT="quiet splash ttm.pages_limit=12582912"' in out
    # a new file is a name and a size, not 50 lines of diff against /dev/null
    assert "--- /dev/null" not in out and "+[Unit]" not in out
    after = json.loads(ojai("setup", "--root", box, *MODEL, "--json").stdout)
    unit = next(a["after"] for s in after["steps"] for a in s["actions"] if a.get("path") == UNIT)
    size = len(unit.encode())
    assert f"  + {UNIT}  ({len(unit.splitlines())} lines, {size} bytes)" in out
    # the steps say what they create with a verb, never a minus
    assert f"create {UNIT}, as root" in flat(out)
    assert "- create" not in out and "(root)" not in out


def test_show_new_shows_every_created_file_whole(box):
    out = ojai("setup", "--root", box, *MODEL, "--show-new").stdout
    assert out.count("--- /dev/null") == 6
    assert f"+++ {UNIT}" in out and "+[Unit]" in out
    assert out.index("--- /etc/default/grub") < out.index("--- /dev/null")


def test_show_path_prints_one_file_of_the_plan_or_of_a_saved_plan(box, tmp_path):
    plan = tmp_path / "plan.json"
    saved = ojai("setup", "--root", box, *MODEL, "--out", plan)
    assert saved.exit_code == 2, saved.output
    # the saved plan's own hint names the way to see a file of it
    assert "one shown whole by the command below" in flat(saved.stdout)
    assert f"\n  ojai setup --plan {plan} --show PATH\n" in saved.stdout
    data = json.loads(plan.read_text())
    script = next(a["after"] for s in data["steps"] for a in s["actions"]
                  if a.get("path") == SCRIPT)
    for args in (["--plan", plan], MODEL):
        shown = ojai("setup", "--root", box, *args, "--show", SCRIPT)
        assert shown.exit_code == 0, shown.output
        assert shown.stdout == script  # exactly as it will be written
    grub = ojai("setup", "--root", box, "--plan", plan, "--show", "/etc/default/grub")
    assert grub.exit_code == 0 and grub.stdout.startswith("--- /etc/default/grub\n")
    doc = json.loads(ojai("setup", "--root", box, "--plan", plan, "--show", SCRIPT,
                          "--json").stdout)
    assert doc["schema"] == "ojai.setup-file/1" and doc["change"] == "create"
    assert doc["after"] == script and doc["before"] is None
    wrong = ojai("setup", "--root", box, "--plan", plan, "--show", "/etc/fstab")
    assert wrong.exit_code == 64
    assert "--show /etc/fstab: the plan writes no such file" in flat(wrong.stderr)
    assert SCRIPT in wrong.stderr


def test_one_line_counts_the_plan_before_the_question_and_json_has_the_counts(box):
    out = ojai("setup", "--root", box, *MODEL).stdout
    last = flat(out.rsplit("\n\n", 1)[-1])
    assert last.endswith(
        "Plan: edit 1 file, create 6, add the system user ojai, run 2 commands as root "
        "(update-grub, systemctl daemon-reload); download about 16.2 GiB; then its routes are "
        "checked against the CPU (--no-gate skips this); a reboot follows."), out
    summary = json.loads(ojai("setup", "--root", box, *MODEL, "--json").stdout)["summary"]
    assert summary["files_edited"] == 1 and summary["files_created"] == 6
    assert summary["root_commands"] == ["update-grub", "systemctl daemon-reload"]
    assert summary["users"] == ["ojai"] and summary["downloads"] == 2
    assert summary["download_estimated"] and 16 * 2**30 < summary["download_bytes"] < 17 * 2**30
    assert summary["reboot"] is True and summary["steps_blocked"] == 0
    assert summary["steps_changed"] == 5
    assert summary["routes_written"] == 2  # the NPU route's script is not a llama-server's


def test_the_count_of_a_plan_with_nothing_to_do_and_of_a_blocked_one(box):
    assert ojai("setup", "--root", box, "--llamacpp", "none", "--apply", "--yes").exit_code == 0
    done = ojai("setup", "--root", box, "--llamacpp", "none")
    assert done.exit_code == 0
    assert "Plan: nothing to do; every step is satisfied." in done.stdout
    assert json.loads(ojai("setup", "--root", box, "--llamacpp", "none", "--json").stdout)[
        "summary"]["steps_changed"] == 0
    grub = box / "etc/default/grub"
    grub.write_text(grub.read_text() + 'GRUB_CMDLINE_LINUX_DEFAULT="again"\n')
    blocked = ojai("setup", "--root", box, "--llamacpp", "none", "--gpu-memory", "40")
    assert blocked.exit_code == 1
    # the other steps do not need the GPU-memory step: the plan leaves only it out
    assert "Plan: create 1 file; 1 step blocked: left out until it is fixed." in flat(
        blocked.stdout)


def test_a_missing_plan_file_is_a_usage_error(box, tmp_path):
    for args in (["--plan", tmp_path / "none.json"], ["--apply", "--plan", tmp_path / "none.json"]):
        result = ojai("setup", "--root", box, *args)
        assert result.exit_code == 64, result.output
        assert f"--plan {tmp_path / 'none.json'}: no such plan file" in flat(result.stderr)


def test_a_new_file_the_boot_reads_is_shown_whole_with_the_edits(box):
    """--ttm-via modprobe creates /etc/modprobe.d/99-ojai-ttm.conf: a new file, but what the
    next boot reads, so it is reviewed whole, not listed by its size."""
    out = ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu", "--ttm-via",
               "modprobe").stdout
    review = out.split("Files to review (whole diffs; what the boot reads first):\n", 1)[1]
    assert review.startswith("--- /dev/null\n+++ /etc/modprobe.d/99-ojai-ttm.conf\n"), out
    assert "+options ttm pages_limit=12582912" in review
    assert "files it creates" not in out.lower()
