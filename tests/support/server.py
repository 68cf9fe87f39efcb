"""Start a real llama-server (or a launch script that runs one) for a test, and always stop it.

The server listens on 127.0.0.1 on a free port. :func:`serve` runs any command that ends up
serving there (a rendered launch script, say); :func:`llama_server` builds the command from a
binary and its arguments. Both wait for ``GET /health`` to answer 200 (it answers 503 while the
model loads) and, on the way out, terminate the whole process group, then kill it if it does
not exit within a bounded wait.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["THREADS", "RunningServer", "ServerError", "free_port", "llama_server", "serve"]

HOST = "127.0.0.1"
#: the CPU threads of each llama-server the tests start (``--threads``; ``tests/conftest.py``
#: sets ``LLAMA_ARG_THREADS`` to it for the servers started without the option, lemond's among
#: them). One, not the two cores: the tests run on two workers beside a guest under TCG, and
#: ggml's threads wait for each other at every operation of a token, spinning, so two threads
#: sharing what is left of a core take turns by the scheduler's time slice. Measured on this
#: 2-core machine during a ``.ci/run`` (Gemma 3 270M, 3 x 64 tokens): one thread 7.9-10.2 s
#: and 8.5-9.0 processor seconds, two 14.2-38.3 s and 20.6-26.2. Speeds are the benchmarks'
#: business (they pass their own count, on an idle machine).
THREADS = 1


class ServerError(RuntimeError):
    """The server exited, or did not become healthy in time; the message ends with its log."""


#: the ports :func:`free_port` hands out to each pytest-xdist worker (``gw0``, ``gw1``, ...)
PORTS_PER_WORKER = 2000


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (``bind(0)``, outgoing connections)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    A test often chooses its port well before a server binds it (it goes into a plan, then a
    launch script). A port from ``bind(0)`` is one the kernel hands out again, to the other
    worker's ``bind(0)`` or to any outgoing connection, and was seen taken in between. So the
    port comes from below the kernel's ephemeral range, from a band of this worker's own
    (``PYTEST_XDIST_WORKER``): only this worker's own earlier servers could hold it, and those
    are stopped before its next test."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    top = _ephemeral_low()
    low = top - PORTS_PER_WORKER * (index + 1)
    if low < 10000:  # a machine whose ephemeral range starts low: the kernel's choice
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            return int(sock.getsockname()[1])
    for port in random.sample(range(low, low + PORTS_PER_WORKER), PORTS_PER_WORKER):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
            return port
    raise ServerError(f"no free port on {HOST} in {low}-{low + PORTS_PER_WORKER - 1}")


@dataclass(frozen=True)
class RunningServer:
    """A healthy server: where it listens, its process and the file its output goes to."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log(self) -> str:
        """Everything the server printed so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, str]:
        """``GET path``: the status code and body, also for error statuses."""
        return _request(urllib.request.Request(self.url + path), timeout)

    def post_json(self, path: str, payload: Mapping[str, Any], timeout: float = 120.0) -> dict[str, Any]:
        """``POST path`` with a JSON body; the decoded JSON answer. Raises on a non-200 status."""
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        status, body = _request(request, timeout)
        if status != 200:
            raise ServerError(f"POST {path} answered {status}: {body}")
        answer: dict[str, Any] = json.loads(body)
        return answer


def _request(request: urllib.request.Request, timeout: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode(errors="replace")


def _tail(log_path: Path, n_lines: int = 60) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(lines[-n_lines:])


def _wait_healthy(server: RunningServer, ready_timeout: float) -> None:
    deadline = time.monotonic() + ready_timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        code = server.process.poll()
        if code is not None:
            raise ServerError(f"server exited with {code} before it was healthy:\n{_tail(server.log_path)}")
        try:
            status, body = server.get("/health", timeout=2.0)
        except (ConnectionError, TimeoutError, urllib.error.URLError) as err:
            last = str(err)
        else:
            if status == 200:
                return
            last = f"{status} {body.strip()}"
        time.sleep(0.05)
    raise ServerError(f"/health not 200 after {ready_timeout:.0f} s (last: {last}):\n{_tail(server.log_path)}")


def _group_gone(process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait up to ``timeout`` s for every process of the server's group to be gone."""
    deadline = time.monotonic() + timeout
    while True:
        process.poll()  # reap the group leader once it exits
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes], stop_timeout: float) -> None:
    """Terminate the server's process group (a launch script and its children included);
    kill whatever is left after ``stop_timeout`` s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        if _group_gone(process, stop_timeout):
            return
    raise ServerError(f"process group {process.pid} survived SIGKILL for {stop_timeout:.0f} s")


@contextmanager
def serve(
    command: Sequence[str | os.PathLike[str]],
    port: int,
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 120.0,
    stop_timeout: float = 10.0,
) -> Iterator[RunningServer]:
    """Run ``command`` (expected to serve on 127.0.0.1:``port``) until the block ends.

    Yields once ``GET /health`` answers 200. The command runs in its own session (process
    group), so a launch script and the server it starts are stopped together.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [os.fspath(part) for part in command],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    try:
        server = RunningServer(port=port, process=process, log_path=log_path)
        _wait_healthy(server, ready_timeout)
        yield server
    finally:
        _stop(process, stop_timeout)


@contextmanager
def llama_server(
    binary: Path,
    args: Sequence[str],
    log_dir: Path,
    *,
    ready_timeout: float = 120.0,
    stop_timeout: float = 10.0,
) -> Iterator[RunningServer]:
    """Run ``binary args --host 127.0.0.1 --port <free>`` with its log in ``log_dir/llama-server.log``."""
    port = free_port()
    command = [os.fspath(binary), *args, "--host", HOST, "--port", str(port)]
    with serve(
        command,
        port,
        log_dir / "llama-server.log",
        ready_timeout=ready_timeout,
        stop_timeout=stop_timeout,
    ) as server:
        yield server
