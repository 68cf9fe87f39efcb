"""The shared Debian sid chroot (tests/support/sid.py): what it holds, and that running a
command in it leaves nothing behind on the host."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from support import sid

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def chroot() -> Path:
    return sid.ensure_sid_chroot()


def mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(prefix)]


def test_the_toolchain_answers_as_the_issue_measured(chroot: Path) -> None:
    assert sid.run_in_chroot(chroot, ["hipconfig", "-l"]).stdout.strip() == "/usr/lib/llvm-21/bin"
    assert sid.run_in_chroot(chroot, ["hipconfig", "-R"]).stdout.strip() == "/usr"
    versions = json.loads((chroot.parent / "ready.json").read_text())["versions"]
    assert set(versions) == set(sid.REPORTED)
    assert sid.run_in_chroot(chroot, ["lemond", "--version"]).stdout.startswith(
        f"lemond version {versions['lemonade-server']}")


def test_binds_env_and_proc_and_nothing_left_mounted(chroot: Path, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("from the host\n")
    res = sid.run_in_chroot(
        chroot, ["sh", "-c", 'cat /data/in.txt; echo "$HOME $FOO ${PIP_CERT:-unset}"; '
                             'echo made > /data/out.txt; cat /proc/1/comm; ls /tmp | wc -l; pwd'],
        env={"FOO": "bar"}, binds=[(tmp_path, "/data")], cwd="/data")
    assert res.stdout.splitlines() == ["from the host", "/root bar unset", "sh", "0", "/data"]
    assert (tmp_path / "out.txt").read_text() == "made\n"
    assert mounts_under(chroot) == []


def test_a_failing_command_raises_with_its_output(chroot: Path) -> None:
    with pytest.raises(sid.ChrootCommandError, match=r"exit 3\):\nboom"):
        sid.run_in_chroot(chroot, ["sh", "-c", "echo boom; exit 3"])
    assert sid.run_in_chroot(chroot, ["false"], check=False).returncode == 1


def test_ending_the_host_process_ends_everything_inside(chroot: Path) -> None:
    proc = subprocess.Popen(sid.chroot_argv(chroot, ["sleep", "4321"]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _sleepers():
            time.sleep(0.2)
        assert _sleepers(), "the command did not start"
    finally:
        proc.kill()  # unshare ignores SIGTERM while it waits for its child
        proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _sleepers():
        time.sleep(0.2)
    assert _sleepers() == []
    assert mounts_under(chroot) == []


def _sleepers() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x004321\x00":
                found.append(int(pid))
        except OSError:
            pass
    return found
