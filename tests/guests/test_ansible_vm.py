"""The collection's role over SSH into a real machine: Debian 12 in qemu, rebooted for real.

The guest is a copy-on-write overlay of the cached image (tests/support/vm.py) booted with one
NIC whose only way in is a host port on 127.0.0.1 forwarded to the guest's sshd
(tests/support/vm_ssh.py: a key pair made for this test session, the guest's host key accepted
into a known_hosts file of this test). ``ansible-playbook`` runs the ``ojai.ojai.server`` role
there with the ssh connection, as root, on ``/``: the wheel of this checkout is copied from the
controller and installed into ojai's own virtualenv ``/opt/ojai`` (the image holds ojai's
dependencies there; the guest has no index, so pip runs with ``--no-index``), the plan is made
and applied (the real ``update-grub``), ``ansible.builtin.reboot`` reboots the guest through
its own GRUB and reconnects, and the role checks that the GPU memory limit is active. The guest
has no AMD GPU: as in tests/guests/test_vm.py, ojai runs with ``--profile strix-halo`` and a 1 GiB
budget. The test asserts on Ansible's JSON output, then on the guest itself through the console
driver (a new boot, the limit live).
"""

from __future__ import annotations

import json
import tempfile
import textwrap
from pathlib import Path

import pytest

from support.ansible_run import collections, play  # noqa: F401  (collections: fixture)
from support.vm import BOOT_TIMEOUT, Machine, build_ojai_wheel, ensure_image, overlay
from support.vm_ojai import LIVE, PAGES
from support.server import free_port
from support.vm_ssh import enable_ssh, ssh_key, wait_for_ssh  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.vm]

ROLE_PLAY = """
- hosts: vm
  gather_facts: false
  serial: 1
  roles:
    - role: ojai.ojai.server
      vars:
        ojai_venv: /opt/ojai
        ojai_wheel_dir: /var/lib/ojai/wheels
        ojai_pip_extra_args: --no-index
        ojai_profile: strix-halo
        ojai_gpu_memory: 1
        ojai_llamacpp: none
        ojai_npu: false
        # the image is a debootstrap minbase without D-Bus: `shutdown -r 0` (Ansible's reboot
        # command) asks logind over the system bus to schedule it; systemctl does not need it
        ojai_reboot_command: systemctl reboot
"""


@pytest.fixture
def ssh_vm(tmp_path, ssh_key, request):
    """The bare image (ojai's dependencies in /opt/ojai, no ojai) booted with SSH enabled."""
    disk = overlay(ensure_image().disk, tmp_path / "disk.qcow2")
    machine = Machine(disk, tmp_path / "vm", name=request.node.name[:40], ssh_port=free_port())
    machine.start()
    try:
        machine.wait_for_boot()
        enable_ssh(machine, ssh_key)
        yield machine
    finally:
        machine.kill()


def inventory(path: Path, vm: Machine, key, known_hosts: Path, wheel: Path) -> Path:
    ssh_common = " ".join([
        "-F /dev/null", "-o IdentitiesOnly=yes", "-o StrictHostKeyChecking=accept-new",
        f"-o UserKnownHostsFile={known_hosts}", "-o ServerAliveInterval=15"])
    host = {
        "ansible_connection": "ssh",
        "ansible_host": "127.0.0.1",
        "ansible_port": vm.ssh_port,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(key.private),
        "ansible_ssh_common_args": ssh_common,
        # no compression (the guest's one emulated CPU pays for it); one connection reused
        "ansible_ssh_args": "-o ControlMaster=auto -o ControlPersist=30m",
        "ansible_ssh_pipelining": True,
        # TCG: a login can take many seconds on a loaded host
        "ansible_ssh_timeout": 120,
        "ansible_python_interpreter": "/usr/bin/python3",
        "ojai_wheel": str(wheel),
        "ojai_reboot_timeout": int(BOOT_TIMEOUT),
    }
    path.write_text(json.dumps({"all": {"hosts": {"vm": host}}}, indent=2))
    return path


def test_role_over_ssh_installs_applies_reboots_and_the_limit_is_active(ssh_vm, ssh_key,
                                                                        collections, tmp_path):
    vm = ssh_vm
    known_hosts = tmp_path / "known_hosts"
    boot_before = wait_for_ssh(vm, ssh_key, known_hosts)
    assert boot_before == vm.boot_id  # the SSH port reaches this guest
    assert known_hosts.read_text().startswith(f"[127.0.0.1]:{vm.ssh_port} ")
    original = int(vm.succeed(f"cat {LIVE}").strip())
    assert original != PAGES
    vm.fail("test -e /opt/ojai/bin/ojai")  # the role installs ojai

    wheel = build_ojai_wheel(tmp_path / "wheel")
    book = tmp_path / "site.yml"
    book.write_text(textwrap.dedent(ROLE_PLAY))
    inv = inventory(tmp_path / "inventory.json", vm, ssh_key, known_hosts, wheel)
    # a short folder for ssh's control sockets (a socket path has at most 107 bytes)
    with tempfile.TemporaryDirectory(prefix="ojai-cp-") as cp:
        run = play(book, inv, collections, tmp_path, env={"ANSIBLE_SSH_CONTROL_PATH_DIR": cp})
    (tmp_path / "ansible.json").write_text(run.stdout)  # all of it, for a failure

    assert run.rc == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert run.stats["vm"]["failures"] == 0 and run.stats["vm"]["unreachable"] == 0
    assert run.stats["vm"]["changed"] >= 3

    copied = run.results("Copy the ojai wheel from the controller")["vm"]
    assert copied["changed"] is True and copied["dest"] == f"/var/lib/ojai/wheels/{wheel.name}"
    assert run.results("Make ojai's virtualenv")["vm"]["changed"] is False  # /opt/ojai exists
    installed = run.results("Install ojai into its virtualenv")["vm"]
    assert installed["changed"] is True and "Successfully installed ojai-" in installed["stdout"]

    planned = run.results("Plan the setup and save the plan for review")["vm"]
    assert planned["changed"] is True and planned["reboot_required"] is True
    applied = run.results("Apply exactly the saved plan")["vm"]
    assert applied["changed"] is True and not applied.get("failed")
    assert "/etc/default/grub" in applied["files_changed"]
    assert applied["commands_ran"] == ["update-grub"]
    assert applied["reboot_required"] is True

    rebooted = run.results("Reboot where the apply needs it")["vm"]
    assert rebooted["changed"] is True and rebooted["rebooted"] is True, rebooted
    after = run.results("Read the machine after the reboot")["vm"]["ansible_facts"]["ojai_doctor"]
    assert after["by_id"]["ttm.active"]["severity"] == "pass", after["by_id"]["ttm.active"]
    checked = run.results("Check that the GPU memory limit is active")["vm"]
    assert not checked.get("failed") and not checked.get("skipped"), checked
    assert f"active {PAGES} pages" in checked["msg"], checked["msg"]

    # the guest itself: a new boot, through its GRUB, with the limit on the command line and live
    vm.wait_for_boot()
    assert vm.boot_id != boot_before
    assert wait_for_ssh(vm, ssh_key, known_hosts) == vm.boot_id  # same host key after the reboot
    assert f"ttm.pages_limit={PAGES}" in vm.succeed("cat /proc/cmdline").split()
    assert int(vm.succeed(f"cat {LIVE}").strip()) == PAGES
    assert vm.succeed("/opt/ojai/bin/ojai --version").strip()
