"""Carrying out a :class:`~ojai_setup.model.actions.BuildFromSource`: fetch the source, configure and
build ``llama-server`` with CMake (progress from the build's own percentages), stage, record
and switch the ``current`` link. The decisions (CMake arguments, install records) are
:mod:`ojai_setup.domain.build`."""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from ojai_setup.apply.executor import ActionOutcome, fault_point
from ojai_setup.apply.links import check_link_slot, swap_in, switch_link
from ojai_setup.core.atomic import ensure_dir
from ojai_setup.core.digest import sha256_file
from ojai_setup.core.paths import DIR_MODE, EXEC_MODE, FILE_MODE
from ojai_setup.core.progress import Progress
from ojai_setup.core.root import Root
from ojai_setup.domain.build import (
    _SHA,
    INSTALL_RECORD,
    SERVER,
    BuildError,
    InstallRecord,
    build_number_from_ref,
    cmake_configure_args,
    parse_cmake_options,
)
from ojai_setup.facts.llama_install import is_built
from ojai_setup.formats.llama_help import DialectParseError, parse_version
from ojai_setup.model.actions import BuildFromSource, is_git_url

LOG_TAIL_LINES = 40


_PERCENT = re.compile(r"^\[\s*(\d{1,3})%\]")


def parse_build_progress(line: str) -> int | None:
    """The percentage of a CMake build line ``[ 42%] Building ...``."""
    m = _PERCENT.match(line)
    return min(int(m.group(1)), 100) if m else None


def find_source_root(top: Path, max_depth: int = 3) -> Path:
    """The llama.cpp source root at or below ``top`` (an sdist nests it under ``llama.cpp/``)."""
    level = [top]
    for _ in range(max_depth + 1):
        for d in level:
            if (d / "CMakeLists.txt").is_file() and (d / "include" / "llama.h").is_file():
                return d
        level = [c for d in level for c in sorted(d.iterdir())
                 if c.is_dir() and not c.is_symlink() and not c.name.startswith(".")]
    raise BuildError(f"no llama.cpp source (CMakeLists.txt and include/llama.h) found in {top}")


def source_cmake_options(src: Path) -> set[str]:
    """Options declared by llama.cpp's and ggml's top CMakeLists.txt."""
    names: set[str] = set()
    for f in (src / "CMakeLists.txt", src / "ggml" / "CMakeLists.txt"):
        if f.is_file():
            names |= parse_cmake_options(f.read_text(encoding="utf-8", errors="replace"))
    return names


def extract_tarball(archive: Path, target: Path) -> None:
    """Unpack ``archive`` into ``target``, refusing any entry that would land outside it."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar.getmembers():
                parts = Path(member.name).parts
                if member.name.startswith("/") or ".." in parts:
                    raise BuildError(f"{archive.name}: refusing entry {member.name!r} outside the "
                                     "extraction folder")
            tar.extractall(target, filter="data")
    except tarfile.FilterError as exc:
        raise BuildError(f"{archive.name}: refusing unsafe entry: {exc}") from exc
    except (tarfile.TarError, EOFError) as exc:
        raise BuildError(f"{archive.name}: not a readable tarball: {exc}") from exc


def _cpu_since(before: resource.struct_rusage) -> float:
    """Processor seconds (user + system) of the child processes reaped since ``before``."""
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (now.ru_utime - before.ru_utime) + (now.ru_stime - before.ru_stime)


def tree_bytes(path: Path) -> int:
    """The bytes of the files under ``path`` (symlinks count as themselves)."""
    total = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total



# -- running ---------------------------------------------------------------------------------
class _Log:
    """The build log: every line of every command, plus the last lines for error messages."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        os.fchmod(fd, FILE_MODE)
        self._file = os.fdopen(fd, "w", encoding="utf-8")

    def write(self, line: str) -> None:
        self._file.write(line if line.endswith("\n") else line + "\n")
        self._file.flush()
        self.tail.append(line.rstrip("\n"))

    def close(self) -> None:
        self._file.close()

    def failure(self, what: str) -> BuildError:
        tail = "\n".join(self.tail)
        return BuildError(f"{what}; the previous install is unchanged. Last lines of "
                          f"{self.path}:\n{tail}")

    def run(self, argv: list[str], *, what: str, cwd: Path | None = None,
            env: dict[str, str] | None = None,
            on_line: Callable[[str], None] | None = None) -> None:
        """Run ``argv`` on the host, streaming its output into the log; raise on failure."""
        self.write("$ " + shlex.join(argv))
        full_env = {**os.environ, "LC_ALL": "C", **(env or {})}
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace", bufsize=1)
        except OSError as exc:
            self.write(str(exc))
            raise self.failure(f"{what}: cannot run {argv[0]} ({exc.strerror})") from exc
        assert proc.stdout is not None
        try:
            with proc.stdout:
                for line in proc.stdout:
                    self.write(line)
                    if on_line:
                        on_line(line)
        except BaseException:
            # interrupted (Ctrl-C, a failing progress callback): do not leave the build running
            proc.kill()
            proc.wait()
            raise
        code = proc.wait()
        if code != 0:
            raise self.failure(f"{what} failed (exit {code})")


@dataclass(frozen=True)
class _Source:
    top: Path
    kind: Literal["directory", "tarball", "git"]
    sha256: str | None = None
    git_commit: str | None = None




def _fetch_source(root: Root, action: BuildFromSource, work: Path, log: _Log,
                  progress: Progress) -> _Source:
    """Put the source under ``work`` (a directory source is used where it is)."""
    source = action.source
    if is_git_url(source):
        if re.search(r"\.(tar(\.\w+)?|tgz)$", source):
            raise BuildError(f"{source}: download source tarballs first and check their sha256; "
                             "the build takes a local path or a git URL")
        top = work / "src"
        env = {"GIT_TERMINAL_PROMPT": "0"}
        task = progress.task(f"clone {source}", None)
        if action.ref and _SHA.match(action.ref):
            log.run(["git", "init", "--quiet", str(top)], what="git init", env=env)
            log.run(["git", "-C", str(top), "fetch", "--depth", "1", source, action.ref],
                    what=f"fetching {action.ref} from {source}", env=env)
            log.run(["git", "-C", str(top), "checkout", "--quiet", "--detach", "FETCH_HEAD"],
                    what="git checkout", env=env)
        else:
            branch = ["--branch", action.ref] if action.ref else []
            log.run(["git", "clone", "--depth", "1", *branch, source, str(top)],
                    what=f"cloning {source}", env=env)
        task.done()
        head = subprocess.run(["git", "-C", str(top), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=False)
        return _Source(top, "git", git_commit=head.stdout.strip() if head.returncode == 0 else None)
    real = root.resolve(source)
    if real.is_dir():
        return _Source(real, "directory")
    if real.is_file():
        digest = sha256_file(real)
        top = work / "src"
        top.mkdir()
        task = progress.task(f"unpack {real.name}", None)
        extract_tarball(real, top)
        task.done()
        return _Source(top, "tarball", sha256=digest)
    raise BuildError(f"source {source} does not exist (expected a directory, a tarball or a "
                     "git URL)")


def _stage(build_bin: Path, stage: Path) -> list[str]:
    """Copy llama-server and the shared libraries beside it; symlinks stay symlinks."""
    server = build_bin / SERVER
    if not server.is_file():
        raise BuildError(f"the build finished but {server} is missing")
    stage.mkdir()
    stage.chmod(DIR_MODE)
    names = [SERVER]
    shutil.copy2(server, stage / SERVER)
    (stage / SERVER).chmod(EXEC_MODE)  # the build's own mode followed its umask
    for lib in sorted(build_bin.glob("lib*.so*")):
        if lib.is_symlink():
            (stage / lib.name).symlink_to(os.readlink(lib))
        elif lib.is_file():
            shutil.copy2(lib, stage / lib.name)
            (stage / lib.name).chmod(EXEC_MODE)
        names.append(lib.name)
    return names


def _check_libraries(stage: Path, forbidden: Path, log: _Log) -> None:
    """Every library the staged binary needs must resolve, and none from the build tree."""
    try:
        res = subprocess.run(["ldd", str(stage / SERVER)], capture_output=True, text=True,
                             check=False, env={**os.environ, "LC_ALL": "C"})
    except OSError as exc:
        raise BuildError(f"cannot run ldd to check the built llama-server: {exc}") from exc
    for line in res.stdout.splitlines():
        log.write("ldd: " + line.strip())
    missing = [line.split()[0] for line in res.stdout.splitlines() if "not found" in line]
    if res.returncode != 0 or missing:
        raise log.failure("the built llama-server cannot find its libraries: "
                          + (", ".join(missing) or res.stderr.strip()))
    leaked = [line.strip() for line in res.stdout.splitlines() if str(forbidden) in line]
    if leaked:
        raise log.failure("the built llama-server loads libraries from the build tree "
                          f"(RPATH is not $ORIGIN): {leaked[0]}")


def execute_build_from_source(root: Root, action: BuildFromSource,
                              progress: Progress) -> ActionOutcome:
    """Carry out a :class:`~ojai_setup.model.actions.BuildFromSource` action (see the module doc)."""
    dest = root.resolve(action.dest)
    link = root.resolve(action.link) if action.link else None
    if link is not None:
        check_link_slot(link, BuildError)
    if is_built(root, action):
        relinked = link is not None and switch_link(link, dest, BuildError)
        return ActionOutcome(changed=relinked, message=f"{action.dest} already holds this build"
                             + (f"; {action.link} now points at it" if relinked else ""))
    toolchain = None
    if action.backend == "hip":
        if not action.gpu_target:
            raise BuildError("a HIP build needs a GPU target such as gfx1150")
        from ojai_setup.apply.toolchain import check_hip_toolchain

        # before anything is written: a missing or too old toolchain names what to install
        toolchain = check_hip_toolchain(root, action.gpu_target)
    elif action.backend == "vulkan":
        from ojai_setup.apply.toolchain import vulkan_toolchain_error

        missing = vulkan_toolchain_error(root)
        if missing is not None:  # before anything is written
            raise BuildError(f"{missing}; nothing was written for this build")
    started = time.monotonic()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    ensure_dir(dest.parent, DIR_MODE)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.build-", dir=dest.parent))
    log = _Log(dest.parent / f"{dest.name}.build.log")
    try:
        src = _fetch_source(root, action, work, log, progress)
        top = find_source_root(src.top)
        args = cmake_configure_args(action.backend, action.gpu_target,
                                    source_options=source_cmake_options(top),
                                    build_number=build_number_from_ref(action.ref),
                                    extra=action.cmake_args)
        env = dict(action.env)
        if toolchain is not None:
            env = {**toolchain.env(), **env}
        if src.kind != "git":
            # an unpacked tarball is no git checkout: keep cmake's git probe from finding an
            # enclosing repository and stamping its commit into the build
            env.setdefault("GIT_CEILING_DIRECTORIES", str(src.top.parent))
        build = work / "build"
        configure = progress.task("configure llama.cpp", None)
        log.run(["cmake", "-S", str(top), "-B", str(build), *args], what="cmake configure",
                env=env)
        configure.done()

        compile_task = progress.task("build llama-server", 100)

        def on_line(line: str) -> None:
            pct = parse_build_progress(line)
            if pct is not None:
                compile_task.update(completed=pct)

        jobs = max(1, len(os.sched_getaffinity(0)))
        log.run(["cmake", "--build", str(build), "--target", SERVER, f"-j{jobs}"],
                what="building llama-server", env=env, on_line=on_line)
        compile_task.done()

        build_bytes = tree_bytes(work)
        stage = work / "stage"
        files = _stage(build / "bin", stage)
        _check_libraries(stage, build, log)
        # built on this host by this host's compiler a moment ago: run it here, also under --root
        built_here = root if root.is_host else Root(root.path, run_programs=True)
        ver = built_here.run([root.machine_path(stage / SERVER), "--version"])
        try:
            version = parse_version(ver.stderr + "\n" + ver.stdout)
        except DialectParseError as exc:
            log.write(ver.stderr + ver.stdout)
            raise log.failure(f"the built llama-server does not run (exit {ver.exit_code})") from exc
        record = InstallRecord(
            source=action.source, source_kind=src.kind, source_sha256=src.sha256,
            git_commit=src.git_commit, ref=action.ref, backend=action.backend,
            gpu_target=action.gpu_target, cmake_args=tuple(args),
            extra_cmake_args=action.cmake_args, version=version.raw,
            build_number=version.build, files=tuple(files),
            built_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            build_seconds=round(time.monotonic() - started, 1),
            cpu_seconds=round(_cpu_since(children), 1), build_bytes=build_bytes, cores=jobs,
        )
        (stage / INSTALL_RECORD).write_text(
            json.dumps(record.model_dump(mode="json"), indent=2, sort_keys=True) + "\n",
            encoding="utf-8")
        (stage / INSTALL_RECORD).chmod(FILE_MODE)
        fault_point("rename")
        swap_in(stage, dest, work / "previous")
        if link is not None:
            switch_link(link, dest, BuildError)
        log.write(f"installed {action.dest}: {version.raw}")
        return ActionOutcome(changed=True, message=f"built {version.label()} into {action.dest}")
    finally:
        log.close()
        shutil.rmtree(work, ignore_errors=True)
