"""A Debian unstable (sid) chroot holding ROCm's HIP toolchain and Lemonade, built once per machine.

Debian's unstable suite packages what the tests need and no PyPI package ships: ROCm 6.4's HIP
compiler and libraries (``hipcc``, ``libamdhip64-dev``, ``libhipblas-dev``, ``librocblas-dev``,
``rocminfo``) to compile llama.cpp for gfx1150 for real, and Lemonade itself
(``lemonade-server``: ``lemond`` and ``lemonade``); and Python (``python3``, ``python3-venv``) so
that ojai itself can run inside. The recipe is::

    debootstrap --variant=minbase --include=<PACKAGES> sid <cache>/root <MIRROR>
    # then, inside the chroot, what debootstrap's resolver cannot take (LATE_PACKAGES):
    apt-get -o Acquire::Check-Valid-Until=false install <LATE_PACKAGES>

cached outside the checkout, keyed by a hash of that recipe::

    ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/sid/<recipe sha256[:16]>/
        root/          the chroot (about 6 GB; rocBLAS's kernels are most of it)
        ready.json     written last: the recipe, the installed versions, how long it took
        build.log      debootstrap's and apt-get's output
        .build.lock    a file lock: one process builds, the others wait for it

A ``ready.json`` makes :func:`ensure_sid_chroot` a no-op. A half-built ``root.partial`` left by
an interrupted run is removed and built again. Run this file as a script to build ahead of
pytest (``.ci/run`` does); it prints the chroot's path.

Interface (stable; other test modules import it):

``ensure_sid_chroot() -> Path``
    The chroot's root folder, built on first use (needs root and ``debootstrap``).
``chroot_argv(root, argv, *, env=None, binds=(), cwd="/") -> list[str]``
    A host command line that runs ``argv`` inside the chroot, for ``subprocess.Popen`` (for a
    server that runs while the test talks to it). End it with ``proc.kill()``: ``unshare``
    ignores SIGTERM while it waits, and its death (``--kill-child``) kills the command, which is
    PID 1 of its namespace, so every process inside goes with it.
``run_in_chroot(root, argv, *, env=None, binds=(), cwd="/", check=True, timeout=None,
input=None) -> subprocess.CompletedProcess[str]``
    Run ``argv`` inside the chroot and capture its output (text); raises
    :class:`ChrootCommandError` with the output when it fails and ``check`` is true.

Every command runs in its own mount and PID namespaces (``unshare --mount --pid --fork
--kill-child``, mount propagation private): ``/proc`` is mounted for it, the host's ``/dev`` is
bound in, ``/tmp`` and ``/run`` are fresh tmpfs, and ``binds`` (pairs ``(host path, chroot
path)``, read-write; a missing chroot folder is created) are bind-mounted. All of it disappears
with the namespace when the command ends: nothing is mounted on the host and nothing needs
unmounting. The environment is a clean one (``PATH``, ``HOME=/root``, ``LANG=C.UTF-8``) plus
``env``. The chroot is shared: tests write only into the folders they bind in.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

SUITE = "sid"
MIRROR = "http://deb.debian.org/debian"
VARIANT = "minbase"
#: installed by debootstrap itself
PACKAGES = ("hipcc", "libamdhip64-dev", "libhipblas-dev", "librocblas-dev", "cmake", "make",
            "g++", "rocminfo", "python3", "python3-venv")
#: installed afterwards with apt-get inside the chroot: debootstrap resolves no virtual
#: packages, and lemonade-server pre-depends on ``systemd-sysusers``
LATE_PACKAGES = ("lemonade-server",)
#: the suite's Release file carries a Valid-Until date that a mirror snapshot may have passed
APT_OPTIONS = ("-o", "Acquire::Check-Valid-Until=false", "-o", "APT::Install-Recommends=false")
#: bump when the way the chroot is made changes without the lists above changing
RECIPE_REVISION = 1
#: what ready.json reports the versions of
REPORTED = ("hipcc", "libamdhip64-dev", "libhipblas-dev", "librocblas-dev", "rocminfo", "cmake",
            "g++", "lemonade-server")

CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ChrootCommandError(RuntimeError):
    """A command in the chroot failed; the message carries its output."""

    def __init__(self, argv: list[str], result: subprocess.CompletedProcess[str]) -> None:
        self.result = result
        out = ((result.stdout or "") + (result.stderr or "")).strip()
        tail = "\n".join(out.splitlines()[-40:])
        super().__init__(f"`{' '.join(argv)}` failed in the sid chroot (exit "
                         f"{result.returncode}):\n{tail}")


def recipe() -> dict[str, object]:
    return {"suite": SUITE, "mirror": MIRROR, "variant": VARIANT, "packages": list(PACKAGES),
            "late_packages": list(LATE_PACKAGES), "apt_options": list(APT_OPTIONS),
            "revision": RECIPE_REVISION}


def recipe_hash() -> str:
    return hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()


def cache_dir() -> Path:
    base = os.environ.get("OJAI_TEST_CACHE") or str(Path.home() / ".cache" / "ojai-tests")
    return Path(base).expanduser() / "sid" / recipe_hash()[:16]


def chroot_root() -> Path:
    """Where the chroot is (or will be); :func:`ensure_sid_chroot` builds it."""
    return cache_dir() / "root"


def is_ready() -> bool:
    return (cache_dir() / "ready.json").is_file() and (chroot_root() / "usr" / "bin").is_dir()


# -- running commands inside -----------------------------------------------------------------
_INNER = r'''
set -e
r=$1; shift
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
mkdir -p "$r/run" && mount -t tmpfs -o mode=755 tmpfs "$r/run"
while [ "$1" != "--" ]; do
  src=$1; dst=$r$2; shift 2
  if [ -d "$src" ]; then mkdir -p "$dst"; else mkdir -p "$(dirname "$dst")"; [ -e "$dst" ] || : > "$dst"; fi
  mount --bind "$src" "$dst"
done
shift
exec chroot "$r" "$@"
'''


def chroot_argv(root: Path | str, argv: Iterable[str], *, env: Mapping[str, str] | None = None,
                binds: Iterable[tuple[Path | str, str]] = (), cwd: str = "/") -> list[str]:
    """A host command line running ``argv`` in the chroot at ``root`` (see the module doc)."""
    full_env = {"PATH": CHROOT_PATH, "HOME": "/root", "LANG": "C.UTF-8", **(env or {})}
    bind_args: list[str] = []
    for host, guest in binds:
        if not str(guest).startswith("/"):
            raise ValueError(f"a bind target inside the chroot must be absolute: {guest!r}")
        bind_args += [str(Path(host).resolve()), str(guest)]
    inner = ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in full_env.items()),
             "sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", cwd, *argv]
    return ["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child",
            "sh", "-c", _INNER, "sh", str(Path(root).resolve()), *bind_args, "--", *inner]


def run_in_chroot(root: Path | str, argv: Iterable[str], *, env: Mapping[str, str] | None = None,
                  binds: Iterable[tuple[Path | str, str]] = (), cwd: str = "/",
                  check: bool = True, timeout: float | None = None,
                  input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` inside the chroot and capture its output (see the module doc)."""
    argv = list(argv)
    res = subprocess.run(chroot_argv(root, argv, env=env, binds=binds, cwd=cwd),
                         capture_output=True, text=True, errors="replace", timeout=timeout,
                         input=input, stdin=None if input is not None else subprocess.DEVNULL)
    if check and res.returncode != 0:
        raise ChrootCommandError(argv, res)
    return res


# -- building --------------------------------------------------------------------------------
def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return found


def _remove_tree(path: Path) -> None:
    """Remove a half-built chroot, refusing if anything is mounted inside it."""
    if not path.exists():
        return
    mounted = _mounts_under(path)
    if mounted:
        raise RuntimeError(f"{path} has mounts inside ({', '.join(mounted)}); unmount them "
                           "first, nothing was removed")
    shutil.rmtree(path)


def _logged(log, argv: list[str]) -> None:
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    print(f"sid chroot: {' '.join(argv[:6])}{' ...' if len(argv) > 6 else ''}",
          file=sys.stderr, flush=True)
    res = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         env={**os.environ, "LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"})
    if res.returncode != 0:
        log.flush()
        tail = "\n".join(Path(log.name).read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"`{' '.join(argv)}` failed (exit {res.returncode}); last lines of "
                           f"{log.name}:\n{tail}")


def _versions(root: Path) -> dict[str, str]:
    res = run_in_chroot(root, ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n",
                               *REPORTED], check=False)
    return dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)


def _build(target: Path, log) -> dict[str, object]:
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise RuntimeError("building the sid chroot needs root (debootstrap, chroot, mount)")
    started = time.monotonic()
    # debootstrap mounts /proc and /sys in the target: keep those mounts in a namespace of its own
    _logged(log, ["unshare", "--mount", "--propagation", "private", "debootstrap",
                  f"--variant={VARIANT}", f"--include={','.join(PACKAGES)}", SUITE, str(target),
                  MIRROR])
    # no service may start from a package's maintainer script in the chroot
    policy = target / "usr" / "sbin" / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    if LATE_PACKAGES:
        for argv in (["apt-get", *APT_OPTIONS, "update"],
                     ["apt-get", *APT_OPTIONS, "install", "-y", *LATE_PACKAGES]):
            _logged(log, chroot_argv(target, argv, env={"DEBIAN_FRONTEND": "noninteractive"}))
    _logged(log, chroot_argv(target, ["apt-get", "clean"]))
    return {"seconds": round(time.monotonic() - started, 1)}


def ensure_sid_chroot() -> Path:
    """The root folder of the cached sid chroot; builds it on first use (see the module doc)."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    root = cache / "root"
    with (cache / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_ready():
            return root
        partial = cache / "root.partial"
        _remove_tree(partial)
        _remove_tree(root)
        with (cache / "build.log").open("w", encoding="utf-8") as log:
            timing = _build(partial, log)
        os.replace(partial, root)
        record = {"recipe": recipe(), "versions": _versions(root), **timing,
                  "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        tmp = cache / "ready.json.tmp"
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, cache / "ready.json")
    return root


if __name__ == "__main__":
    print(ensure_sid_chroot())
