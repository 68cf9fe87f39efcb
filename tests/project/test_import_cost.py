"""What the read-only commands import: nothing they do not use (issue 9's speed targets are a
benchmark, benchmarks/cli_speed.py; these tests keep the known costs from coming back)."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pydantic

import ojai_setup
from ojai_setup.core.pydantic_plugins import LOADER

MACHINES = Path(__file__).parents[1] / "machines"


def environment(**env: str) -> dict[str, str]:
    """This process's environment without the variables the tests set themselves: pydantic's
    plugin switch, and the one that stops Python writing its bytecode cache."""
    dropped = {"PYDANTIC_DISABLE_PLUGINS", "PYTHONDONTWRITEBYTECODE"}
    return {**{k: v for k, v in os.environ.items() if k not in dropped}, **env}


def imported(*argv: str) -> set[str]:
    """The modules ``python -X importtime`` reports for ``argv`` run in a fresh process."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True,
                          text=True, env=environment())
    names = {line.split("|")[2].strip() for line in proc.stderr.splitlines()
             if line.startswith("import time:") and "self [us]" not in line}
    assert names, proc.stderr
    return names


def run_python(code: str, **env: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environment(**env))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_pydantic_imports_only_get_plugins_from_its_loader() -> None:
    """The stand-in provides only ``get_plugins``: a pydantic release that takes more from its
    loader module fails here first."""
    taken = set()
    for path in (Path(pydantic.__file__).parent / "plugin").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in ("_loader", LOADER):
                taken.update(alias.name for alias in node.names)
    assert taken == {"get_plugins"}


def test_the_stand_in_answers_as_pydantics_own_loader() -> None:
    real = run_python("from pydantic.plugin._loader import get_plugins; "
                      "print(repr(tuple(get_plugins())))", PYDANTIC_DISABLE_PLUGINS="__all__")
    ours = run_python("from ojai_setup.core.pydantic_plugins import skip_plugin_search; "
                      "assert skip_plugin_search(); "
                      "from pydantic.plugin._loader import get_plugins; "
                      "from pydantic import BaseModel\n"
                      "class M(BaseModel):\n x: int\n"
                      "assert M(x=1).x == 1\n"
                      "import sys; assert 'importlib.metadata' not in sys.modules\n"
                      "print(repr(tuple(get_plugins())))", PYDANTIC_DISABLE_PLUGINS="__all__")
    assert real == ours == "()"


def test_no_stand_in_unless_every_plugin_is_disabled() -> None:
    for value in (None, "logfire", ""):
        env = {} if value is None else {"PYDANTIC_DISABLE_PLUGINS": value}
        out = run_python("import sys; from ojai_setup.core.pydantic_plugins import "
                         f"skip_plugin_search; print(skip_plugin_search(), {LOADER!r} in "
                         "sys.modules)", **env)
        assert out == "False False", (value, out)


def test_the_version_has_one_home() -> None:
    assert importlib.metadata.version("ojai") == ojai_setup.__version__


#: what a machine without Lemonade, a journal or a model route never needs
NOT_ASKED_FOR = {"importlib.metadata", "importlib.resources", "ojai_setup.domain.lemonade",
                 "ojai_setup.formats.lemonade", "ojai_setup.model.journal",
                 "ojai_setup.formats.tuning", "ojai_setup.domain.deployment"}


def test_doctor_json_imports_no_metadata_rich_or_actions() -> None:
    names = imported("-m", "ojai_setup.cli", "doctor", "--json", "--root",
                     str(MACHINES / "ojai-fresh"))
    assert "ojai_setup.domain.checks" in names  # it ran
    assert not names & {"rich.console", "ojai_setup.model.actions", "ojai_setup.planning.plan",
                        "jinja2.environment", *NOT_ASKED_FOR}


def test_setup_json_imports_no_metadata_and_no_rich() -> None:
    names = imported("-m", "ojai_setup.cli", "setup", "--json", "--root",
                     str(MACHINES / "ojai-fresh"), "--llamacpp", "none")
    assert "ojai_setup.planning.plan" in names  # it planned
    assert not names & {"importlib.metadata", "rich.console", "ojai_setup.domain.catalog"}


def test_a_dry_run_with_nothing_to_do_imports_only_what_it_uses(tmp_path: Path) -> None:
    import shutil

    machine = tmp_path / "m"
    shutil.copytree(MACHINES / "ojai-fresh", machine, symlinks=True)
    subprocess.run([sys.executable, "-m", "ojai_setup.cli", "setup", "--root", str(machine),
                    "--llamacpp", "none", "--apply", "--yes"], check=True, capture_output=True)
    names = imported("-m", "ojai_setup.cli", "setup", "--root", str(machine), "--llamacpp", "none")
    assert "ojai_setup.planning.plan" in names and "rich.console" in names  # it planned, printed
    assert not names & {"ojai_setup.domain.catalog", *NOT_ASKED_FOR}


def test_a_model_route_reads_the_catalog() -> None:
    names = imported("-m", "ojai_setup.cli", "setup", "--json", "--root",
                     str(MACHINES / "ojai-fresh"), "--llamacpp", "none", "--model", "qwen3.6-27b")
    assert {"ojai_setup.domain.catalog", "ojai_setup.domain.deployment"} <= names


COUNT_COLLECTIONS = """
import atexit, gc, sys
runs = []
gc.callbacks.append(lambda phase, info: runs.append(info["generation"]) if phase == "start" else None)
atexit.register(lambda: print(len(runs), gc.isenabled(), file=sys.stderr))
sys.argv = ["ojai", *sys.argv[1:]]
from ojai_setup.entry import main
main()
"""


def collections_and_state(*argv: str) -> tuple[int, bool]:
    """How many collections ran in ``ojai ARGV``, and whether the collector was on at the end.
    Run twice: compiling a module without its bytecode cache can start a collection of its
    own, so the first run fills that cache."""
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", COUNT_COLLECTIONS, *argv],
                              capture_output=True, text=True, env=environment())
    count, enabled = proc.stderr.strip().splitlines()[-1].split()
    return int(count), enabled == "True"


def test_no_cycle_collection_while_doctor_or_a_dry_run_runs() -> None:
    fresh = str(MACHINES / "ojai-fresh")
    assert collections_and_state("doctor", "--json", "--root", fresh) == (0, False)
    assert collections_and_state("setup", "--root", fresh, "--llamacpp", "none") == (0, False)


FROZEN_AT_EXIT = """
import atexit, gc, sys
atexit.register(lambda: print(gc.get_freeze_count(), len(gc.get_objects()), file=sys.stderr))
sys.argv = ["ojai", *sys.argv[1:]]
from ojai_setup.entry import main
main()
"""


def test_a_short_command_leaves_the_collection_at_exit_nothing_to_scan() -> None:
    """What doctor made is frozen when it ends: the interpreter's collection at exit (which
    runs with the collector off too) passes over it."""
    proc = subprocess.run([sys.executable, "-c", FROZEN_AT_EXIT, "doctor", "--json", "--root",
                           str(MACHINES / "ojai-fresh")], capture_output=True, text=True,
                          env=environment())
    assert proc.stdout.startswith("{"), proc.stderr
    frozen, scanned = map(int, proc.stderr.strip().splitlines()[-1].split())
    assert frozen > 20_000 and scanned < 1_000, (frozen, scanned)


def test_the_collector_is_back_for_an_apply_and_other_commands(tmp_path: Path) -> None:
    import shutil

    machine = tmp_path / "m"
    shutil.copytree(MACHINES / "ojai-fresh", machine, symlinks=True)
    count, enabled = collections_and_state("setup", "--root", str(machine), "--llamacpp", "none",
                                           "--apply", "--yes")
    assert enabled and count > 0
    assert collections_and_state("rollback", "--root", str(machine), "--yes")[1]


def test_which_commands_are_short() -> None:
    from ojai_setup.entry import is_short

    assert is_short(["doctor", "--json"]) and is_short(["setup", "--root", "m"])
    assert is_short(["models"])
    assert not is_short(["setup", "--apply"]) and not is_short(["bench"])
    assert not is_short([]) and not is_short(["verify"]) and not is_short(["rollback"])
