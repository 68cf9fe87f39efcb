"""A newcomer's first steps without a Ryzen AI box: ``--example NAME`` runs doctor, a dry run
and ``ojai models`` on a bundled machine; doctor's machine table speaks in words, says what
it does not know as ``unknown (why)`` and lists the failures first."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.resources import example_root
from tests.support.text import flat


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "80"})


def test_setup_example_is_a_dry_run_of_the_bundled_machine_and_changes_nothing():
    root = example_root("ojai-fresh")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    result = ojai("setup", "--example", "ojai-fresh", "--llamacpp", "none")
    assert result.exit_code == 2, result.output
    assert '+GRUB_CMDLINE_LINUX_DEFAULT="quiet splash ttm.pages_limit=12582912"' in result.stdout
    assert "Plan: edit 1 file, create 1" in flat(result.stdout)
    same = ojai("setup", "--root", root, "--llamacpp", "none")
    assert same.stdout == result.stdout  # the same as --root on the bundled folder
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_setup_example_refuses_to_apply():
    result = ojai("setup", "--example", "ojai-fresh", "--llamacpp", "none", "--apply", "--yes")
    assert result.exit_code == 64
    said = flat(result.stderr)
    assert "--example ojai-fresh: an example machine is there to look at" in said
    # the commands that copy it and apply to the copy, whole
    bundled = str(example_root("ojai-fresh"))
    assert f"`cp -r {bundled} ojai-fresh`, then `ojai setup --root ojai-fresh --apply`" in said


def test_models_example_lists_the_routes_for_the_bundled_machine():
    result = CliRunner().invoke(app, ["models", "--example", "ojai-fresh", "--json"])
    assert result.exit_code == 0, result.output
    names = [r["name"] for r in json.loads(result.stdout)["routes"]]
    assert "gemma-4-26b-a4b" in names


def test_an_unknown_example_is_a_usage_error_naming_the_known_ones():
    for command in ("doctor", "setup", "models"):
        result = ojai(command, "--example", "no-such-box")
        assert result.exit_code == 64, (command, result.output)
        assert "--example no-such-box: no example machine 'no-such-box'" in flat(result.stderr)
        assert "ojai-fresh" in result.stderr


def _table(out: str, title: str) -> list[str]:
    """The rows of the rich table under ``title``, as text without its borders."""
    block = out.split(title, 1)[1]
    rows = []
    for line in block.splitlines()[1:]:
        if line.startswith(("└", "┗")):
            break
        if line.startswith(("│", "┃")):
            rows.append(re.sub(r"\s*[│┃]\s*", " | ", line).strip(" |"))
    return rows


def test_doctor_machine_table_uses_words_and_says_why_a_fact_is_unknown(machine):
    out = ojai("doctor", "--root", machine("no-amd-gpu")).stdout
    rows = _table(out, "Machine (")
    text = " ".join(rows)
    assert "?" not in text
    names = [r.split(" | ")[0] for r in rows if " | " in r]
    assert "rocm_version" not in names and "bios" not in names
    assert "ROCm" in names and "Board / BIOS" in names
    assert "unknown (no DMI data under /sys/class/dmi/id/)" in flat(" ".join(
        r.split(" | ", 1)[-1] for r in rows))
    assert "amdxdna unknown (no /sys/module/amdxdna/version" in flat(" ".join(
        r.split(" | ", 1)[-1] for r in rows))


def test_doctor_table_puts_failures_first():
    out = ojai("doctor", "--example", "ojai-fresh").stdout
    rows = [r for r in _table(out, "Checks for profile") if r.split(" | ")[0] in
            ("ok", "info", "warn", "FAIL")]
    order = [r.split(" | ")[0] for r in rows]
    assert order[0] == "FAIL" and "FAIL" not in order[1:]
    rank = {"FAIL": 0, "warn": 1, "info": 2, "ok": 3}
    assert [rank[s] for s in order] == sorted(rank[s] for s in order)
    # the JSON keeps the checks' own order (the golden reports)
    findings = json.loads(ojai("doctor", "--example", "ojai-fresh", "--json").stdout)["findings"]
    assert findings[0]["id"] == "ojai.apply"
