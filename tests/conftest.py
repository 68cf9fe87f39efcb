"""Shared fixtures. Area-specific fixtures live in tests/support/ and are imported by name."""
from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path

import pytest
import typer.testing

MACHINES = Path(__file__).parent / "machines"
REPO = Path(__file__).resolve().parent.parent

# every llama-server the tests start without ``--threads`` (lemond's, the tiny models') reads
# its thread count here: why one, support/server.py's THREADS says
from support.server import THREADS  # noqa: E402

os.environ.setdefault("LLAMA_ARG_THREADS", str(THREADS))

# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE, which
# this machine's environment sets): the suite starts hundreds of Python processes (ojai's
# commands, stand-ins, xdist's workers, which inherit this environment), and pytest rewrites
# the asserts of every test module; without cached bytecode each of them compiles its sources
# again. Collecting the fast loop took 12.5 s without it and 4.5 s with it (beside a running
# suite). The caches are the gitignored __pycache__ folders, which the wheel leaves out.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# typer's CliRunner builds the click command from the app's functions on every invoke (13 ms
# for ojai's app here, and the tests invoke it over a thousand times); the ojai command builds
# it once per process. The app is not changed after import, so one build per app is kept. A
# typer without this name runs the tests as they are, only slower.
if hasattr(typer.testing, "_get_command"):
    typer.testing._get_command = functools.cache(typer.testing._get_command)


@pytest.fixture(autouse=True)
def own_user_cache(monkeypatch, tmp_path_factory):
    """The digests ojai keeps in the user's cache (bench and the gate) go to this session's
    temporary folder, not the home folder of whoever runs the tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))


@pytest.fixture(autouse=True)
def run_root_programs(monkeypatch):
    """The tests put stand-in programs into their machine copies (a llama-server answering
    ``--help``) and ask ojai to run them, as a person would with ``OJAI_RUN_ROOT_PROGRAMS=1``;
    tests of the default (captures only) take the variable away again."""
    monkeypatch.setenv("OJAI_RUN_ROOT_PROGRAMS", "1")


@pytest.fixture
def machine(tmp_path):
    """Copy a test machine (a sysroot under tests/machines/) into tmp_path and return its path."""

    def _copy(name: str) -> Path:
        src = MACHINES / name
        if not src.is_dir():
            raise FileNotFoundError(f"no test machine {name!r} under {MACHINES}")
        dest = tmp_path / name
        shutil.copytree(src, dest, symlinks=True)
        return dest

    return _copy


@pytest.fixture
def box(machine) -> Path:
    """The machine most tests plan on: a copy of ojai-fresh with a llama-server stand-in, so
    that routes are planned with ``--llamacpp none``. A module that needs another machine
    defines its own ``box``."""
    from support.stand_ins import give_llama_server

    root = machine("ojai-fresh")
    give_llama_server(root)
    return root


#: the order the tests are handed out in, and the groups that stay on one worker under
#: ``pytest -n 2 --dist loadgroup`` (what ``.ci/run`` runs): the guests first, one at a time to
#: each worker, since they take the longest (each qemu under TCG on one core; the installed
#: image and its booted snapshot are made once and shared, tests/support/vm.py); then the
#: modules that start real servers or chroots, each on one worker so that its module- and
#: session-scoped servers start once; then the rest, one test at a time to whichever worker is
#: free; the tests of the compiled HIP build last, together, since they wait for it.
ORDER = ("vm", "slow", "fast", "hip_build")


def _group(item) -> tuple[str, str | None]:
    """The scheduling class of a test and its xdist group (None: it goes alone)."""
    if item.get_closest_marker("hip_build") is not None:
        return "hip_build", "hip_build"
    if item.get_closest_marker("vm") is not None:
        return "vm", None
    if item.get_closest_marker("slow") is not None:
        return "slow", item.nodeid.split("::", 1)[0]
    return "fast", None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Orders the tests as :data:`ORDER` says and marks their xdist groups (tryfirst: before
    xdist's own hook reads the marks). The tests of the compiled HIP build run last: they wait
    for the build that ``.ci/run`` starts in the background at the lowest priority
    (tests/support/hip.py), which by then has had every processor second the other tests left.
    ``OJAI_HIP_BUILD=0`` leaves them out for a quick loop on a machine without that build."""
    classes = {}
    for item in items:
        kind, group = _group(item)
        classes[item.nodeid] = kind
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("OJAI_HIP_BUILD") == "0":
        hip = [i for i in items if classes[i.nodeid] == "hip_build"]
        if hip:
            config.hook.pytest_deselected(items=hip)
        items[:] = [i for i in items if classes[i.nodeid] != "hip_build"]
    items.sort(key=lambda i: ORDER.index(classes[i.nodeid]))  # stable: file order within
