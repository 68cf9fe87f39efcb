"""The shape of the code: layers one way, steps independent, one exit status table."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.status import ExitStatus

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(where: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(where / "pyproject.toml"), "--no-cache"],
                          cwd=where, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(where)})


def test_the_import_contracts_hold():
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("module, bad_import, contract", [
    ("ojai_setup/steps/npu.py", "from ojai_setup.steps import ttm", "A step never imports another step"),
    ("ojai_setup/formats/grub.py", "from ojai_setup.apply import executor", "Layers"),
    ("ojai_setup/steps/ttm.py", "from ojai_setup.apply import journal", "Layers"),
])
def test_the_contracts_catch_a_wrong_import(tmp_path, module, bad_import, contract):
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "ojai_setup", copy / "ojai_setup",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    target = copy / module
    target.write_text(target.read_text().replace(
        "from __future__ import annotations\n",
        f"from __future__ import annotations\n\n{bad_import}  # noqa: F401\n", 1))
    result = lint(copy)
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout


@pytest.mark.parametrize("args", [
    ["setup", "--bogus"],
    ["setup", "--port", "eighty"],
    ["setup", "--llamacpp", "sideways"],
    ["setup", "--port", "65535"],
    ["setup", "--port", "52624"],
    ["setup", "--profile", "nope"],
    ["doctor", "--bogus"],
    ["nosuchcommand"],
])
def test_usage_errors_exit_64(args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == ExitStatus.USAGE == 64, result.output


@pytest.mark.parametrize("command", ["doctor", "setup", "models", "verify", "rollback"])
def test_root_that_is_a_file_is_a_usage_error_for_every_command(tmp_path, command):
    afile = tmp_path / "file"
    afile.write_text("")
    result = CliRunner().invoke(app, [command, "--root", str(afile)])
    assert result.exit_code == 64
    assert "not a directory" in result.stderr
    assert "Traceback" not in result.output


def test_missing_catalog_file_is_a_usage_error(tmp_path):
    machine = REPO / "tests/machines/ojai-fresh"
    result = CliRunner().invoke(app, ["setup", "--root", str(machine), "--llamacpp", "none",
                                      "--catalog", str(tmp_path / "no-such.toml")])
    assert result.exit_code == 64
    assert "no-such.toml: no such file" in result.stderr


def test_every_json_output_names_its_schema(tmp_path):
    machine = str(REPO / "tests/machines/ojai-fresh")
    for args, schema in ((["doctor"], "ojai.doctor/1"),
                         (["setup", "--llamacpp", "none"], "ojai.setup/1"),
                         (["models"], "ojai.models/1")):
        result = CliRunner().invoke(app, [*args, "--root", machine, "--json"])
        assert result.stdout.lstrip().startswith('{\n  "schema": "' + schema + '"'), result.output


def test_port_clashes_name_the_option(tmp_path):
    machine = str(REPO / "tests/machines/ojai-fresh")
    for port, words in (("65535", "no port for the plain route"), ("52625", "FastFlowLM's port")):
        result = CliRunner().invoke(app, ["setup", "--root", machine, "--port", port])
        assert result.exit_code == 64
        assert result.stderr.startswith("error: --port") and words in result.stderr
        assert "validation error" not in result.stderr


def test_help_lists_the_choices_of_every_fixed_option():
    text = CliRunner().invoke(app, ["setup", "--help"], env={"COLUMNS": "200"}).stdout
    from ojai_setup.cli import _profiles

    profiles = "<" + "|".join(_profiles()) + ">"
    assert "generic" in profiles and len(_profiles()) > 1
    for choices in ("<nightly|source|none>", "<hip|cpu>", profiles):
        assert choices in text, text


def test_models_shows_download_sizes_and_completion_can_be_installed():
    machine = str(REPO / "tests/machines/ojai-fresh")
    import json

    rows = json.loads(CliRunner().invoke(app, ["models", "--root", machine, "--json"]).stdout)["routes"]
    assert all(r["download_bytes"] > 10**9 for r in rows)
    table = CliRunner().invoke(app, ["models", "--root", machine], env={"COLUMNS": "120"}).stdout
    assert "16.2 GiB (est.) to download" in table
    assert "--install-completion" in CliRunner().invoke(app, ["--help"]).stdout
