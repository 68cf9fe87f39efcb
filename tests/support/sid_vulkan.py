"""Debian sid's Vulkan backend of ggml on Mesa's lavapipe: a layer of its own on top of the sid
llama.cpp overlay (:mod:`support.sid_llama`), so that llama.cpp's Vulkan backend runs for real
on the CPU, with no GPU::

    apt-get install libggml0-backend-vulkan mesa-vulkan-drivers

``libggml0-backend-vulkan`` is the Vulkan backend of the same ggml (0.27.0-1) that sid's
``llama.cpp-tools`` (build 11669) loads at start; ``mesa-vulkan-drivers`` brings lavapipe (the
``lvp`` ICD) and the Vulkan loader. Cached outside the checkout under its own key (the sid
llama.cpp recipe and these packages), never under the chroot's: the chroot's own recipe and the
HIP build keyed by it stay as they are::

    ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/sid-vulkan/<recipe sha256[:16]>/
        upper/       what the install added (the backend, Mesa's Vulkan drivers, the loader)
        ready.json   written last: the recipe, the installed versions, how long it took

Commands run as in :mod:`support.sid_llama`: a private mount namespace, this layer, the
llama.cpp layer and the chroot as read-only lowers and a fresh upper per command.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make support importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support import sid, sid_llama  # noqa: E402

PACKAGES = ("libggml0-backend-vulkan", "mesa-vulkan-drivers")
#: bump when the way the layer is made changes without the inputs above changing
RECIPE_REVISION = 1
REPORTED = ("libggml0-backend-vulkan", "libggml0", "llama.cpp-tools", "mesa-vulkan-drivers",
            "libvulkan1")


def recipe() -> dict[str, object]:
    return {"sid_llama": sid_llama.recipe(), "packages": list(PACKAGES),
            "revision": RECIPE_REVISION}


def cache_dir() -> Path:
    base = os.environ.get("OJAI_TEST_CACHE") or str(Path.home() / ".cache" / "ojai-tests")
    digest = hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()
    return Path(base).expanduser() / "sid-vulkan" / digest[:16]


def is_ready() -> bool:
    return (cache_dir() / "ready.json").is_file()


def _lower() -> str:
    return f"{sid_llama.cache_dir() / 'upper'}:{sid.chroot_root()}"


def overlay_argv(scratch: Path, argv: Iterable[str], *, env: Mapping[str, str] | None = None,
                 binds: Iterable[tuple[Path | str, str]] = (), cwd: str = "/") -> list[str]:
    """A host command line running ``argv`` in the chroot with Debian's llama.cpp and its
    Vulkan backend on lavapipe; ``scratch`` (an empty folder of the caller's) takes what the
    command writes outside its binds."""
    for part in ("upper", "work", "merged"):
        (scratch / part).mkdir(parents=True, exist_ok=True)
    lower = f"{cache_dir() / 'upper'}:{_lower()}"
    return sid_llama._argv(lower, scratch / "upper", scratch / "work", scratch / "merged", argv,
                           env=env, binds=binds, cwd=cwd)


def run_in_overlay(argv: Iterable[str], *, env: Mapping[str, str] | None = None,
                   binds: Iterable[tuple[Path | str, str]] = (), cwd: str = "/",
                   check: bool = True, timeout: float | None = None
                   ) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the layer and capture its output; the scratch layer is removed after."""
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
    upper, work, merged = cache / "upper.partial", cache / "work", cache / "merged"
    for path in (upper, work):
        if path.exists():
            shutil.rmtree(path)
    for path in (upper, work, merged):
        path.mkdir(exist_ok=True)
    for argv in (["apt-get", *sid.APT_OPTIONS, "update"],
                 ["apt-get", *sid.APT_OPTIONS, "install", "-y", *PACKAGES],
                 ["apt-get", "clean"]):
        full = sid_llama._argv(_lower(), upper, work, merged, argv,
                               env={"DEBIAN_FRONTEND": "noninteractive"}, binds=(), cwd="/")
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        res = subprocess.run(full, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        if res.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` failed in the sid Vulkan layer (exit "
                               f"{res.returncode}); see {log.name}")
    shutil.rmtree(upper / "var" / "lib" / "apt" / "lists", ignore_errors=True)
    os.replace(upper, cache / "upper")
    shutil.rmtree(work, ignore_errors=True)
    return {"seconds": round(time.monotonic() - started, 1)}


def ensure_sid_vulkan() -> Path:
    """The cache folder of the layer; built on first use (needs root and the sid chroot)."""
    sid_llama.ensure_sid_llama()
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
    print(ensure_sid_vulkan())
