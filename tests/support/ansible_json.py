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

import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make support importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support import pinned_wheels  # noqa: E402

PACKAGE = "ansible"
VERSION = "12.3.0"
WHEEL = f"ansible-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "cd156f82fa87f7a899212b0efa9f7ca3a24d609212de9f78428a572eb01e5414"
PREFIX = "ansible_collections/ansible/posix/"


def cache_dir() -> Path:
    return pinned_wheels.cache_base() / "ansible-posix" / WHEEL_SHA256[:16]


def _fetch_and_unpack(staging: Path) -> None:
    with tempfile.TemporaryDirectory(dir=staging.parent) as tmp:
        pinned_wheels.download([f"{PACKAGE}=={VERSION}"], {WHEEL: WHEEL_SHA256}, Path(tmp))
        pinned_wheels.unpack(Path(tmp) / WHEEL, staging, lambda name: name.startswith(PREFIX))
    if not (staging / PREFIX / "plugins/callback/json.py").is_file():
        raise RuntimeError(f"{WHEEL} holds no ansible.posix json callback")


def ensure_ansible_posix() -> Path:
    """A collections path holding ``ansible.posix`` (its ``json`` stdout callback)."""
    return pinned_wheels.once(cache_dir(), _fetch_and_unpack)


if __name__ == "__main__":
    print(ensure_ansible_posix())
