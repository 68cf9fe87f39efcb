"""`ojai doctor --capture` is a bug report people post publicly: a machine full of identifiers
goes in, none of them comes out, and the replay gives the same doctor report.

The machine is the OJAI box after an apply (tests/machines/ojai-applied, real captures) with
identifiers of every class added where a real machine has them: filesystem and swap UUIDs
and a static IP/MAC/hostname on the kernel command line (the `ip=` and `BOOTIF=` forms of
the kernel's nfsroot.rst / dracut), the same in /etc/default/grub, the host name in
/etc/hostname, a user in /etc/passwd with a home, a serial number and a token in a modprobe.d
comment, tokens and names in the captured environment, and this host's own user and token in
the environment of the process that captures.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tarfile
from pathlib import Path

import pytest

from ojai_setup.commands.capture import Scrubber, write_capture
from ojai_setup.commands.doctor import diagnose
from ojai_setup.core.root import Root
from ojai_setup.facts.collect import environment


def with_stand_ins(scrubber: Scrubber, text: str) -> str:
    """``text`` with the originals the scrubber met replaced by their stand-ins, and nothing
    else: what a report of the original machine becomes once captured and replayed."""
    for original in sorted(scrubber.replaced, key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(original)}(?![\w-])",
                      scrubber.replaced[original].replace("\\", "\\\\"), text)
    return text


ROOT_UUID = "3b9e61a2-7c4d-4f1e-9a0b-5d2c8e7f1a64"  # already in ojai-applied's /proc/cmdline
SWAP_UUID = "f0e1d2c3-b4a5-4697-8879-6a5b4c3d2e1f"
EFI_UUID = "7A3C-19F2"
PARTUUID = "5e2f8a10-02"
BOOT_ID = "a83e5b17-92d4-4f60-b1c8-3e7d0f2a9c55"  # ojai-applied's boot id, also in state.json
IP = "10.20.30.40"
GATEWAY = "10.20.30.1"
IP6 = "fd12:3456:789a::42"
MAC = "a4:bb:6d:12:34:56"
BOOTIF = "01-a4-bb-6d-12-34-57"
HOSTNAME = "alicebox"
USER = "alice"
SERIAL = "MFX1P24110123"
HF_TOKEN = "hf_QmZk3tX9vLr2pWq8sNe7Yb4cDa6FgHj1Ku"
GH_TOKEN = "ghp_4nT7uV2wX9yZ1aB3cD5eF7gH9iJ1kL3mN5oP"
HOST_USER = "carol"
HOST_SECRET = "s3cr3t-value-of-this-host-42"

IDENTIFIERS = [ROOT_UUID, SWAP_UUID, EFI_UUID, PARTUUID, BOOT_ID, IP, GATEWAY, IP6, MAC,
               BOOTIF, HOSTNAME, USER, SERIAL, HF_TOKEN, GH_TOKEN, HOST_USER, HOST_SECRET]


def identifier_machine(machine) -> Path:
    root = machine("ojai-applied")
    cmdline = (root / "proc/cmdline").read_text().strip()
    extra = (f"resume=UUID={SWAP_UUID} ip={IP}::{GATEWAY}:255.255.255.0:{HOSTNAME}:enp1s0:off "
             f"BOOTIF={BOOTIF} netconsole=6665@{IP}/enp1s0,6666@{GATEWAY}/{MAC} "
             f"ipv6.addr={IP6} ttm.pages_limit=12582912")
    (root / "proc/cmdline").write_text(f"{cmdline} {extra}\n")
    grub = (root / "etc/default/grub").read_text()
    grub = grub.replace('GRUB_CMDLINE_LINUX=""', f'GRUB_CMDLINE_LINUX="resume=UUID={SWAP_UUID} '
                        f'ip={IP}::{GATEWAY}:255.255.255.0:{HOSTNAME}:enp1s0:off"')
    (root / "etc/default/grub").write_text(
        grub + f"# EFI partition UUID={EFI_UUID} PARTUUID={PARTUUID}, set up by {USER}\n")
    (root / "etc/hostname").write_text(HOSTNAME + "\n")
    (root / "proc/sys/kernel/hostname").write_text(HOSTNAME + "\n")
    (root / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\n"
        f"{USER}:x:1000:1000:Alice,,,:/home/{USER}:/bin/bash\n")
    (root / f"home/{USER}").mkdir(parents=True)
    (root / "etc/modprobe.d").mkdir()
    (root / "etc/modprobe.d/amdgpu.conf").write_text(
        f"# added by {USER}@{HOSTNAME} ({IP}) for board serial: {SERIAL}\n"
        f"# HF token while testing: {HF_TOKEN}; and this host's user {HOST_USER}\n"
        "options amdgpu gttsize=-1\n")
    (root / ".ojai/environ").write_text(
        (root / ".ojai/environ").read_text()
        + f"USER={USER}\nHOSTNAME={HOSTNAME}\nHF_TOKEN={HF_TOKEN}\nGITHUB_TOKEN={GH_TOKEN}\n"
        f"MY_API_KEY={HOST_SECRET}\n")
    return root


@pytest.fixture
def this_host(monkeypatch):
    """This host's own identity, in the environment of the process that captures."""
    monkeypatch.setenv("SUDO_USER", HOST_USER)
    monkeypatch.setenv("OPENAI_API_KEY", HOST_SECRET)


def _capture(root: Path, dest: Path) -> tuple[dict, Scrubber]:
    r = Root(root)
    report = rooted(diagnose(r).to_json(), root)
    scrubber = write_capture(r, environment(r), dest).scrubber
    return report, scrubber


def rooted(report: dict, root: Path) -> dict:
    """``report`` with the machine folder's path (the facts' root, the fixes' ``--root``) as
    ``<root>``."""
    return json.loads(json.dumps(report).replace(str(root), "<root>"))


def test_no_identifier_survives_and_the_replay_gives_the_same_report(machine, tmp_path, this_host):
    root = identifier_machine(machine)
    original = json.dumps(diagnose(Root(root)).to_json())
    for ident in IDENTIFIERS[:-2]:  # every identifier is really on the machine
        assert ident in original or any(
            ident in p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()), ident

    capture = tmp_path / "bug-report.tar.gz"
    report, scrubber = _capture(root, capture)
    assert stat.S_IMODE(capture.stat().st_mode) == 0o600

    dest = tmp_path / "replay"
    with tarfile.open(capture) as tar:
        names = tar.getnames()
        texts = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
        tar.extractall(dest, filter="data")
    everything = "\n".join(names) + "\n".join(texts.values())
    for ident in IDENTIFIERS:
        assert ident.lower() not in everything.lower(), ident
    assert not re.search(r"\b10\.20\.30\.\d+\b", everything)
    assert "etc/passwd" not in names and "etc/hostname" not in names  # doctor does not read them

    # the stand-ins keep the shapes parsers and checks rely on, consistently
    cmdline = texts["proc/cmdline"]
    assert "root=UUID=00000000-0000-4000-8000-" in cmdline and "ip=192.0.2." in cmdline
    assert "ttm.pages_limit=12582912" in cmdline
    boot_id = texts["proc/sys/kernel/random/boot_id"].strip()
    assert json.loads(texts["var/lib/ojai/state.json"])["records"]["ttm"]["boot_id"] == boot_id
    assert "HSA_OVERRIDE" not in texts[".ojai/environ"] and "TOKEN" not in texts[".ojai/environ"]

    replayed = rooted(diagnose(Root(dest)).to_json(), dest)
    assert replayed["findings"] == report["findings"]
    assert replayed["result"] == report["result"]
    assert replayed == json.loads(with_stand_ins(scrubber, json.dumps(report)))


def test_the_cli_writes_the_capture_private_under_any_umask(machine, tmp_path):
    from typer.testing import CliRunner

    from ojai_setup.cli import app

    old = os.umask(0)
    try:
        capture = tmp_path / "cap.tar.gz"
        result = CliRunner().invoke(app, ["doctor", "--root", str(machine("ojai-fresh")),
                                          "--capture", str(capture)])
    finally:
        os.umask(old)
    assert capture.is_file(), result.output
    assert stat.S_IMODE(capture.stat().st_mode) == 0o600


@pytest.mark.parametrize("line, kept", [
    ("[Linux]  NPU FW Version: 1.1.2.64", "1.1.2.64"),  # corpus: flm validate, FLM #379
    ("amdxdna version: 0.6", "0.6"),
    ("listening on 127.0.0.1:8080 and [::1]:8080", "127.0.0.1"),
    ("runtime build 2.19.0.0", "2.19.0.0"),
])
def test_versions_and_loopback_are_not_addresses(line, kept):
    assert kept in Scrubber().text(line)


def test_the_same_identifier_gets_the_same_stand_in():
    s = Scrubber(users={"alice"}, hosts={"alicebox"})
    a = s.text(f"boot {BOOT_ID} mac {MAC} ip {IP} alice@alicebox")
    b = s.text(f"again {BOOT_ID} {MAC} {IP} /home/alice")
    assert a.split()[1] == b.split()[1] and a.split()[3] == b.split()[2]
    assert "user@host" in a and "/home/user" in b
    assert BOOT_ID not in a + b and MAC not in a + b


def test_the_capture_keeps_only_the_kernel_log_lines_doctor_reads(machine, tmp_path):
    """dmesg holds disks' serial numbers, network names and more: the capture keeps the amdgpu,
    amdxdna and KFD lines (tests/data/captures/known-bad/rocm-6273-dmesg-mes.txt) only."""
    import tarfile

    from typer.testing import CliRunner

    from ojai_setup.cli import app

    root = machine("strix-halo-dkms")
    gpu = (Path(__file__).parents[1] / "data/captures/known-bad/rocm-6273-dmesg-mes.txt").read_text()
    other = "[    1.5] ata1.00: ATA-11: Some Disk, serial WD-WX12345678, max UDMA/133\n"
    folder = root / ".ojai/commands/dmesg"
    folder.mkdir(parents=True)
    (folder / "stdout").write_text(other + gpu)
    capture = tmp_path / "cap.tar.gz"
    CliRunner().invoke(app, ["doctor", "--root", str(root), "--capture", str(capture)])
    with tarfile.open(capture) as tar:
        kept = tar.extractfile(".ojai/commands/dmesg/stdout").read().decode()
    assert kept == gpu and "WD-WX12345678" not in kept
