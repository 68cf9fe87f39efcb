"""Running the collection under ansible/ with real ansible-core, for the tests of it.

:func:`collections` builds and installs the collection with ``ansible-galaxy`` once per
session; :func:`play` runs a playbook with ``ansible-playbook`` and Ansible's JSON stdout
callback (``ansible.posix.json``, tests/support/ansible_json.py); :class:`Run` reads that
output (changed, diff and failed per host and task).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.ansible_json import ensure_ansible_posix

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def collections(tmp_path_factory) -> str:
    """ANSIBLE_COLLECTIONS_PATH: ojai.ojai as built and installed by ansible-galaxy, and
    ansible.posix (the JSON callback)."""
    work = tmp_path_factory.mktemp("collection")
    galaxy = str(BIN / "ansible-galaxy")
    env = {**os.environ, "ANSIBLE_HOME": str(work / "home")}
    subprocess.run([galaxy, "collection", "build", str(REPO / "ansible"), "--output-path",
                    str(work)], check=True, capture_output=True, env=env)
    tarball = work / "ojai-ojai-0.1.0.tar.gz"
    assert tarball.is_file()
    subprocess.run([galaxy, "collection", "install", str(tarball), "-p", str(work / "installed")],
                   check=True, capture_output=True, env=env)
    assert (work / "installed/ansible_collections/ojai/ojai/plugins/modules/setup.py").is_file()
    return f"{work / 'installed'}:{ensure_ansible_posix()}"


def play(book: Path, inventory: Path, collections: str, base: Path, *args: str,
         env: dict[str, str] | None = None) -> Run:
    """``ansible-playbook -i INVENTORY BOOK ARGS`` with its state under ``base`` and Ansible's
    JSON output, parsed; ``env`` adds to (or overrides) the environment."""
    full = {**os.environ,
            "ANSIBLE_HOME": str(base / "ansible-home"),
            "ANSIBLE_LOCAL_TEMP": str(base / "ansible-tmp"),
            "ANSIBLE_COLLECTIONS_PATH": collections,
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_DEPRECATION_WARNINGS": "0", **(env or {})}
    full.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(book), *args],
                          capture_output=True, text=True, env=full, cwd=base)
    return Run(proc)


class Run:
    def __init__(self, proc: subprocess.CompletedProcess) -> None:
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        try:
            self.data = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}") from None

    def results(self, task: str) -> dict[str, dict]:
        """Each host's result of the task named ``task`` (over every play and batch)."""
        found: dict[str, dict] = {}
        for play in self.data["plays"]:
            for t in play["tasks"]:
                if t["task"]["name"].split(" : ", 1)[-1] == task:  # "role : task" in a role
                    found.update(t["hosts"])
        assert found, f"no task named {task!r} ran: " + ", ".join(
            t["task"]["name"] for p in self.data["plays"] for t in p["tasks"])
        return found

    @property
    def stats(self) -> dict[str, dict]:
        return self.data["stats"]
