"""SSH into the Debian 12 test machine, for the tests that need a real remote host (Ansible).

The image (tests/support/vm.py) has openssh-server installed but off at boot, password logins
off, and a systemd-networkd file giving a NIC the address qemu's user-mode network expects
(10.0.2.15/24). A boot that asks for SSH (``Machine(..., ssh_port=PORT)``) gets one virtio NIC
on a user-mode network with ``restrict=on`` (the guest reaches nothing) whose only way in is
``127.0.0.1:PORT`` on the host forwarded to the guest's port 22. Then, through the console
driver, :func:`enable_ssh` puts the public key of this test session into
``/root/.ssh/authorized_keys`` and enables systemd-networkd and sshd (so that they come back
after a reboot of the guest).

The key pair is made fresh for each test session with ``ssh-keygen`` (ed25519, no passphrase)
in a temporary folder; the guest's host keys are accepted on first use into a known_hosts file
of the test (``StrictHostKeyChecking=accept-new``). Nothing reads or writes the host's
``~/.ssh``: every ssh command gets ``-F /dev/null`` and its own ``UserKnownHostsFile``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.vm import Machine, VMError

GUEST_ADDRESS = "10.0.2.15"


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path

    @property
    def public_line(self) -> str:
        return self.public.read_text().strip()


def make_key_pair(folder: Path) -> KeyPair:
    """A new ed25519 key pair without a passphrase in ``folder`` (``ssh-keygen``)."""
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise VMError("ssh-keygen is missing: `apt-get install openssh-client`")
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    private = folder / "id_ed25519"
    subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", "ojai-tests", "-f",
                    str(private)], check=True, capture_output=True)
    return KeyPair(private, private.with_name("id_ed25519.pub"))


@pytest.fixture(scope="session")
def ssh_key(tmp_path_factory) -> KeyPair:
    """This test session's key pair."""
    return make_key_pair(tmp_path_factory.mktemp("ssh-key"))


def ssh_options(key: KeyPair, known_hosts: Path) -> list[str]:
    """Options for ssh: this key only, no config file of the host, host keys accepted on first
    use into ``known_hosts`` and checked from then on."""
    return ["-F", "/dev/null", "-o", "IdentitiesOnly=yes", "-i", str(key.private),
            "-o", "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"]


def enable_ssh(machine: Machine, key: KeyPair) -> None:
    """Through the console driver: the key into root's authorized_keys, the NIC's network and
    sshd enabled and started (enabled: they start again after a reboot)."""
    if machine.ssh_port is None:
        raise VMError(f"{machine.name} was started without an ssh_port: it has no NIC")
    machine.succeed("install -d -m 700 /root/.ssh")
    machine.write_file("/root/.ssh/authorized_keys", key.public_line + "\n", mode=0o600)
    machine.succeed("systemctl enable --now systemd-networkd.service ssh.service 2>&1",
                    timeout=900)
    # the address is up when the kernel's routing table has it (no iproute2 in the image)
    machine.succeed(f"for i in $(seq 1 1200); do grep -q ' {GUEST_ADDRESS}$' /proc/net/fib_trie "
                    f"&& exit 0; sleep 0.5; done; networkctl status --no-pager; exit 1",
                    timeout=900)


def wait_for_ssh(machine: Machine, key: KeyPair, known_hosts: Path,
                 timeout: float = 900.0) -> str:
    """Wait until ``ssh root@127.0.0.1 -p PORT`` runs a command in the guest; returns the
    guest's boot id as seen over SSH."""
    deadline = time.monotonic() + timeout
    argv = ["ssh", *ssh_options(key, known_hosts), "-o", "ConnectTimeout=60", "-p",
            str(machine.ssh_port), "root@127.0.0.1", "cat /proc/sys/kernel/random/boot_id"]
    while True:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if proc.returncode == 0:
            return proc.stdout.strip()
        if time.monotonic() > deadline:
            raise VMError(f"no SSH into {machine.name} on 127.0.0.1:{machine.ssh_port} after "
                          f"{timeout:.0f} s: {proc.stderr.strip()}")
        time.sleep(2)
