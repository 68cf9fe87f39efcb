"""The servers a benchmark runs against: the routes ojai wrote, or servers given by URL.

A route's launch script (``/opt/ojai/routes/<route>.sh``, rendered by ``ojai setup``) is read
back into its preamble (exports) and its ``exec`` command line. A benchmark that needs a
server which is not answering starts it itself, from that very script or from a copy with
some arguments changed (another port, another draft length), in its own process group; it
stops only the processes it started.

What a result records about each server: the exact command line, the binary's version, and
every model file with its size and sha256 (cached beside the file, keyed by size and mtime,
like the pairing metadata).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from ojai_setup.core.errors import OjaiError

from ojai_setup.measure.client import ClientError, Endpoint

__all__ = ["LaunchScript", "ModelFileInfo", "ServerInfo", "ServerPool", "free_port", "set_flag"]

MODEL_FLAGS = ("-m", "--model")
DRAFT_FLAGS = ("-md", "--model-draft", "--spec-draft-model")
PORT_FLAGS = ("--port",)
HOST_FLAGS = ("--host",)


class BenchError(OjaiError, RuntimeError):
    """A benchmark cannot run as asked; the text says why and what to do."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _join_continuations(text: str) -> str:
    """Drop the backslash-newline pairs the shell drops (outside quotes)."""
    out: list[str] = []
    quote = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote is None and ch == "\\" and i + 1 < len(text):
            if text[i + 1] != "\n":
                out.append(text[i:i + 2])
            i += 2
            continue
        if quote == '"' and ch == "\\" and i + 1 < len(text):
            out.append(text[i:i + 2])
            i += 2
            continue
        if ch in "'\"" and quote is None:
            quote = ch
        elif ch == quote:
            quote = None
        out.append(ch)
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class LaunchScript:
    """A launch script as ojai renders it: everything before ``exec``, then the command."""

    preamble: str
    argv: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, source: str = "launch script") -> LaunchScript:
        lines = text.split("\n")  # only newlines end a shell line (not str.splitlines' others)
        for i, line in enumerate(lines):
            if line.lstrip().startswith("exec "):
                command = "\n".join(lines[i:])
                try:
                    argv = shlex.split(_join_continuations(command.lstrip()[len("exec "):]))
                except ValueError as exc:
                    raise BenchError(f"{source}: cannot read its exec line: {exc}") from None
                return cls(preamble="\n".join(lines[:i]) + "\n", argv=tuple(argv))
        raise BenchError(f"{source}: no 'exec' line; is this a launch script ojai wrote?")

    def render(self) -> str:
        return self.preamble + "exec " + " ".join(shlex.quote(a) for a in self.argv) + "\n"

    def value(self, *flags: str) -> str | None:
        for i, arg in enumerate(self.argv[:-1]):
            if arg in flags:
                return self.argv[i + 1]
        return None

    def with_flag(self, flags: tuple[str, ...], value: str | None) -> LaunchScript:
        return LaunchScript(self.preamble, set_flag(self.argv, flags, value))


def set_flag(argv: tuple[str, ...] | list[str], flags: tuple[str, ...], value: str | None) -> tuple[str, ...]:
    """``argv`` with the option ``flags[0]`` (any spelling in ``flags``) set to ``value``
    (added at the end when absent; removed, with its value, when ``value`` is None)."""
    out: list[str] = []
    i, done = 0, False
    argv = list(argv)
    while i < len(argv):
        if argv[i] in flags and i + 1 < len(argv):
            if value is not None and not done:
                out += [argv[i], value]
                done = True
            i += 2
            continue
        out.append(argv[i])
        i += 1
    if value is not None and not done:
        out += [flags[0], value]
    return tuple(out)


class ModelFileInfo(BaseModel):
    role: str  # "main" | "draft"
    path: str
    size: int | None = None
    sha256: str | None = None
    error: str | None = None


class ServerInfo(BaseModel):
    """What a result keeps about one server."""

    arm: str
    url: str
    route: str | None = None
    started_by_bench: bool = False
    command: list[str] | None = None
    script: str | None = None
    binary: str | None = None
    version: str | None = None
    build_info: str | None = None
    slots: int | None = None
    model_path: str | None = None
    models: list[ModelFileInfo] = []
    draft_n_max: int | None = None
    draft_n_min: int | None = None
    #: ``--spec-type`` as the server was started with it (None when not known)
    spec_type: str | None = None
    #: the command line was read from the running process found listening on the URL's port
    command_from_process: bool = False
    #: the server answers ``/metrics`` with speculation counters
    metrics: bool = False
    synthetic_rates: list[float] | None = None
    synthetic_len: float | None = None


def digest_cache_dir() -> Path:
    """Where :func:`file_sha256` keeps the digests it computed: the invoking user's cache
    (``$XDG_CACHE_HOME/ojai/digests``, else ``~/.cache/ojai/digests``), never beside the file,
    whose folder (an install, a model folder) is not ojai's to add files to."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ojai" / "digests"


def file_sha256(path: Path) -> str:
    """sha256 of a file, its digest kept in :func:`digest_cache_dir` (keyed by the file's
    path, device, inode, size and modification time) when that folder can be written."""
    stat = path.stat()
    real = str(path.resolve())
    key = {"path": real, "dev": stat.st_dev, "ino": stat.st_ino, "size": stat.st_size,
           "mtime_ns": stat.st_mtime_ns}
    cache = digest_cache_dir() / f"{hashlib.sha256(real.encode()).hexdigest()[:32]}.json"
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if cached.get("key") == key and isinstance(cached.get("sha256"), str):
            return cached["sha256"]
    except (OSError, ValueError, AttributeError):
        pass
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    value = digest.hexdigest()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "sha256": value}), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass
    return value


def describe_models(argv: tuple[str, ...] | list[str]) -> list[ModelFileInfo]:
    """Every model file named on a command line, with its size and sha256 (the paths are the
    running process's own, so they are read on this host)."""
    script = LaunchScript("", tuple(argv))
    out = []
    for role, flags in (("main", MODEL_FLAGS), ("draft", DRAFT_FLAGS)):
        value = script.value(*flags)
        if value is None:
            continue
        real = Path(value)
        try:
            out.append(ModelFileInfo(role=role, path=value, size=real.stat().st_size,
                                     sha256=file_sha256(real)))
        except OSError as exc:
            out.append(ModelFileInfo(role=role, path=value, error=exc.strerror or str(exc)))
    return out


def binary_version(binary: str) -> str | None:
    """``binary --version``'s version line (llama-server prints it on stderr)."""
    from ojai_setup.formats.llama_help import DialectParseError, parse_version

    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    try:
        return parse_version(done.stderr + "\n" + done.stdout).label()
    except DialectParseError:
        return None


def _speculative_settings(argv: tuple[str, ...] | list[str], info: ServerInfo) -> None:
    script = LaunchScript("", tuple(argv))
    info.spec_type = script.value("--spec-type") or ("none" if not script.value(*DRAFT_FLAGS) else None)
    n_max = script.value("--spec-draft-n-max")
    n_min = script.value("--spec-draft-n-min")
    rates = script.value("--spec-synth-rates")
    length = script.value("--spec-synth-len")
    info.draft_n_max = int(n_max) if n_max else info.draft_n_max
    info.draft_n_min = int(n_min) if n_min else None
    info.synthetic_rates = [float(x) for x in rates.split(",")] if rates else None
    info.synthetic_len = float(length) if length else None


@dataclass
class _Started:
    process: subprocess.Popen
    log: Path
    script: Path | None


@dataclass
class ServerPool:
    """Servers a benchmark started; :meth:`close` stops exactly those (their process groups)."""

    log_dir: Path
    ready_timeout: float = 600.0
    stop_timeout: float = 15.0
    started: list[_Started] = field(default_factory=list)

    def start(self, script: LaunchScript, url: str, name: str) -> tuple[Endpoint, int]:
        """Run ``script`` (its preamble and exec line) in a new process group; wait for health.
        Returns the endpoint and the server's process id."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=".sh", dir=self.log_dir)
        with os.fdopen(fd, "w") as f:
            f.write(script.render())
        os.chmod(path, 0o755)
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(["bash", path], stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self.started.append(_Started(process, log, Path(path)))
        endpoint = Endpoint(url)
        try:
            endpoint.wait_healthy(self.ready_timeout, alive=lambda: process.poll() is None)
        except ClientError as exc:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            self.stop(process)
            raise BenchError(f"{name}: {exc}\n{tail}") from None
        return endpoint, process.pid

    def stop(self, process: subprocess.Popen) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + self.stop_timeout
            while time.monotonic() < deadline:
                process.poll()
                try:
                    os.killpg(process.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            else:
                continue
            break
        process.poll()
        for s in list(self.started):
            if s.process is process:
                self.started.remove(s)
                if s.script is not None:
                    s.script.unlink(missing_ok=True)

    def close(self) -> None:
        for s in list(reversed(self.started)):
            self.stop(s.process)

    def __enter__(self) -> ServerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cmdline_of(pid: int) -> list[str] | None:
    """The command line of a running process (the llama-server the script ``exec``'d)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    parts = raw.split(b"\0")
    return [p.decode("utf-8", "replace") for p in parts if p] or None


def listening_pid(port: int) -> int | None:
    """The process on this host that listens on TCP ``port`` (IPv4 or IPv6), found through
    ``/proc/net/tcp*`` and the processes' open sockets; None when it cannot be seen (another
    user's process, without root)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    return int(proc.name)
        except OSError:
            continue
    return None


def chat_template_of(path: str) -> bool | None:
    """Whether the GGUF file carries a chat template (``tokenizer.chat_template``); None when
    the file cannot be read."""
    try:
        import gguf

        reader = gguf.GGUFReader(path, "r")
    except Exception:  # not readable here, or not a GGUF file: not known
        return None
    return reader.get_field("tokenizer.chat_template") is not None


def describe_server(arm: str, endpoint: Endpoint, *, route: str | None = None,
                    argv: tuple[str, ...] | None = None, script: str | None = None,
                    started_by_bench: bool = False, pid: int | None = None,
                    draft_n_max: int | None = None) -> ServerInfo:
    props = endpoint.props()
    if pid is not None:
        # the launch script exec's the server; give it a moment to replace bash
        for _ in range(20):
            live = cmdline_of(pid)
            if live and Path(live[0]).name != "bash":
                argv = tuple(live)
                break
            time.sleep(0.05)
    from_process = False
    if argv is None and endpoint.host in ("127.0.0.1", "localhost", "::1"):
        found = listening_pid(endpoint.port)
        live = cmdline_of(found) if found else None
        if live:
            argv, from_process = tuple(live), True
    info = ServerInfo(arm=arm, url=endpoint.url, route=route, started_by_bench=started_by_bench,
                      command=list(argv) if argv else None, script=script,
                      build_info=props.get("build_info"), slots=props.get("total_slots"),
                      model_path=props.get("model_path"), draft_n_max=draft_n_max,
                      command_from_process=from_process,
                      metrics=bool(props.get("endpoint_metrics")) and endpoint.metrics() is not None)
    if argv:
        from ojai_setup.measure.kinds import version_of_build_info

        info.binary = argv[0]
        info.version = binary_version(argv[0]) or version_of_build_info(info.build_info)
        info.models = describe_models(argv)
        _speculative_settings(argv, info)
    elif info.model_path:
        from ojai_setup.measure.kinds import version_of_build_info

        info.version = version_of_build_info(info.build_info)
        real = Path(info.model_path)
        try:
            info.models = [ModelFileInfo(role="main", path=info.model_path, size=real.stat().st_size,
                                         sha256=file_sha256(real))]
        except OSError as exc:
            info.models = [ModelFileInfo(role="main", path=info.model_path, error=exc.strerror or str(exc))]
    return info
