"""Errors are ojai's words: a damaged state, plan, catalog or setting is said as ``FILE: what is
wrong (field or line)`` with the way on, never with the validation library's text or its URL;
every option error has one style (``--port 99999: must be 1-65535``) and exits 64; a file a
planning user may not read and an ``--out`` that cannot be written are clear errors, not
tracebacks."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from tests.support.text import flat

REPO = Path(__file__).resolve().parents[2]
AS_NOBODY = REPO / "tests/support/as_nobody.py"
#: what a library's error looks like: none of it may reach a person
LIBRARY = ("validation error", "Value error", "Input should", "Field required", "pydantic",
           "[type=", "For further information", "Traceback", "Usage:", "Invalid value")


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "80"})


def in_ojai_words(text: str) -> None:
    for words in LIBRARY:
        assert words not in text, text


@pytest.mark.parametrize("args, said", [
    (["setup", "--port", "99999"], "--port 99999: must be 1-65535"),
    (["setup", "--port", "0"], "--port 0: must be 1-65535"),
    (["setup", "--port", "eighty"], "--port eighty: must be a whole number"),
    (["setup", "--gpu-memory", "0"], "--gpu-memory 0: must be at least 1"),
    (["setup", "--llamacpp", "sideways"], "--llamacpp sideways: must be one of nightly, source, distro, none"),
    (["setup", "--lemonade", "foo"], "--lemonade foo: must be one of none, distro, release"),
    (["setup", "--backend=x"], "--backend x: must be one of hip, cpu"),
    (["setup", "--gpu-target", "gfx"], "--gpu-target gfx: is not a GPU target"),
    (["setup", "--host", "bad host!"], "--host 'bad host!': is neither an IP address nor a host"),
    (["setup", "--models-dir", "rel/dir"], "--models-dir rel/dir: must be an absolute path"),
    (["models", "--models-dir", "rel/dir"], "--models-dir rel/dir: must be an absolute path"),
    (["setup", "--port"], "--port: needs a value"),
    (["setup", "--bogus"], "--bogus: ojai setup has no such option"),
    (["doctor", "--profile", "nope"], "--profile nope: must be one of instinct, ojai, "),
    (["verify", "--tokens", "0"], "--tokens 0: must be at least 1"),
    (["tune", "some-route", "--lengths", "abc"], "--lengths abc: a range like 1-8"),
])
def test_every_option_error_has_one_style_and_exits_64(machine, args, said):
    result = ojai(*args[:1], "--root", machine("ojai-fresh"), *args[1:])
    assert result.exit_code == 64, result.output
    assert result.stderr.startswith("error: " + said), result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2, result.stderr
    in_ojai_words(result.output)


def test_a_damaged_state_file_names_the_file_the_problem_and_the_way_out(machine):
    root = machine("ojai-fresh")
    state = root / "var/lib/ojai/state.json"
    state.parent.mkdir(parents=True)
    for text, problem in (('{"schema_version": 1, "applies": [\n', "is not valid JSON at line 2"),
                          ('{"schema_version": "x"}', "schema_version is not a field ojai knows"),
                          ('{"records": 3}', "records must be a table of fields")):
        state.write_text(text)
        for args in (["setup", "--llamacpp", "none"], ["rollback"]):
            result = ojai(args[0], "--root", root, *args[1:])
            assert result.exit_code == 1, result.output
            message = flat(result.stderr)
            assert message.startswith(f"error: {state}: ojai's state"), message
            assert problem in message, message
            assert f"move it aside (`mv {state} {state}.damaged`)" in message
            in_ojai_words(result.output)
        assert state.read_text() == text  # nothing lost


def test_a_damaged_plan_file_names_the_field_and_how_to_make_it_again(machine, tmp_path):
    root = machine("ojai-fresh")
    plan = tmp_path / "plan.json"
    assert ojai("setup", "--root", root, "--llamacpp", "none", "--out", plan).exit_code == 2
    data = json.loads(plan.read_text())
    data["steps"][0]["status"] = "maybe"
    plan.write_text(json.dumps(data))
    for args in (["--plan", plan], ["--apply", "--plan", plan]):
        result = ojai("setup", "--root", root, *args)
        assert result.exit_code == 1, result.output
        message = flat(result.stderr)
        assert f"{plan}: the plan file is damaged: steps.0.status must be one of satisfied, " \
            "change or blocked" in message, message
        assert f"make the plan again with `ojai setup --out {plan}`" in message
        in_ojai_words(result.output)


def test_settings_a_saved_plan_records_are_said_in_ojai_words(machine, tmp_path):
    root = machine("ojai-fresh")
    plan = tmp_path / "plan.json"
    assert ojai("setup", "--root", root, "--llamacpp", "none", "--out", plan).exit_code == 2
    data = json.loads(plan.read_text())
    data["settings"]["port"] = 99999
    plan.write_text(json.dumps(data))
    result = ojai("setup", "--root", root, "--apply", "--plan", plan)
    assert result.exit_code == 1
    assert "settings.port must be at most 65535" in flat(result.stderr), result.stderr
    in_ojai_words(result.output)


def test_an_out_that_cannot_be_written_is_a_clear_usage_error(machine, tmp_path):
    root = machine("ojai-fresh")
    for out, why in ((tmp_path / "no-such-folder/plan.json", f"no folder {tmp_path}/no-such-folder"),
                     (tmp_path, "is a directory")):
        result = ojai("setup", "--root", root, "--llamacpp", "none", "--out", out)
        assert result.exit_code == 64, result.output
        message = flat(result.stderr)
        assert message.startswith(f"error: --out {out}: the plan cannot be written there ({why})")
        assert "nothing was saved or applied" in message
        assert result.stdout == ""  # no plan shown that was not saved
        in_ojai_words(result.output)


@pytest.fixture
def shared_machine():
    """A copy of ojai-fresh every user may read (tmp_path is its owner's only), removed after."""
    where = Path(tempfile.mkdtemp(prefix="ojai-user-"))
    root = where / "m"
    shutil.copytree(REPO / "tests/machines/ojai-fresh", root, symlinks=True)
    for path in [where, *where.rglob("*")]:
        if not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode | stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0))
    yield root
    shutil.rmtree(where)


def as_nobody(*args: object) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, str(AS_NOBODY), *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    out, _, err = proc.stdout.partition("--stderr--\n")
    return proc.returncode, out, err + proc.stderr


def test_a_file_the_planning_user_may_not_read_is_a_clear_error(shared_machine):
    """A file a step reads (the service user's step reads /etc/passwd) that this user may not:
    the file, why, and the command that plans as root; no traceback."""
    passwd = shared_machine / "etc/passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    passwd.chmod(0o600)
    code, out, err = as_nobody("setup", "--root", shared_machine, "--llamacpp", "none",
                               "--systemd")
    assert code == 1, out + err
    message = flat(err)
    assert message.startswith("error: /etc/passwd: cannot be read as "), message
    assert "(permission denied)" in message
    assert f"`sudo ojai setup --root {shared_machine} --llamacpp none --systemd`" in message
    in_ojai_words(out + err)


def test_an_unreadable_boot_configuration_blocks_its_step_with_a_sentence(shared_machine):
    grub = shared_machine / "etc/default/grub"
    grub.chmod(0o600)  # as some distributions ship it
    code, out, err = as_nobody("setup", "--root", shared_machine, "--llamacpp", "none")
    assert code == 1, out + err
    text = flat(out)
    assert "BLOCKED gpu-memory:" in text
    assert "cannot read /etc/default/grub: permission denied (run as root" in text, text
    in_ojai_words(out + err)


def test_an_out_in_a_folder_the_user_may_not_write_is_a_clear_error(shared_machine):
    folder = shared_machine.parent / "read-only"
    folder.mkdir(mode=0o755)
    code, out, err = as_nobody("setup", "--root", shared_machine, "--llamacpp", "none", "--out",
                               folder / "plan.json")
    assert code == 64, out + err
    assert flat(err).startswith(f"error: --out {folder}/plan.json: the plan cannot be written "
                                "there (permission denied)"), err
    assert not (folder / "plan.json").exists()
    in_ojai_words(out + err)
