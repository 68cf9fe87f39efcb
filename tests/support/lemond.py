"""The real Lemonade server (Debian unstable's ``lemonade-server``) run against a test machine.

``lemond`` runs inside the cached sid chroot (:mod:`support.sid`) with the environment its
Debian unit gives it (``STATE_DIRECTORY``, ``CACHE_DIRECTORY``, ``RUNTIME_DIRECTORY``) plus
``HF_HOME``, and with the test machine's folders bound in at the same machine paths:
``/var/lib/lemonade`` (the state folder holding the ``config.json``, ``user_models.json`` and
``recipe_options.json`` ojai wrote), ``/opt/ojai`` (ojai's llama-server) and
``/var/lib/ojai/models`` (ojai's model files). As the unit does (``User=lemonade``), it runs as
the chroot's ``lemonade`` user, so files that user cannot read fail to load here as they would
on a machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.server import THREADS, free_port
from support.sid import chroot_argv, ensure_sid_chroot, run_in_chroot

#: where the Debian unit's directories are (StateDirectory=lemonade, CacheDirectory=lemonade,
#: RuntimeDirectory=lemonade) and where the Hugging Face cache goes
STATE = "/var/lib/lemonade"
CACHE = "/var/cache/lemonade"
RUNTIME = "/run/lemonade"
HF_HOME = "/var/cache/huggingface"
#: the machine folders bound into the chroot
MACHINE_FOLDERS = ("/var/lib/lemonade", "/opt/ojai", "/var/lib/ojai/models")


class LemondError(RuntimeError):
    """lemond exited or did not answer; the message ends with its log."""


@dataclass
class Lemond:
    """A running lemond: its port, process (the namespace's leader) and log."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    hf_home: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def request(self, method: str, path: str, payload: Any = None,
                timeout: float = 180.0) -> tuple[int, Any]:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, body = int(resp.status), resp.read().decode(errors="replace")
        except urllib.error.HTTPError as err:
            status, body = int(err.code), err.read().decode(errors="replace")
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body


def lemond_version() -> str:
    """What ``lemond --version`` prints in the chroot (``lemond version 2026.39.1-2``)."""
    return run_in_chroot(ensure_sid_chroot(), ["lemond", "--version"]).stdout


def service_ids() -> tuple[int, int]:
    """The uid and gid of the chroot's ``lemonade`` user (made by the package's sysusers file)."""
    line = run_in_chroot(ensure_sid_chroot(), ["getent", "passwd", "lemonade"]).stdout
    fields = line.strip().split(":")
    return int(fields[2]), int(fields[3])


def _own(path: Path, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, uid, gid)
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


@contextmanager
def lemond(machine: Path, scratch: Path, *, env: dict[str, str] | None = None,
           binds: list[tuple[Path, str]] | None = None, prelude: str = "",
           ready_timeout: float = 60.0) -> Iterator[Lemond]:
    """Run lemond for the test machine at ``machine`` until the block ends.

    The state folder belongs to the service user, as systemd makes it (``StateDirectory``);
    the cache folders live in ``scratch``; ``env`` is added to the unit's environment (such as
    ``HF_ENDPOINT``, which Lemonade honours, for the stand-in hub); ``binds`` adds folders
    (host path, chroot path) and ``prelude`` a shell script run as root in lemond's namespace
    before lemond starts (such as :data:`support.npu_stand_in.NAMESPACE_DEV`). Yields once
    ``/api/v1/health`` answers 200.
    """
    root = ensure_sid_chroot()
    uid, gid = service_ids()
    state = machine / STATE.lstrip("/")
    state.mkdir(parents=True, exist_ok=True)
    _own(state, uid, gid)
    folders = {"cache": scratch / "lemonade-cache", "hf": scratch / "huggingface"}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
        _own(folder, uid, gid)
    mounts = [(state, STATE), (folders["cache"], CACHE), (folders["hf"], HF_HOME)]
    mounts += [(machine / p.lstrip("/"), p) for p in MACHINE_FOLDERS[1:]
               if (machine / p.lstrip("/")).is_dir()]
    mounts += binds or []
    port = free_port()
    argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            "lemond", "--port", str(port), "--no-broadcast"]
    # LLAMA_ARG_THREADS: the llama-servers lemond starts use the tests' thread count
    env = {"STATE_DIRECTORY": STATE, "CACHE_DIRECTORY": CACHE, "RUNTIME_DIRECTORY": RUNTIME,
           "HF_HOME": HF_HOME, "HOME": STATE, "LLAMA_ARG_THREADS": str(THREADS), **(env or {})}
    # the unit's RuntimeDirectory: /run is a fresh tmpfs in the chroot, so lemond makes it itself
    script = f'set -e\n{prelude}\nmkdir -p {RUNTIME} && chown {uid}:{gid} {RUNTIME}\nexec "$@"'
    command = chroot_argv(root, ["sh", "-c", script, "sh", *argv], env=env, binds=mounts,
                          cwd=STATE)
    log_path = scratch / "lemond.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    server = Lemond(port=port, process=process, log_path=log_path, hf_home=folders["hf"])
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise LemondError(f"lemond exited with {process.returncode}:\n{server.log()[-4000:]}")
            try:
                status, _ = server.request("GET", "/api/v1/health", timeout=2)
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise LemondError(f"lemond did not answer /api/v1/health in {ready_timeout:.0f} s:"
                                  f"\n{server.log()[-4000:]}")
            time.sleep(0.05)
        yield server
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End the namespace: SIGTERM to our process group, SIGKILL after 15 s (``unshare
    --kill-child`` takes lemond and the llama-server it started with it)."""
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
