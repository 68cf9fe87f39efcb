"""Shared fixtures. Area-specific fixtures live in tests/support/ and are imported by name."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

MACHINES = Path(__file__).parent / "machines"
REPO = Path(__file__).resolve().parent.parent


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


def pytest_collection_modifyitems(config, items):
    """The tests of the compiled HIP build run last: they wait for the build that ``.ci/run``
    starts in the background at the lowest priority (tests/support/hip.py), which by then has
    had every processor second the other tests left. ``OJAI_HIP_BUILD=0`` leaves them out for a
    quick loop on a machine without that build."""
    hip = [i for i in items if i.get_closest_marker("hip_build") is not None]
    rest = [i for i in items if i.get_closest_marker("hip_build") is None]
    if os.environ.get("OJAI_HIP_BUILD") == "0":
        if hip:
            config.hook.pytest_deselected(items=hip)
        hip = []
    items[:] = rest + hip
