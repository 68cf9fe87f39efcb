"""The cache keys of the HIP build (tests/support/hip.py): the build is keyed by what it is
made of, the chroot's venv of ojai's dependencies by those dependencies, so that a change to
``project.dependencies`` remakes the venv (a minute) and never the build (half an hour)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import hip, sid


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OJAI_TEST_CACHE", str(tmp_path))
    return tmp_path


def test_a_dependency_change_keeps_the_build_and_remakes_the_venv(
        monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    build, venv = hip.cache_dir(), hip.venv_cache_dir()
    assert build.parent == cache / "llama-server-hip"
    assert venv.parent == cache / "hip-venv"
    deps = hip.dependencies()
    assert deps and all(isinstance(d, str) for d in deps)
    # matplotlib moved into an optional extra, say
    monkeypatch.setattr(hip, "dependencies", lambda: [d for d in deps if "matplotlib" not in d]
                        + ["some-new-dependency>=1"])
    assert hip.cache_dir() == build
    assert hip.venv_cache_dir() != venv
    assert "dependencies" not in hip.recipe()


def test_the_build_is_keyed_by_what_it_is_made_of(monkeypatch: pytest.MonkeyPatch) -> None:
    build, venv = hip.cache_dir(), hip.venv_cache_dir()
    for name, value in (("CMAKE_DEFINES", (*hip.CMAKE_DEFINES, "GGML_HIP_NO_VMM=ON")),
                        ("RECIPE_REVISION", hip.RECIPE_REVISION + 1),
                        ("GPU_TARGET", "gfx1151")):
        with monkeypatch.context() as m:
            m.setattr(hip, name, value)
            assert hip.cache_dir() != build, name
            assert hip.venv_cache_dir() == venv, name
    with monkeypatch.context() as m:  # another sid recipe: another Python, other compilers
        m.setattr(sid, "recipe_hash", lambda: "0" * 64)
        assert hip.cache_dir() != build
        assert hip.venv_cache_dir() != venv


def test_the_venv_is_bound_from_its_own_folder(cache: Path) -> None:
    from ojai_setup.model.actions import BuildFromSource

    action = BuildFromSource(source="/src/x.tar.gz", dest="/opt/ojai/llama.cpp/x")
    build = hip.HipBuild(cache / "chroot", hip.cache_dir(), action, hip.venv_cache_dir() / "venv")
    binds = dict((guest, host) for host, guest in build.binds())
    assert binds[hip.IN_VENV] == hip.venv_cache_dir() / "venv"
    assert not binds[hip.IN_VENV].is_relative_to(hip.cache_dir())


def test_a_venv_counts_only_with_the_dependencies_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = hip.venv_cache_dir()
    (folder / "venv").mkdir(parents=True)
    assert hip._venv_ready(folder) is None  # interrupted: no ready.json
    (folder / "ready.json").write_text('["other"]\n')
    assert hip._venv_ready(folder) is None
    monkeypatch.setattr(hip, "dependencies", lambda: ["other"])
    assert hip._venv_ready(folder) == folder / "venv"
