"""A machine is a directory.

Every path ojai reads or writes goes through one :class:`Root`. With the default root ``/``
the host is read and host commands run. Under any other root the machine's commands do not
run: :meth:`Root.run` answers them from a capture stored inside the root (see
:data:`COMMANDS_DIR`), so that a test machine or a replayed bug report gives exactly the answers
the real machine gave. The few host programs that run against a root by design (bash sourcing
its GRUB files, ``systemd-sysusers --root``, a source build's tools) are listed in the README,
"What runs under ``--root``".

Capture layout, for a command ``flm validate --json``::

    <root>/.ojai/commands/flm validate --json/stdout
    <root>/.ojai/commands/flm validate --json/stderr    (optional)
    <root>/.ojai/commands/flm validate --json/exit_code (optional, default 0)

A command with no capture is "not installed" (exit code 127). The key is the program's base
name followed by its arguments, joined by single spaces. A program that lives inside the root
itself (a ``llama-server`` under ``<root>/opt/ojai``) is answered from its captures too: it is
executed on this host only when the person asks for it (``OJAI_RUN_ROOT_PROGRAMS=1``, or
``Root(path, run_programs=True)``), since it may be another machine's binary, or anything.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import NamedTuple

COMMANDS_DIR = ".ojai/commands"
NOT_FOUND = 127
#: set to 1 to let ojai execute programs found inside a ``--root`` machine on this host
RUN_ROOT_PROGRAMS_ENV = "OJAI_RUN_ROOT_PROGRAMS"


class CommandResult(NamedTuple):
    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str = ""
    source: str = "host"  # "host", "capture", "root-binary" or "missing"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def found(self) -> bool:
        return self.exit_code != NOT_FOUND


def command_key(argv: list[str] | tuple[str, ...]) -> str:
    """The directory name a capture of ``argv`` is stored under."""
    if not argv:
        raise ValueError("empty command")
    parts = [PurePosixPath(argv[0]).name, *argv[1:]]
    key = " ".join(parts)
    if "/" in key or key in {".", ".."} or "\0" in key:
        key = key.replace("/", "%2F")
    raw = key.encode("utf-8", "surrogateescape")
    if len(raw) > _KEY_BYTES:  # a file name holds 255 bytes: the rest becomes a digest of it
        head = raw[:_KEY_BYTES - 18].decode("utf-8", "ignore").rstrip()
        key = f"{head} #{hashlib.sha256(raw).hexdigest()[:16]}"
    return key


#: the longest capture folder name kept whole (file systems allow 255 bytes)
_KEY_BYTES = 240
#: this computer's own root
_HOST = Path("/")


class Root:
    """Resolves machine paths under a root directory and runs (or replays) commands."""

    def __init__(self, path: str | os.PathLike[str] = "/", *, timeout: float = 30.0,
                 run_programs: bool | None = None) -> None:
        self.path = Path(path).resolve() if str(path) != "/" else Path("/")
        self.timeout = timeout
        #: whether a program inside this (non-host) root may be executed on the host
        self.run_programs = (os.environ.get(RUN_ROOT_PROGRAMS_ENV, "").strip() in ("1", "yes",
                                                                                  "true")
                             if run_programs is None else run_programs)
        #: every file path read, found by a glob, and every command run (``doctor --capture``)
        self.reads: list[str] = []
        self.found: list[str] = []
        self.commands: list[CommandResult] = []

    # -- paths -------------------------------------------------------------------------------
    @property
    def is_host(self) -> bool:
        return self.path == _HOST

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Root({str(self.path)!r})"

    def __truediv__(self, machine_path: str) -> Path:
        return self.resolve(machine_path)

    def resolve(self, machine_path: str | os.PathLike[str]) -> Path:
        """The real path of an absolute machine path (``/etc/default/grub``)."""
        p = PurePosixPath(str(machine_path))
        if not p.is_absolute():
            raise ValueError(f"machine paths are absolute, got {machine_path!r}")
        if ".." in p.parts:
            raise ValueError(f"machine path may not contain '..': {machine_path!r}")
        if self.is_host:
            return Path(p)
        # the root's folder, then the machine path's parts (as joinpath(*p.parts[1:]) gives)
        return Path(f"{self.path}/{p}") if len(p.parts) > 1 else self.path.joinpath()

    def machine_path(self, real: str | os.PathLike[str]) -> str:
        """The inverse of :meth:`resolve`."""
        real = Path(real)
        if self.is_host:
            return str(real)
        rel = real.relative_to(self.path)
        return "/" + rel.as_posix() if str(rel) != "." else "/"

    def exists(self, machine_path: str) -> bool:
        return self.resolve(machine_path).exists()

    def read_text(self, machine_path: str) -> str:
        """Read a text file exactly (line ends kept); raises OSError as open() does."""
        self.reads.append(machine_path)
        return self.resolve(machine_path).read_bytes().decode("utf-8", errors="replace")

    def read_bytes(self, machine_path: str) -> bytes:
        self.reads.append(machine_path)
        return self.resolve(machine_path).read_bytes()

    def glob(self, pattern: str) -> list[str]:
        """Machine paths matching an absolute glob pattern, sorted."""
        if not pattern.startswith("/"):
            raise ValueError("glob patterns are absolute")
        base = self.resolve("/")
        found = [self.machine_path(f) for f in sorted(base.glob(pattern.lstrip("/")))]
        self.found.extend(found)
        return found

    # -- commands ----------------------------------------------------------------------------
    def which(self, program: str) -> str | None:
        """Whether ``program`` is available on this machine (a capture counts)."""
        if self.is_host:
            return shutil.which(program)
        captures = self.resolve("/") / COMMANDS_DIR
        if captures.is_dir():
            prefix = PurePosixPath(program).name
            for name in os.listdir(captures):
                if name == prefix or name.startswith(prefix + " "):
                    return program
        if program.startswith("/") and os.access(self.resolve(program), os.X_OK):
            return program
        return None

    @staticmethod
    def host_which(program: str) -> str | None:
        """Where ``program`` is on this computer: for the programs ojai runs here against any
        root by design (``systemd-sysusers --root``, ``useradd --root``, a source build's cmake,
        compilers and git), which the root's captures cannot stand in for."""
        return shutil.which(program)

    def run(self, argv: list[str], *, env: dict[str, str] | None = None,
            timeout: float | None = None) -> CommandResult:
        """Run a command on the host, or replay it from the root's captures."""
        argv = [str(a) for a in argv]
        result = self._run(argv, env=env, timeout=timeout)
        self.commands.append(result)
        return result

    def _run(self, argv: list[str], *, env: dict[str, str] | None,
             timeout: float | None) -> CommandResult:
        if not self.is_host:
            if argv[0].startswith("/") and self.run_programs:
                real = self.resolve(argv[0])
                if real.is_file() and os.access(real, os.X_OK):
                    return self._exec([str(real), *argv[1:]], argv, env, timeout, "root-binary")
            return self.replay(argv)
        if shutil.which(argv[0]) is None and not os.access(argv[0], os.X_OK):
            return CommandResult(tuple(argv), NOT_FOUND, "", f"{argv[0]}: not found", "missing")
        return self._exec(argv, argv, env, timeout, "host")

    def _exec(self, real_argv: list[str], argv: list[str], env: dict[str, str] | None,
              timeout: float | None, source: str) -> CommandResult:
        full_env = dict(os.environ)
        full_env.setdefault("LC_ALL", "C")
        if env:
            full_env.update(env)
        try:
            proc = subprocess.run(real_argv, capture_output=True, text=True, errors="replace",
                                  env=full_env, timeout=timeout or self.timeout,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            return CommandResult(tuple(argv), NOT_FOUND, "", f"{argv[0]}: not found", "missing")
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return CommandResult(tuple(argv), 124, out, f"timed out after {exc.timeout} s", source)
        except OSError as exc:
            return CommandResult(tuple(argv), 126, "", str(exc), source)
        return CommandResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr, source)

    def replay(self, argv: list[str]) -> CommandResult:
        d = self.resolve("/") / COMMANDS_DIR / command_key(argv)
        if not d.is_dir():
            return CommandResult(tuple(argv), NOT_FOUND, "", f"{argv[0]}: not found", "missing")

        def _read(name: str) -> str:
            f = d / name
            return f.read_text(encoding="utf-8", errors="replace") if f.is_file() else ""

        code_text = _read("exit_code").strip()
        try:
            code = int(code_text) if code_text else 0
        except ValueError:
            code = 1
        return CommandResult(tuple(argv), code, _read("stdout"), _read("stderr"), "capture")
