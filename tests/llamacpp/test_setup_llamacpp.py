"""The llama.cpp step through ``ojai setup`` on copies of the test machines: Lemonade's nightly
zips from a local stand-in for GitHub, and source builds of a tiny CMake project."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import tarfile
from pathlib import Path

import pytest
from support.fake_github import (  # noqa: F401 - fake_github is a fixture
    Entry,
    FakeGitHub,
    fake_github,
    make_zip,
    nightly_entries_from_build,
)
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.stand_ins import give_hip_toolchain
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.domain.nightly import asset_name
from tests.support.text import flat

BASE = "/opt/ojai/llama.cpp"
#: prints a version line in the old form, whatever it is asked
FAKE_SERVER = b"#!/bin/sh\necho 'version: 1311 (abc1234)' >&2\n"
FAMILIES = ("gfx1150", "gfx1151", "gfx110X")


def ojai(*args: str):
    return CliRunner().invoke(app, list(args))


def plan_json(root: Path, *args: str) -> dict:
    result = ojai("setup", "--root", str(root), "--json", "--no-npu", *args)
    assert result.exit_code in (0, 1, 2), result.output
    data = json.loads(result.stdout)
    assert data["exit_code"] == result.exit_code
    return data


def step(plan: dict, name: str = "llama.cpp") -> dict:
    return next(s for s in plan["steps"] if s["step"] == name)


def apply(root: Path, *args: str):
    return ojai("setup", "--root", str(root), "--apply", "--yes", "--no-npu", *args)


def small_zip(tmp_path: Path, tag: str, family: str) -> bytes:
    """A tiny zip in the nightly layout: llama-server, a library and its version link."""
    folder = tmp_path / "zips"
    folder.mkdir(exist_ok=True)
    return make_zip(folder / f"{tag}-{family}.zip", [
        Entry("llama-server", FAKE_SERVER, 0o100755),
        Entry("libllama.so.0.6.0", f"{tag} {family}".encode(), 0o100755),
        Entry.symlink("libllama.so.0", "libllama.so.0.6.0"),
    ])


def publish(fake: FakeGitHub, tmp_path: Path, tag: str, *, latest: bool = True) -> None:
    fake.add_release(tag, {asset_name(tag, f): small_zip(tmp_path, tag, f) for f in FAMILIES},
                     latest=latest)


@pytest.fixture
def releases(fake_github: FakeGitHub, tmp_path: Path) -> FakeGitHub:
    """b1300 (older) and b1311 (the latest), each with zips for three families."""
    publish(fake_github, tmp_path, "b1300", latest=False)
    publish(fake_github, tmp_path, "b1311")
    return fake_github


def installed(root: Path) -> list[str]:
    base = root / BASE.lstrip("/")
    return sorted(p.name for p in base.iterdir()) if base.is_dir() else []


# -- nightly: planning ------------------------------------------------------------------------
def test_plan_resolves_latest_tag_and_gfx1150_asset_on_the_ojai_box(machine, releases):
    root = machine("ojai-fresh")
    plan = plan_json(root)
    s = step(plan)
    assert s["status"] == "change", s
    assert "b1311 for gfx1150" in s["sentence"] and "sha256 checked" in s["sentence"]
    [action] = s["actions"]
    asset = releases.asset("b1311", asset_name("b1311", "gfx1150"))
    assert action["kind"] == "install_archive"
    assert action["url"].endswith("/releases/download/b1311/llama-b1311-ubuntu-rocm-gfx1150-x64.zip")
    assert action["sha256"] == asset.digest.removeprefix("sha256:")
    assert action["size"] == len(asset.body)
    assert action["dest"] == f"{BASE}/b1311-gfx1150" and action["link"] == f"{BASE}/current"
    assert any(r.path.endswith("/releases/latest") for r in releases.requests)
    assert releases.downloads() == []  # planning fetches no archive
    assert installed(root) == []


def test_plan_pins_a_tag(machine, releases):
    root = machine("ojai-fresh")
    s = step(plan_json(root, "--llamacpp-tag", "b1300"))
    assert s["status"] == "change"
    [action] = s["actions"]
    assert action["dest"] == f"{BASE}/b1300-gfx1150"
    assert "/b1300/llama-b1300-ubuntu-rocm-gfx1150-x64.zip" in action["url"]
    assert not any(r.path.endswith("/releases/latest") for r in releases.requests)


def test_plan_unknown_pinned_tag_is_blocked(machine, releases):
    root = machine("ojai-fresh")
    plan = plan_json(root, "--llamacpp-tag", "b9999")
    s = step(plan)
    assert plan["exit_code"] == 1 and s["status"] == "blocked"
    assert "no release b9999 in lemonade-sdk/llamacpp-rocm" in s["sentence"]


def test_plan_picks_gfx1151_on_strix_halo(machine, releases):
    root = machine("strix-halo-dkms")
    [action] = step(plan_json(root))["actions"]
    assert action["dest"] == f"{BASE}/b1311-gfx1151"
    assert action["url"].endswith("llama-b1311-ubuntu-rocm-gfx1151-x64.zip")


def test_unreachable_api_blocks_the_step_with_a_sentence(machine, monkeypatch):
    with socket.socket() as s:  # a port on which nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OJAI_GITHUB_API", f"http://127.0.0.1:{port}")
    root = machine("ojai-fresh")
    result = ojai("setup", "--root", str(root), "--no-npu")
    assert result.exit_code == 1, result.output
    assert f"could not reach the GitHub API at http://127.0.0.1:{port}" in flat(result.stdout)
    assert "blocked" in result.stdout
    # the other steps are still planned and shown
    assert "ttm.pages_limit=12582912" in result.stdout


def test_llamacpp_none_is_satisfied_without_asking_github(machine, fake_github):
    root = machine("ojai-fresh")
    s = step(plan_json(root, "--llamacpp", "none"))
    assert s["status"] == "satisfied"
    assert s["sentence"] == "llama.cpp is not managed by ojai here (--llamacpp none)"
    assert fake_github.requests == []


# -- nightly: applying ------------------------------------------------------------------------
def test_apply_installs_then_second_apply_has_nothing_to_do(machine, releases):
    root = machine("ojai-fresh")
    first = apply(root)
    assert first.exit_code == 0, first.output
    dest = root / BASE.lstrip("/") / "b1311-gfx1150"
    assert (dest / "llama-server").read_bytes() == FAKE_SERVER
    assert os.access(dest / "llama-server", os.X_OK)
    assert os.readlink(dest / "libllama.so.0") == "libllama.so.0.6.0"
    assert os.readlink(root / BASE.lstrip("/") / "current") == "b1311-gfx1150"
    record = json.loads((dest / "ojai-install.json").read_text())
    assert record["tag"] == "b1311" and record["family"] == "gfx1150"
    assert installed(root) == ["b1311-gfx1150", "current"]  # no leftovers
    assert len(releases.downloads()) == 1

    second = apply(root)
    assert second.exit_code == 0, second.output
    assert "nothing to do" in second.stdout
    assert "llama.cpp nightly b1311 for gfx1150 is installed and verified" in flat(second.stdout)
    assert len(releases.downloads()) == 1


def test_new_release_switches_current_and_keeps_the_old_folder(machine, releases, tmp_path):
    root = machine("ojai-fresh")
    assert apply(root).exit_code == 0
    publish(releases, tmp_path, "b1320")
    s = step(plan_json(root))
    assert s["status"] == "change" and "b1320" in s["sentence"]
    result = apply(root)
    assert result.exit_code == 0, result.output
    assert os.readlink(root / BASE.lstrip("/") / "current") == "b1320-gfx1150"
    assert installed(root) == ["b1311-gfx1150", "b1320-gfx1150", "current"]


def test_tampered_install_is_planned_again(machine, releases):
    root = machine("ojai-fresh")
    assert apply(root).exit_code == 0
    (root / BASE.lstrip("/") / "b1311-gfx1150" / "libllama.so.0.6.0").unlink()
    s = step(plan_json(root))
    assert s["status"] == "change"
    result = apply(root)
    assert result.exit_code == 0, result.output
    assert (root / BASE.lstrip("/") / "b1311-gfx1150" / "libllama.so.0.6.0").is_file()


def test_wrong_digest_fails_installs_nothing_and_the_fixed_release_installs(machine, releases):
    root = machine("ojai-fresh")
    asset = releases.asset("b1311", asset_name("b1311", "gfx1150"))
    good = asset.digest
    asset.digest = "sha256:" + "0" * 64
    failed = apply(root)
    assert failed.exit_code == 1, failed.output
    assert "sha256" in failed.stderr and "0" * 64 in failed.stderr
    assert "apply failed" in failed.stderr
    assert installed(root) == []  # no folder, no link, no partial download

    asset.digest = good
    fixed = apply(root)
    assert fixed.exit_code == 0, fixed.output
    assert os.readlink(root / BASE.lstrip("/") / "current") == "b1311-gfx1150"


def test_wrong_digest_keeps_the_previous_install_working(machine, releases, tmp_path):
    root = machine("ojai-fresh")
    assert apply(root).exit_code == 0
    publish(releases, tmp_path, "b1320")
    releases.asset("b1320", asset_name("b1320", "gfx1150")).digest = "sha256:" + "1" * 64
    failed = apply(root)
    assert failed.exit_code == 1
    assert os.readlink(root / BASE.lstrip("/") / "current") == "b1311-gfx1150"
    assert installed(root) == ["b1311-gfx1150", "current"]


def test_truncated_download_fails_and_the_next_apply_works(machine, releases):
    root = machine("ojai-fresh")
    asset = releases.asset("b1311", asset_name("b1311", "gfx1150"))
    asset.cut_after = len(asset.body) // 2
    failed = apply(root)
    assert failed.exit_code == 1, failed.output
    assert installed(root) == []
    asset.cut_after = None
    assert apply(root).exit_code == 0


@pytest.mark.slow
def test_apply_the_real_binary_zip(machine, fake_github, tmp_path, llama_server_bin):
    body = make_zip(tmp_path / "real.zip",
                    nightly_entries_from_build(llama_server_bin.parent, llama_server_bin))
    fake_github.add_release("b1311", {asset_name("b1311", "gfx1150"): body})
    root = machine("ojai-fresh")
    result = apply(root)
    assert result.exit_code == 0, result.output
    server = root / BASE.lstrip("/") / "current" / "llama-server"
    version = subprocess.run([str(server), "--version"], capture_output=True, text=True,
                             timeout=60, env={"PATH": os.environ["PATH"]})
    assert version.returncode == 0, version.stderr
    assert "build 11434" in version.stderr
    doctor = json.loads(ojai("doctor", "--json", "--root", str(root)).stdout)
    assert "11434" in json.dumps(doctor["facts"]["tools"]["llama-server"])
    assert "nothing to do" in apply(root).stdout


# -- source builds ----------------------------------------------------------------------------
CMAKE = """\
cmake_minimum_required(VERSION 3.14)
project(fake_llama C)
option(BUILD_SHARED_LIBS "build shared libraries" ON)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_library(llama lib.c)
set_target_properties(llama PROPERTIES VERSION 0.6.0 SOVERSION 0)
add_executable(llama-server server.c)
target_link_libraries(llama-server llama)
"""
SERVER_C = """\
#include <stdio.h>
int llama_offset(void);
int main(void) {
    fprintf(stderr, "version: 0.6.0-fake (build %d, commit fake123)\\n", 7 + llama_offset());
    return 0;
}
"""


def write_fake_source(where: Path) -> Path:
    """A tiny C project shaped like llama.cpp that builds a ``llama-server``."""
    (where / "include").mkdir(parents=True)
    (where / "include" / "llama.h").write_text("int llama_offset(void);\n")
    (where / "CMakeLists.txt").write_text(CMAKE)
    (where / "server.c").write_text(SERVER_C)
    (where / "lib.c").write_text("int llama_offset(void) { return 0; }\n")
    return where


def fake_tarball(root: Path, tmp_path: Path) -> str:
    """The tiny project as ``/srv/fake-llama.tar.gz`` on the machine; returns its machine path."""
    src = write_fake_source(tmp_path / "fake-llama")
    (root / "srv").mkdir()
    with tarfile.open(root / "srv" / "fake-llama.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="fake-llama")
    return "/srv/fake-llama.tar.gz"


def test_source_plan_defaults_to_hip_for_the_gpu_target(machine):
    root = give_hip_toolchain(machine("ojai-fresh"))  # without one the step is blocked
    s = step(plan_json(root, "--llamacpp", "source", "--llamacpp-ref", "b11434"))
    [action] = s["actions"]
    assert action["kind"] == "build_from_source"
    assert action["backend"] == "hip" and action["gpu_target"] == "gfx1150"
    assert action["source"] == "https://github.com/ggml-org/llama.cpp" and action["ref"] == "b11434"
    assert action["dest"] == f"{BASE}/src-b11434-hip-gfx1150"


def test_source_plan_cpu_backend_without_gpu(machine):
    root = machine("no-amd-gpu")
    s = step(plan_json(root, "--llamacpp", "source"))
    [action] = s["actions"]
    assert action["backend"] == "cpu" and action["gpu_target"] is None


def test_source_tarball_builds_installs_and_second_apply_is_a_no_op(machine, tmp_path):
    root = machine("ojai-fresh")
    src = fake_tarball(root, tmp_path)
    args = ("--llamacpp", "source", "--backend", "cpu", "--llamacpp-src", src)
    s = step(plan_json(root, *args))
    assert s["status"] == "change" and "(cpu: about " in s["sentence"]
    [action] = s["actions"]
    assert action["kind"] == "build_from_source" and action["backend"] == "cpu"
    assert action["gpu_target"] is None and action["source"] == src
    dest = f"{BASE}/src-fake-llama-cpu"
    assert action["dest"] == dest

    first = apply(root, *args)
    assert first.exit_code == 0, first.output
    real = root / dest.lstrip("/")
    out = subprocess.run([str(real / "llama-server")], capture_output=True, text=True, timeout=30)
    assert "version: 0.6.0-fake (build 7" in out.stderr
    assert os.readlink(root / BASE.lstrip("/") / "current") == "src-fake-llama-cpu"
    record = json.loads((real / "ojai-install.json").read_text())
    assert record["source_kind"] == "tarball" and record["backend"] == "cpu"

    second = apply(root, *args)
    assert second.exit_code == 0, second.output
    assert "nothing to do" in second.stdout
    assert f"llama-server built from {src} is installed in {dest}" in flat(second.stdout)


def test_source_directory_builds_once_and_again_after_an_edit(machine, tmp_path):
    root = machine("ojai-fresh")
    src = write_fake_source(root / "srv" / "llama.cpp")
    args = ("--llamacpp", "source", "--backend", "cpu", "--llamacpp-src", "/srv/llama.cpp")
    result = apply(root, *args)
    assert result.exit_code == 0, result.output  # the plan after applying is empty
    assert os.readlink(root / BASE.lstrip("/") / "current") == "src-llama.cpp-cpu"
    s = step(plan_json(root, *args))
    assert s["status"] == "satisfied" and "no source file changed since" in s["sentence"]

    (src / "lib.c").write_text("int llama_offset(void) { return 1; }\n")
    s = step(plan_json(root, *args))
    assert s["status"] == "change"
    assert apply(root, *args).exit_code == 0
    out = subprocess.run([str(root / BASE.lstrip("/") / "current" / "llama-server")],
                         capture_output=True, text=True, timeout=30)
    assert "(build 8, commit fake123)" in out.stderr


def test_source_git_branch_builds_once(machine, tmp_path):
    repo = write_fake_source(tmp_path / "upstream")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "--quiet", "-b", "master", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "fake llama"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    root = machine("ojai-fresh")
    args = ("--llamacpp", "source", "--backend", "cpu", "--llamacpp-src", f"file://{repo}")
    result = apply(root, *args)
    assert result.exit_code == 0, result.output
    second = apply(root, *args)
    assert second.exit_code == 0 and "nothing to do" in second.stdout
    assert f"commit {commit} of the default branch" in flat(second.stdout)
    assert "pin a newer tag or commit with --llamacpp-ref" in flat(second.stdout)


def test_source_build_failure_keeps_the_nightly_install(machine, releases, tmp_path):
    root = machine("ojai-fresh")
    assert apply(root).exit_code == 0
    broken = write_fake_source(root / "srv" / "broken")
    (broken / "server.c").write_text("this is not C\n")
    result = apply(root, "--llamacpp", "source", "--backend", "cpu", "--llamacpp-src", "/srv/broken")
    assert result.exit_code == 1, result.output
    assert "building llama-server failed" in result.stderr
    assert os.readlink(root / BASE.lstrip("/") / "current") == "b1311-gfx1150"


# -- extra CMake definitions (--cmake-define) ------------------------------------------------
HIP_SOURCE = ("--llamacpp", "source", "--llamacpp-ref", "b11434")


def test_cmake_defines_are_planned_shown_and_make_a_build_of_their_own(machine):
    root = give_hip_toolchain(machine("ojai-fresh"))
    plain = step(plan_json(root, *HIP_SOURCE))["actions"][0]
    assert plain["cmake_args"] == [] and plain["dest"] == f"{BASE}/src-b11434-hip-gfx1150"
    defines = ("--cmake-define", "GGML_CUDA_FA_QUANTS=f16-f16", "--cmake-define", "GGML_CUDA_FA=OFF")
    s = step(plan_json(root, *HIP_SOURCE, *defines))
    [action] = s["actions"]
    # sorted by name: their order does not matter to CMake, so the same set is the same build
    assert action["cmake_args"] == ["-DGGML_CUDA_FA=OFF", "-DGGML_CUDA_FA_QUANTS=f16-f16"]
    assert action["dest"].startswith(f"{BASE}/src-b11434-hip-gfx1150-d")
    assert "with -DGGML_CUDA_FA=OFF -DGGML_CUDA_FA_QUANTS=f16-f16" in s["sentence"]
    # the test HIP build's definitions: stated as measured with them (build-costs.toml)
    assert "30 min of compiler time" in s["sentence"] and "without" not in s["sentence"]
    swapped = step(plan_json(root, *HIP_SOURCE, *defines[2:], *defines[:2]))["actions"][0]
    assert swapped == action
    other = step(plan_json(root, *HIP_SOURCE, *defines[:2]))
    assert other["actions"][0]["dest"] not in (action["dest"], plain["dest"])
    assert "as measured without the extra definitions" in other["sentence"]
    shown = flat(ojai("setup", "--root", str(root), "--no-npu", *HIP_SOURCE, *defines).stdout)
    assert ("build llama-server (hip, gfx1150) from https://github.com/ggml-org/llama.cpp with "
            f"-DGGML_CUDA_FA=OFF -DGGML_CUDA_FA_QUANTS=f16-f16 into {action['dest']}") in shown


@pytest.mark.parametrize(("define", "says"), [
    ("GGML_HIP=OFF", "--cmake-define GGML_HIP=OFF: GGML_HIP is set by ojai itself (the backend "
                     "comes from --backend); leave it out"),
    ("GGML_VULKAN=ON", "GGML_VULKAN is set by ojai itself (the backend comes from --backend)"),
    ("GPU_TARGETS=gfx1100", "GPU_TARGETS is set by ojai itself (the targets come from "
                            "--gpu-target)"),
    ("CMAKE_BUILD_TYPE=Debug", "CMAKE_BUILD_TYPE is set by ojai itself (ojai builds Release)"),
    ("GGML_CUDA_FA", "--cmake-define GGML_CUDA_FA: is not KEY=VALUE"),
    ("9LIVES=1", "'9LIVES' is not a CMake variable name"),
    ("GGML-CUDA-FA=OFF", "'GGML-CUDA-FA' is not a CMake variable name"),
    ("X=$(reboot)", "the value of X holds '$()': a value may hold letters, digits and "
                    "_ . , : / + = @ % -, words separated by one space, no quotes or shell "
                    "metacharacters"),
    ("X=a;touch /tmp/x", "the value of X holds ';'"),
    ("X=`id`", "the value of X holds '`'"),
    ("X=-O3 '-g'", "the value of X holds \"'\""),
    ("X=-O3\t-g", "the value of X holds '\\t'"),
    ("X=-O3  -g", "the value of X starts or ends with a space or has two together"),
    ("X= -O3", "the value of X starts or ends with a space or has two together"),
])
def test_a_cmake_define_ojai_does_not_pass_on_is_refused(machine, define, says):
    root = give_hip_toolchain(machine("ojai-fresh"))
    result = ojai("setup", "--root", str(root), "--no-npu", *HIP_SOURCE, "--cmake-define", define)
    assert result.exit_code == 64, result.output
    assert says in flat(result.stderr)


def test_cmake_defines_given_twice_or_without_a_source_build(machine):
    root = give_hip_toolchain(machine("ojai-fresh"))
    twice = ojai("setup", "--root", str(root), "--no-npu", *HIP_SOURCE,
                 "--cmake-define", "GGML_CUDA_FA=OFF", "--cmake-define", "GGML_CUDA_FA=ON")
    assert twice.exit_code == 64
    assert "GGML_CUDA_FA is given twice (GGML_CUDA_FA=OFF, GGML_CUDA_FA=ON)" in flat(twice.stderr)
    nightly = ojai("setup", "--root", str(root), "--no-npu", "--cmake-define", "GGML_CUDA_FA=OFF")
    assert nightly.exit_code == 64
    assert ("--cmake-define GGML_CUDA_FA=OFF: CMake definitions are for a source build; add "
            "--llamacpp source") in flat(nightly.stderr)


def test_cmake_defines_round_trip_through_the_command_line():
    from ojai_setup.model.settings import Settings

    settings = Settings(llamacpp="source", cmake_defines=("B_OPT=1", "A_OPT=x/y"))
    assert settings.cmake_defines == ("A_OPT=x/y", "B_OPT=1")
    assert settings.options() == ["--llamacpp", "source", "--cmake-define", "A_OPT=x/y",
                                  "--cmake-define", "B_OPT=1"]
    assert "--cmake-define A_OPT=x/y --cmake-define B_OPT=1" in settings.command()


def test_a_cmake_define_reaches_configure_and_the_install_record(machine, tmp_path):
    """A real CMake build of the tiny project, whose build number is its FAKE_OFFSET variable."""
    root = machine("ojai-fresh")
    src = write_fake_source(root / "srv" / "llama.cpp")
    (src / "CMakeLists.txt").write_text(CMAKE + 'set(FAKE_OFFSET 0 CACHE STRING "")\n'
                                        "target_compile_definitions(llama PRIVATE "
                                        "OFFSET=${FAKE_OFFSET})\n")
    (src / "lib.c").write_text("int llama_offset(void) { return OFFSET; }\n")
    (root / "srv" / "src.tar.gz").parent.mkdir(exist_ok=True)
    with tarfile.open(root / "srv" / "src.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="fake-llama")
    args = ("--llamacpp", "source", "--backend", "cpu", "--llamacpp-src", "/srv/src.tar.gz")
    defined = (*args, "--cmake-define", "FAKE_OFFSET=5")
    [action] = step(plan_json(root, *defined))["actions"]
    first = apply(root, *defined)
    assert first.exit_code == 0, first.output
    real = root / action["dest"].lstrip("/")
    out = subprocess.run([str(real / "llama-server")], capture_output=True, text=True, timeout=30)
    assert "(build 12, commit fake123)" in out.stderr  # 7 + 5: the definition reached CMake
    record = json.loads((real / "ojai-install.json").read_text())
    assert record["extra_cmake_args"] == ["-DFAKE_OFFSET=5"]
    assert record["cmake_args"][-1] == "-DFAKE_OFFSET=5"
    again = apply(root, *defined)
    assert again.exit_code == 0 and "nothing to do" in again.stdout
    # without it: another build, in its own folder; the defined one stays
    plain = apply(root, *args)
    assert plain.exit_code == 0, plain.output
    assert os.readlink(root / BASE.lstrip("/") / "current") == "src-src-cpu"
    out = subprocess.run([str(root / BASE.lstrip("/") / "current" / "llama-server")],
                         capture_output=True, text=True, timeout=30)
    assert "(build 7, commit fake123)" in out.stderr
    assert (real / "llama-server").is_file()


def test_a_cmake_define_of_several_flags_is_one_argument_shown_quoted(machine):
    """A value of words (compiler flags, as owners give CMAKE_HIP_FLAGS) reaches CMake as one
    -D argument, every word of it the compiler's; the plan and its command line quote it."""
    root = machine("ojai-fresh")
    src = write_fake_source(root / "srv" / "llama.cpp")
    (src / "lib.c").write_text("int llama_offset(void) { return OFFSET; }\n")
    with tarfile.open(root / "srv" / "src.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="fake-llama")
    flags = "CMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG -DOFFSET=9"
    defined = ("--llamacpp", "source", "--backend", "cpu", "--llamacpp-src", "/srv/src.tar.gz",
               "--cmake-define", flags)
    s = step(plan_json(root, *defined))
    [action] = s["actions"]
    assert action["cmake_args"] == [f"-D{flags}"]
    assert f"with '-D{flags}' (cpu" in s["sentence"]
    shown = flat(ojai("setup", "--root", str(root), "--no-npu", *defined).stdout)
    assert f"with '-D{flags}'" in shown
    from ojai_setup.model.settings import Settings

    replan = Settings(llamacpp="source", cmake_defines=(flags,)).command()
    assert f"--cmake-define '{flags}'" in replan  # the command that plans it again
    assert shlex.split(replan)[-2:] == ["--cmake-define", flags]
    first = apply(root, *defined)
    assert first.exit_code == 0, first.output
    real = root / action["dest"].lstrip("/")
    out = subprocess.run([str(real / "llama-server")], capture_output=True, text=True, timeout=30)
    assert "(build 16, commit fake123)" in out.stderr  # 7 + 9: the last word reached the compiler
    log = (root / (action["dest"].lstrip("/") + ".build.log")).read_text()
    assert f" '-D{flags}'" in log  # the build log's command line quotes it as one argument
    record = json.loads((real / "ojai-install.json").read_text())
    assert record["extra_cmake_args"] == [f"-D{flags}"]
    again = apply(root, *defined)
    assert again.exit_code == 0 and "nothing to do" in again.stdout


# -- offline ----------------------------------------------------------------------------------
def _dead_api(monkeypatch) -> str:
    with socket.socket() as s:  # a port on which nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OJAI_GITHUB_API", f"http://127.0.0.1:{port}")
    return f"http://127.0.0.1:{port}"


def test_installed_pinned_nightly_is_satisfied_without_github(machine, releases, monkeypatch):
    root = machine("ojai-fresh")
    assert apply(root).exit_code == 0
    releases.requests.clear()
    _dead_api(monkeypatch)
    s = step(plan_json(root, "--llamacpp-tag", "b1311"))
    assert s["status"] == "satisfied", s
    assert "b1311" in s["sentence"]
    assert releases.requests == []


def test_unreachable_github_blocks_only_llamacpp_and_says_the_ways_forward(machine, releases,
                                                                          monkeypatch):
    root = machine("ojai-fresh")
    assert apply(root).exit_code == 0
    _dead_api(monkeypatch)
    plan = plan_json(root)
    s = step(plan)
    assert s["status"] == "blocked"
    for i, way in enumerate(("--llamacpp-tag b1311", "--llamacpp none",
                             "--llamacpp source --llamacpp-src DIR", "GITHUB_TOKEN")):
        assert s["ways"][i].startswith(way), s["ways"]  # the ways forward, one item each
    # the other steps (sglang and power among them) are satisfied
    assert [x["status"] for x in plan["steps"] if x["step"] != "llama.cpp"] == ["satisfied"] * 8


def test_a_pinned_tag_github_no_longer_has_is_withdrawn_not_offline(machine, releases):
    """b1293 was deleted by its maintainers (lemonade-sdk/llamacpp-rocm#110): GitHub answers 404
    for it, which says it was withdrawn and why, not that GitHub cannot be reached."""
    root = machine("ojai-fresh")
    s = step(plan_json(root, "--llamacpp-tag", "b1293"))
    assert s["status"] == "blocked"
    sentence = flat(s["sentence"])
    assert "no release b1293 in lemonade-sdk/llamacpp-rocm: GitHub answers 404 for it, so it " \
        "was withdrawn" in sentence, sentence
    assert "segfaults at start-up" in sentence
    assert "https://github.com/lemonade-sdk/llamacpp-rocm/issues/110" in sentence
    assert "GITHUB_TOKEN" not in sentence and "--llamacpp none" not in sentence
    # a tag no row names is withdrawn or never published, still not "offline"
    other = flat(step(plan_json(root, "--llamacpp-tag", "b1299"))["sentence"])
    assert "b1299 in lemonade-sdk/llamacpp-rocm: GitHub answers 404 for it, so it was " \
        "withdrawn" in other
    assert "never published" in other and "GITHUB_TOKEN" not in other


# -- source: the Vulkan backend ---------------------------------------------------------------
@pytest.mark.parametrize("box, packages", [
    ("ojai-fresh", "sudo apt install glslc libvulkan-dev"),
    ("fedora-bls-stale", "sudo dnf install glslc vulkan-headers vulkan-loader-devel"),
    ("arch-sdboot-leftover-grub", "sudo pacman -S shaderc vulkan-headers vulkan-icd-loader"),
])
def test_source_vulkan_is_blocked_without_glslc_and_headers_naming_the_packages(machine, box,
                                                                                packages):
    root = machine(box)
    s = step(plan_json(root, "--llamacpp", "source", "--backend", "vulkan"))
    assert s["status"] == "blocked", s
    assert "the shader compiler glslc" in s["sentence"]
    assert "the Vulkan headers (vulkan/vulkan.h)" in s["sentence"]
    assert f"`{packages}`" in s["sentence"]


def test_source_vulkan_is_planned_once_glslc_headers_and_loader_are_there(machine):
    root = machine("ojai-fresh")
    for path in ("usr/bin/glslc", "usr/include/vulkan/vulkan.h",
                 "usr/lib/x86_64-linux-gnu/libvulkan.so"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"")
    (root / "usr/bin/glslc").chmod(0o755)
    s = step(plan_json(root, "--llamacpp", "source", "--backend", "vulkan"))
    assert s["status"] == "change", s
    [action] = s["actions"]
    assert action["backend"] == "vulkan" and action["gpu_target"] is None
    assert action["dest"] == f"{BASE}/src-llama.cpp-vulkan"
    s = step(plan_json(root, "--llamacpp", "source", "--backend", "vulkan", "--gpu-target",
                       "gfx1150"))
    assert s["status"] == "blocked" and "a Vulkan build runs on any GPU" in s["sentence"]


def test_vulkan_configure_options():
    from ojai_setup.domain.build import BuildError, cmake_configure_args

    args = cmake_configure_args("vulkan", None, source_options={"GGML_VULKAN", "GGML_HIP"})
    assert "-DGGML_VULKAN=ON" in args and not any("HIP" in a or "GPU_TARGETS" in a for a in args)
    with pytest.raises(BuildError, match="no GGML_VULKAN option"):
        cmake_configure_args("vulkan", None, source_options={"GGML_HIP"})
