"""The HIP build of llama-server for gfx1150, compiled for real by ojai's source-build step
against ROCm 6.4 in a Debian sid chroot (tests/support/hip.py says how), then probed like
any other llama-server; and the build's refusals on real but incomplete toolchains (the same
chroot with hipconfig or hipBLAS's CMake package hidden).

There is no GPU here: ``--version``, ``--help`` and ojai's dialect probe need none, and the
HIP runtime does not refuse to start without one (it only finds no device), so everything
but inference is probed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ojai_setup.domain.build import INSTALL_RECORD
from ojai_setup.facts.llama_install import read_install_record
from ojai_setup.domain.costs import measured
from ojai_setup.model.cmake import args_text
from support import sid
from support.hip import (GPU_TARGET, IN_CHECKOUT, HipBuild, ensure_hip_build, ensure_hip_toolchain,
                         plan_file, planned_action)
from support.llama import llama_server_bin  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow
SERVER_IN = "/opt/ojai/llama.cpp/current/llama-server"


@pytest.fixture(scope="session")
def hip_build() -> HipBuild:
    """The compiled and installed build."""
    return ensure_hip_build()


@pytest.fixture(scope="session")
def hip_toolchain() -> HipBuild:
    """The chroot with ojai runnable inside and the plan made; nothing compiled needed."""
    return ensure_hip_toolchain()


def in_chroot(build: HipBuild, argv: list[str], **kw) -> sid.subprocess.CompletedProcess[str]:
    return sid.run_in_chroot(build.chroot, argv, binds=build.binds(), **kw)


# -- the build and its install ---------------------------------------------------------------
@pytest.mark.hip_build
def test_install_layout_record_and_link(hip_build: HipBuild, llama_server_bin: Path) -> None:
    action = hip_build.action
    assert (action.backend, action.gpu_target) == ("hip", GPU_TARGET)
    # the test build's definitions (tests/support/hip.py, CMAKE_DEFINES): a build of its own
    assert action.cmake_args == ("-DCMAKE_CXX_FLAGS_RELEASE=-O0", "-DCMAKE_C_FLAGS_RELEASE=-O0",
                                 "-DCMAKE_HIP_FLAGS_RELEASE=-O3 -DNDEBUG -Xarch_host -O0",
                                 "-DGGML_CUDA_FA=OFF", "-DGGML_CUDA_FA_QUANTS=f16-f16")
    assert re.fullmatch(r"/opt/ojai/llama\.cpp/src-b11434-hip-gfx1150-d[0-9a-f]{8}", action.dest)
    link = hip_build.root.resolve(action.link)
    assert link.is_symlink() and link.resolve() == hip_build.dest.resolve()
    record = read_install_record(hip_build.root, action.dest)
    assert record is not None
    assert (record.source_kind, record.ref, record.build_number) == ("tarball", "b11434", 11434)
    assert record.version.startswith("version: 0.6.0-dev (build 11434, commit")
    assert "-DGGML_HIP=ON" in record.cmake_args
    assert "-DGPU_TARGETS=gfx1150" in record.cmake_args
    # the plan's definitions, passed last to configure; nothing added by the test itself
    assert record.extra_cmake_args == action.cmake_args
    assert record.cmake_args[-len(action.cmake_args):] == action.cmake_args
    assert record.build_seconds and record.build_bytes and record.cores
    # the same layout as the CPU build: the binary, its libraries beside it, the record
    cpu = json.loads((llama_server_bin.parent / INSTALL_RECORD).read_text())
    assert set(json.loads((hip_build.dest / INSTALL_RECORD).read_text())) >= set(cpu)
    hip_files = set(record.files)
    assert set(cpu["files"]) <= hip_files
    extra = hip_files - set(cpu["files"])
    assert "libggml-hip.so" in extra and all(f.startswith("libggml-hip.so") for f in extra), extra
    for name in record.files:
        assert (hip_build.dest / name).exists(), name
    assert not [p.name for p in hip_build.dest.parent.iterdir() if ".build-" in p.name]


@pytest.mark.hip_build
def test_the_apply_was_journaled_and_verified(hip_build: HipBuild) -> None:
    out = (hip_build.cache / "build.out").read_text().splitlines()
    result = json.loads(out[-1])
    [action] = result["actions"]
    assert action["changed"] is True
    assert action["message"] == f"built 0.6.0-dev build 11434 into {hip_build.action.dest}"
    assert result["journal"].startswith("/var/lib/ojai/journal/")
    entry = json.loads(Path(str(hip_build.machine) + result["journal"]).read_text())
    assert entry["status"] == "complete", entry
    assert [a["kind"] for a in entry["actions"]] == ["build_from_source"]


@pytest.mark.hip_build
def test_the_build_showed_progress(hip_build: HipBuild) -> None:
    lines = (hip_build.cache / "build.out").read_text().splitlines()
    assert "progress: configure llama.cpp ..." in lines
    pcts = [int(m.group(1)) for line in lines
            if (m := re.fullmatch(r"progress: build llama-server: (\d+)%", line))]
    assert len(pcts) >= 10 and pcts == sorted(pcts) and pcts[-1] == 100
    assert "progress: build llama-server: done" in lines


@pytest.mark.hip_build
def test_the_measured_cost_the_plan_states(hip_build: HipBuild) -> None:
    """build-costs.toml states what this build measured."""
    record = read_install_record(hip_build.root, hip_build.action.dest)
    # the figures stated for a build with this build's definitions (build-costs.toml, [with.])
    stated = measured()[f"hip gfx1150 with {args_text(hip_build.action.cmake_args)}"]
    installed = sum(f.lstat().st_size for f in hip_build.dest.iterdir())
    print(f"measured: {record.build_seconds:.0f} s wall on {record.cores} cores, "
          f"{record.cpu_seconds} s processor time, {record.build_bytes} bytes building, "
          f"{installed} bytes installed")
    # the processor time as the install record has it, else as measured around the apply
    cpu_seconds = record.cpu_seconds or json.loads((hip_build.cache / "build.json").read_text()
                                                   )["cpu_seconds"]
    # compilers and machines vary: the statement must be within a factor of two of this run
    for stated_value, value in ((stated.cpu_seconds, cpu_seconds),
                                (stated.build_bytes, record.build_bytes),
                                (stated.install_bytes, installed)):
        assert value / 2 <= stated_value <= value * 2, (stated, record, installed)


# -- probing it like any other llama-server --------------------------------------------------
@pytest.mark.hip_build
def test_libraries_resolve_beside_the_binary_and_in_rocm(hip_build: HipBuild) -> None:
    ldd = in_chroot(hip_build, ["ldd", SERVER_IN]).stdout
    assert "not found" not in ldd
    assert re.search(r"libggml-hip\.so\.0 => /opt/ojai/llama\.cpp/"
                     r"(current|src-b11434-hip-gfx1150-d[0-9a-f]{8})/libggml-hip\.so\.0", ldd), ldd
    ldd_hip = in_chroot(hip_build, ["ldd", f"{hip_build.action.dest}/libggml-hip.so.0"]).stdout
    assert re.search(r"libamdhip64\.so\.\d+ => /usr/lib/x86_64-linux-gnu/", ldd_hip), ldd_hip
    assert re.search(r"libhipblas\.so\.\d+ => /usr/lib/x86_64-linux-gnu/", ldd_hip), ldd_hip
    assert ".build-" not in ldd + ldd_hip


#: the magic that opens each clang offload bundle (one for each HIP source file, concatenated in
#: the library's .hip_fatbin section by the linker)
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
HIP_TRIPLE = f"hipv4-amdgcn-amd-amdhsa--{GPU_TARGET}"
#: the kernels GGML_CUDA_FA=OFF leaves without a body (FLASH_ATTN_AVAILABLE unset)
FA_KERNELS = ("flash_attn_tile", "flash_attn_ext_f16", "flash_attn_ext_vec")
#: the GPU code read with the toolchain's own tools: each bundle's targets, then the gfx1150
#: code object's kernels (name and size) and the target its ELF header names
READ_GPU_CODE = r"""
set -e
cd /gpu
llvm-objcopy-21 --dump-section .hip_fatbin=fatbin "$1" /gpu/copy.so
"""
LIST_BUNDLES = r"""
set -e
cd /gpu
for b in bundle-*; do
  echo "== $b"
  /usr/lib/llvm-21/bin/clang-offload-bundler --list --type=o --input="$b"
  /usr/lib/llvm-21/bin/clang-offload-bundler --unbundle --type=o --input="$b" \
      --targets="$2" --output="$b.co"
  llvm-readelf-21 -h "$b.co" | sed -n 's/^ *Flags: *//p'
  llvm-readelf-21 --symbols --wide "$b.co" | awk '$4 == "FUNC" { print "kernel", $3, $8 }'
done
"""


def gpu_code(build: HipBuild, tmp_path: Path) -> list[dict[str, object]]:
    """The bundles of libggml-hip.so's GPU code: their targets, the code objects' ELF flags
    and their kernels' sizes by mangled name."""
    work = tmp_path / "gpu"
    work.mkdir()
    lib = f"{build.action.dest}/libggml-hip.so.0"
    binds = [*build.binds(), (work, "/gpu")]
    sid.run_in_chroot(build.chroot, ["sh", "-c", READ_GPU_CODE, "sh", lib], binds=binds)
    data = (work / "fatbin").read_bytes()
    starts = [m.start() for m in re.finditer(re.escape(BUNDLE_MAGIC), data)]
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(data)
        (work / f"bundle-{i:04d}").write_bytes(data[start:end])
    out = sid.run_in_chroot(build.chroot, ["sh", "-c", LIST_BUNDLES, "sh", lib, HIP_TRIPLE],
                            binds=binds, timeout=600).stdout
    bundles: list[dict[str, object]] = []
    for line in out.splitlines():
        if line.startswith("== "):
            bundles.append({"targets": set(), "flags": "", "kernels": {}})
        elif line.startswith("kernel "):
            _, size, name = line.split()
            bundles[-1]["kernels"][name] = int(size)
        elif "gfx" in line and "," in line:  # the ELF header's flags: "0x43, gfx1150"
            bundles[-1]["flags"] = line.strip()
        elif line.strip():
            bundles[-1]["targets"].add(line.strip())
    return bundles


@pytest.mark.hip_build
def test_the_gpu_code_is_for_gfx1150_with_the_families_the_definitions_ask(
        hip_build: HipBuild, tmp_path: Path) -> None:
    """libggml-hip.so holds GPU code for gfx1150 and no other target, one bundle for every HIP
    source file; the quantized matrix multiplication (MMQ) is compiled in full, and the
    flash-attention kernels, which GGML_CUDA_FA=OFF leaves out, are stubs."""
    bundles = gpu_code(hip_build, tmp_path)
    # ggml-cuda's sources and its template instances (none when the bundles were compressed)
    assert len(bundles) >= 60, bundles
    for b in bundles:
        assert b["targets"] == {HIP_TRIPLE, "host-x86_64-unknown-linux-gnu-"}, b["targets"]
        assert b["flags"].endswith(f", {GPU_TARGET}"), b["flags"]
    kernels: dict[str, int] = {}
    for b in bundles:
        kernels.update(b["kernels"])
    mmq = {k: v for k, v in kernels.items() if re.match(r"_ZL?\d+mul_mat_qI", k)}
    fa = {k: v for k, v in kernels.items()
          if any(re.match(rf"_ZL?\d+{n}I", k) for n in FA_KERNELS)}
    assert len(mmq) >= 50 and len(fa) >= 20, (len(mmq), len(fa))
    print(f"{len(bundles)} bundles, {len(kernels)} kernels; MMQ {len(mmq)}: "
          f"{min(mmq.values())} to {max(mmq.values())} bytes; flash attention {len(fa)}: "
          f"{min(fa.values())} to {max(fa.values())} bytes")
    # MMQ compiled in full: thousands of bytes of code for each tile size gfx1150 takes (the
    # others are stubs, as in any build); every flash-attention kernel a stub no larger
    full = [v for v in mmq.values() if v > 1000]
    assert len(full) >= 50, sorted(mmq.values())[-5:]
    assert max(fa.values()) <= min(mmq.values()) < 100, (sorted(fa.values())[-5:],
                                                         sorted(mmq.values())[:5])


@pytest.mark.hip_build
def test_version_and_help_without_a_gpu(hip_build: HipBuild) -> None:
    ver = in_chroot(hip_build, [SERVER_IN, "--version"])
    assert "version: 0.6.0-dev (build 11434, commit" in ver.stderr
    helped = in_chroot(hip_build, [SERVER_IN, "--help"])
    assert "--spec-type" in helped.stdout and "--model-draft" in helped.stdout


@pytest.mark.hip_build
def test_ojais_dialect_probe_accepts_it(hip_build: HipBuild) -> None:
    probe = hip_build.run_ojai("probe", SERVER_IN)
    assert probe["kind"] == "Dialect", probe
    assert probe["version"]["build"] == 11434
    assert "draft-mtp" in probe["spec_types"]


@pytest.mark.hip_build
def test_applying_the_plan_again_changes_nothing(hip_build: HipBuild, tmp_path: Path) -> None:
    state = tmp_path / "var-lib-ojai"  # keep the cached machine's journal as the build left it
    state.mkdir()
    again = hip_build.run_ojai("apply", "/src/plan.json", "llama.cpp",
                               binds=[(state, "/var/lib/ojai")])
    assert again["changed"] is False
    assert again["actions"][0]["message"] == f"{hip_build.action.dest} already holds this build"


def test_todays_plan_still_holds_the_cached_build(hip_toolchain: HipBuild, tmp_path: Path) -> None:
    """The cached build came from a plan made once; ojai's planning as it is now, on the same
    machine with the chroot's toolchain, still plans that build (a warm run would otherwise
    never notice that planning it stopped working)."""
    now = planned_action(plan_file(hip_toolchain.chroot, tmp_path / "plan.json"))
    assert now == hip_toolchain.action


# -- real but incomplete toolchains ----------------------------------------------------------
def seeded_machine(tmp_path: Path) -> Path:
    """A machine whose /opt/ojai holds an earlier llama.cpp install with the link on it."""
    machine = tmp_path / "machine"
    prev = machine / "opt/ojai/llama.cpp/b1-cpu"
    prev.mkdir(parents=True)
    (prev / "llama-server").write_text("#!/bin/sh\necho previous\n")
    (machine / "opt/ojai/llama.cpp/current").symlink_to("b1-cpu")
    return machine


def build_in_chroot(build: HipBuild, machine: Path, tmp_path: Path,
                    hide: list[tuple[Path, str]]) -> dict:
    (tmp_path / "action").mkdir()
    (tmp_path / "action/action.json").write_text(build.action.model_dump_json())
    return build.run_ojai("build", "/action/action.json", machine=machine,
                          binds=[(tmp_path / "action", "/action"), *hide])


def assert_untouched(machine: Path) -> None:
    folder = machine / "opt/ojai/llama.cpp"
    assert sorted(p.name for p in folder.iterdir()) == ["b1-cpu", "current"]
    assert (folder / "current").readlink() == Path("b1-cpu")


def test_hidden_hipblas_names_debians_package(hip_toolchain: HipBuild, tmp_path: Path) -> None:
    machine = seeded_machine(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = build_in_chroot(hip_toolchain, machine, tmp_path,
                             [(empty, "/usr/lib/x86_64-linux-gnu/cmake/hipblas")])
    assert result["error"] == "ToolchainError", result
    assert "no hipblas-config.cmake under /usr" in result["message"]
    assert "install from Debian's packages (tested: Debian unstable, ROCm 6.4): sudo apt " \
           "install libhipblas-dev;" in result["message"]
    assert_untouched(machine)


def test_hidden_hipconfig_names_the_compiler_package(hip_toolchain: HipBuild,
                                                     tmp_path: Path) -> None:
    machine = seeded_machine(tmp_path)
    not_a_program = tmp_path / "hipconfig"
    not_a_program.write_text("")  # not executable: as if hipcc were not installed
    result = build_in_chroot(hip_toolchain, machine, tmp_path, [(not_a_program, "/usr/bin/hipconfig")])
    assert result["error"] == "ToolchainError", result
    assert "no hipconfig on this machine" in result["message"]
    assert "sudo apt install hipcc;" in result["message"]
    assert_untouched(machine)


def test_a_target_the_real_clang_lacks(hip_toolchain: HipBuild, tmp_path: Path) -> None:
    """clang 21 knows every Ryzen AI and discrete target; gfx9999 stands for one it does not."""
    machine = seeded_machine(tmp_path)
    (tmp_path / "action").mkdir()
    (tmp_path / "action/action.json").write_text(
        hip_toolchain.action.model_copy(update={"gpu_target": "gfx1150,gfx9999"}).model_dump_json())
    result = hip_toolchain.run_ojai("build", "/action/action.json", machine=machine,
                                binds=[(tmp_path / "action", "/action")])
    assert result["error"] == "ToolchainError", result
    assert "/usr/lib/llvm-21/bin/clang cannot compile for gfx9999" in result["message"]
    assert "gfx1150," not in result["message"].split("cannot compile for")[1].split("(")[0]
    assert_untouched(machine)


def test_checkout_is_what_runs_inside(hip_toolchain: HipBuild) -> None:
    """The chroot runs this checkout's ojai, not an installed copy."""
    res = in_chroot(hip_toolchain, ["/venv/bin/python", "-c",
                                "import ojai_setup, sys; print(ojai_setup.__file__)"],
                    env={"PYTHONPATH": IN_CHECKOUT})
    assert res.stdout.strip() == f"{IN_CHECKOUT}/ojai_setup/__init__.py"
