"""Debian sid's own llama.cpp (``llama.cpp-tools``, build 11669) in an overlay of the sid chroot.

The chroot of :mod:`support.sid` is shared and stays as it is; this module installs Debian's
packaged llama.cpp into an overlay on top of it, once per machine, and runs commands in the
two together::

    apt-get install llama.cpp-tools        # inside the chroot, through an overlay mount

cached outside the checkout, keyed by the sid recipe's hash and this recipe::

    ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/sid-llama/<recipe sha256[:16]>/
        upper/         what the install added or changed (about 25 MB: llama.cpp-tools,
                       libllama0, libggml0, wget, and the dpkg database that records them)
        ready.json     written last: the recipe, the installed versions, how long it took
        build.log, .build.lock

The overlay is mounted only inside a private mount namespace (``unshare --mount``), for the
install (``upper/`` writable) and for each command afterwards (``upper/`` and the chroot as
two read-only lower layers, a fresh upper layer in a temporary folder per command), so that
nothing is mounted on the host, the cached layers never change after the install, and two
tests can run commands side by side. Inside, :func:`support.sid.chroot_argv` does the rest
(``/proc``, ``/dev``, tmpfs ``/tmp`` and ``/run``, the binds).

Interface: :func:`ensure_sid_llama` (build once, return the cache folder),
:func:`overlay_argv` / :func:`run_in_overlay` (as ``chroot_argv`` / ``run_in_chroot``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make support importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support import sid  # noqa: E402

PACKAGES = ("llama.cpp-tools",)
#: bump when the way the overlay is made changes without the inputs above changing
RECIPE_REVISION = 1
REPORTED = ("llama.cpp-tools", "libllama0", "libggml0")

_MOUNT = r'''
set -e
lower=$1 upper=$2 work=$3 merged=$4; shift 4
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$merged"
exec "$@"
'''


def recipe() -> dict[str, object]:
    return {"sid": sid.recipe_hash(), "packages": list(PACKAGES),
            "apt_options": list(sid.APT_OPTIONS), "revision": RECIPE_REVISION}


def cache_dir() -> Path:
    base = os.environ.get("OJAI_TEST_CACHE") or str(Path.home() / ".cache" / "ojai-tests")
    digest = hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()
    return Path(base).expanduser() / "sid-llama" / digest[:16]


def is_ready() -> bool:
    return (cache_dir() / "ready.json").is_file()


def _argv(lower: str, upper: Path, work: Path, merged: Path, argv: Iterable[str], *,
          env: Mapping[str, str] | None, binds: Iterable[tuple[Path | str, str]],
          cwd: str) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", _MOUNT, "sh", lower,
            str(upper), str(work), str(merged),
            *sid.chroot_argv(merged, argv, env=env, binds=binds, cwd=cwd)]


def overlay_argv(scratch: Path, argv: Iterable[str], *, env: Mapping[str, str] | None = None,
                 binds: Iterable[tuple[Path | str, str]] = (), cwd: str = "/") -> list[str]:
    """A host command line running ``argv`` in the chroot with Debian's llama.cpp installed;
    ``scratch`` (an empty folder of the caller's, on a file system overlayfs can write to)
    takes what the command writes outside its binds."""
    cache = cache_dir()
    for part in ("upper", "work", "merged"):
        (scratch / part).mkdir(parents=True, exist_ok=True)
    lower = f"{cache / 'upper'}:{sid.chroot_root()}"
    return _argv(lower, scratch / "upper", scratch / "work", scratch / "merged", argv, env=env,
                 binds=binds, cwd=cwd)


def run_in_overlay(argv: Iterable[str], *, env: Mapping[str, str] | None = None,
                   binds: Iterable[tuple[Path | str, str]] = (), cwd: str = "/",
                   check: bool = True, timeout: float | None = None
                   ) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the overlay and capture its output; the scratch layer is removed after."""
    argv = list(argv)
    base = cache_dir() / "runs"
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=base))
    try:
        res = subprocess.run(overlay_argv(scratch, argv, env=env, binds=binds, cwd=cwd),
                             capture_output=True, text=True, errors="replace", timeout=timeout,
                             stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if check and res.returncode != 0:
        raise sid.ChrootCommandError(argv, res)
    return res


def _build(cache: Path, log) -> dict[str, object]:
    started = time.monotonic()
    upper = cache / "upper.partial"
    work = cache / "work"
    merged = cache / "merged"
    for path in (upper, work):
        if path.exists():
            shutil.rmtree(path)
    for path in (upper, work, merged):
        path.mkdir()
    lower = str(sid.chroot_root())
    for argv in (["apt-get", *sid.APT_OPTIONS, "update"],
                 ["apt-get", *sid.APT_OPTIONS, "install", "-y", *PACKAGES],
                 ["apt-get", "clean"]):
        full = _argv(lower, upper, work, merged, argv, env={"DEBIAN_FRONTEND": "noninteractive"},
                     binds=(), cwd="/")
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        res = subprocess.run(full, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        if res.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` failed in the sid overlay (exit "
                               f"{res.returncode}); see {log.name}")
    # apt's lists are most of what update wrote and nothing needs them afterwards
    shutil.rmtree(upper / "var" / "lib" / "apt" / "lists", ignore_errors=True)
    os.replace(upper, cache / "upper")
    shutil.rmtree(work, ignore_errors=True)
    return {"seconds": round(time.monotonic() - started, 1)}


def ensure_sid_llama() -> Path:
    """The cache folder of the overlay; built on first use (needs root and the sid chroot)."""
    sid.ensure_sid_chroot()
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_ready():
            return cache
        if (cache / "upper").exists():
            shutil.rmtree(cache / "upper")
        with (cache / "build.log").open("w", encoding="utf-8") as log:
            timing = _build(cache, log)
        res = run_in_overlay(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *REPORTED],
                             check=False)
        versions = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
        record = {"recipe": recipe(), "versions": versions, **timing,
                  "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        tmp = cache / "ready.json.tmp"
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, cache / "ready.json")
    return cache


if __name__ == "__main__":
    print(ensure_sid_llama())
