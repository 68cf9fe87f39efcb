"""Safe by default, on copies of the test machines: services run as an unprivileged system user
under hardened units that `systemd-analyze verify` accepts; every file and folder ojai creates
has its mode whatever the umask; `--host` is checked for every route and warned about when it
is not loopback; an API key reaches llama-server only through a root-only environment file;
unpacking a nightly zip is capped."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
from support.fake_github import Entry, fake_github, make_zip  # noqa: F401 - a fixture
from support.machine_state import store_capture
from support.progress import RecordingProgress
from typer.testing import CliRunner

from ojai_setup.apply.archive import _unpack, check_archive, execute_install_archive, unpack_limit
from ojai_setup.cli import app
from ojai_setup.core.address import AddressError, check_host, is_loopback
from ojai_setup.core.paths import ARCHIVE_EXPANSION, ARCHIVE_MAX_BYTES, GIB
from ojai_setup.core.root import CommandResult, Root
from ojai_setup.domain.launch import LaunchError, render_flm_script, render_llama_unit
from ojai_setup.domain.nightly import NightlyError, asset_name, install_action
from ojai_setup.facts.github import resolve_release
from tests.support.text import flat

FLM_UNIT = "etc/systemd/system/ojai-flm-gemma4-it-e4b.service"
FLM_SCRIPT = "opt/ojai/routes/flm-gemma4-it-e4b.sh"


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def umask_000():
    """Run the test body under umask 000, the careless admin's; restored afterwards."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def npu_machine(machine) -> Path:
    """The OJAI box after its GPU limit was applied, FastFlowLM ready (its real `flm
    validate`), and `systemctl daemon-reload` answering as on the real machine."""
    root = machine("ojai-applied")
    store_capture(root, CommandResult(("systemctl", "daemon-reload"), 0, ""))
    return root


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def loose_modes(root: Path, *tops: str) -> list[str]:
    """Everything under ``tops`` that group or others may write, or that is setuid/setgid."""
    bad = []
    for top in tops:
        for p in [root / top, *(root / top).rglob("*")]:
            if p.is_symlink() or not p.exists():
                continue
            m = p.lstat().st_mode
            if m & 0o022 or m & (stat.S_ISUID | stat.S_ISGID):
                bad.append(f"{p.relative_to(root)} {stat.S_IMODE(m):o}")
    return bad


# -- 1. the service user and the hardened units ------------------------------------------------
def test_services_run_as_a_system_user_the_plan_creates(machine, umask_000):
    root = npu_machine(machine)
    assert "ojai:" not in (root / "etc/passwd").read_text() if (root / "etc/passwd").exists() else True
    plan = ojai("setup", "--root", root, "--systemd", "--llamacpp", "none")
    assert plan.exit_code == 2, plan.output
    assert "change service-user: create the unprivileged system user ojai" in flat(plan.stdout)

    first = ojai("setup", "--root", root, "--systemd", "--llamacpp", "none", "--apply", "--yes")
    assert first.exit_code == 0, first.output
    passwd = {line.split(":")[0]: line.split(":") for line in
              (root / "etc/passwd").read_text().splitlines()}
    user = passwd["ojai"]
    assert 0 < int(user[2]) < 1000 and user[6] == "/usr/sbin/nologin" and user[5] == "/nonexistent"
    unit = (root / FLM_UNIT).read_text()
    assert "User=ojai\n" in unit and "User=root" not in unit
    assert "ProtectSystem=strict" in unit and "LimitMEMLOCK=infinity" in unit
    assert "DeviceAllow=char-accel rw" in unit and "PrivateDevices" not in unit

    second = ojai("setup", "--root", root, "--systemd", "--llamacpp", "none", "--apply", "--yes")
    assert second.exit_code == 0 and "nothing to do" in second.stdout, second.output
    assert "the services run as the system user ojai, which exists" in second.stdout


def test_units_do_not_take_the_invoking_user(machine, monkeypatch):
    root = npu_machine(machine)
    (root / ".ojai/environ").write_text("SUDO_USER=alice\n")
    monkeypatch.setenv("SUDO_USER", "bob")
    result = ojai("setup", "--root", root, "--systemd", "--llamacpp", "none", "--json")
    data = json.loads(result.stdout)
    units = [a["after"] for s in data["steps"] for a in s["actions"]
             if a["kind"] == "write_file" and a["path"].endswith(".service")]
    assert units and all("User=ojai\n" in u for u in units)
    assert not any("alice" in u or "bob" in u for u in units)


def _in_machine(root: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """Run ``argv`` with the machine's /opt mounted over the host's (private mount namespace),
    so that a unit's ExecStart= path resolves into the test machine."""
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           'mount --bind "$1/opt" /opt && shift && exec "$@"', "sh", str(root),
                           *argv], capture_output=True, text=True)


def test_written_units_pass_systemd_analyze_verify_and_score_low(machine, tmp_path):
    root = npu_machine(machine)
    assert ojai("setup", "--root", root, "--systemd", "--llamacpp", "none", "--apply",
                "--yes").exit_code == 0
    units = {"flm": root / FLM_UNIT}
    llama = tmp_path / "ojai-tiny-mtp.service"
    llama.write_text(render_llama_unit(f"/{FLM_SCRIPT}", "tiny-mtp",
                                       models_dir="/var/lib/ojai/models",
                                       env_file="/etc/ojai/llama-server.env",
                                       conflicts=("ojai-tiny.service",)))
    units["llama"] = llama
    # the plain route's unit, which cannot share the GPU budget with the MTP route's
    plain = tmp_path / "ojai-tiny.service"
    plain.write_text(render_llama_unit(f"/{FLM_SCRIPT}", "tiny", models_dir="/var/lib/ojai/models",
                                       conflicts=("ojai-tiny-mtp.service",)))
    units["plain"] = plain
    for unit in units.values():
        proc = _in_machine(root, ["systemd-analyze", "verify", str(unit)])
        assert proc.returncode == 0 and unit.name not in proc.stderr, proc.stderr
        proc = _in_machine(root, ["systemd-analyze", "security", "--offline=yes", str(unit)])
        score = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout)
        assert score, proc.stdout + proc.stderr
        assert float(score.group(1)) <= 2.0, proc.stdout  # "OK" on systemd's 0-10 scale


def test_llama_unit_hardening_follows_the_models_folder_and_the_host():
    unit = render_llama_unit("/opt/ojai/routes/r.sh", "r", models_dir="/home/alice/models")
    assert "ProtectHome=tmpfs\nBindReadOnlyPaths=/home/alice/models\n" in unit
    local = render_llama_unit("/opt/ojai/routes/r.sh", "r", models_dir="/var/lib/ojai/models")
    assert "ProtectHome=yes\n" in local and "BindReadOnlyPaths" not in local
    assert "IPAddressDeny=any" in local and "IPAddressAllow=localhost" in local
    open_unit = render_llama_unit("/opt/ojai/routes/r.sh", "r", host="0.0.0.0")
    assert "IPAddressDeny" not in open_unit
    assert "User=ojai\n" in local and "CapabilityBoundingSet=\n" in local
    assert "DeviceAllow=/dev/kfd rw" in local and "PrivateDevices" not in local


# -- 2. modes whatever the umask ---------------------------------------------------------------
def test_apply_under_umask_000_gives_every_path_its_mode(machine, tmp_path, umask_000):
    root = npu_machine(machine)
    (root / "etc/default/grub").write_text(
        (root / "etc/default/grub").read_text().replace("12582912", "8388608"))
    plan_file = tmp_path / "plan.json"
    made = ojai("setup", "--root", root, "--systemd", "--llamacpp", "none", "--out", plan_file)
    assert made.exit_code == 2, made.output
    assert mode(plan_file) == 0o600
    applied = ojai("setup", "--root", root, "--apply", "--plan", plan_file)
    assert applied.exit_code == 0, applied.output

    assert loose_modes(root, "opt/ojai", "var/lib/ojai", "etc/systemd/system") == []
    assert mode(root / "opt/ojai") == 0o755 and mode(root / "opt/ojai/routes") == 0o755
    assert mode(root / FLM_SCRIPT) == 0o755 and mode(root / FLM_UNIT) == 0o644
    state = root / "var/lib/ojai"
    assert mode(state) == 0o755 and mode(state / "state.json") == 0o644
    assert mode(state / "journal") == 0o700
    assert [mode(p) for p in (state / "journal").iterdir()] == [0o600]
    backups = state / "backups"
    assert mode(backups) == 0o700
    kept = [p for p in backups.rglob("*")]
    assert any(p.name == "grub" for p in kept)
    assert all(mode(p) == (0o700 if p.is_dir() else 0o600) for p in kept)


def test_nightly_install_modes_under_umask_000(fake_github, tmp_path, umask_000):
    body = make_zip(tmp_path / "n.zip", [Entry("llama-server", b"#!/bin/sh\n", 0o100777),
                                         Entry("lib/", b"", stat.S_IFDIR | 0o777),
                                         Entry("lib/libggml.so", b"\x7fELF", 0o100666)])
    fake_github.add_release("b1311", {asset_name("b1311", "gfx1150"): body})
    root = Root(tmp_path / "m")
    (tmp_path / "m").mkdir()
    action = install_action(resolve_release(None, None, "gfx1150"))
    assert action.size == len(body)
    assert execute_install_archive(root, action, RecordingProgress()).changed
    m = tmp_path / "m"
    assert loose_modes(m, "opt") == []
    dest = m / "opt/ojai/llama.cpp/current"
    assert mode(m / "opt/ojai") == 0o755 and mode(dest.resolve()) == 0o755
    assert mode(dest / "lib") == 0o755 and mode(dest / "llama-server") == 0o755
    assert mode(dest / "lib/libggml.so") == 0o644
    assert mode(dest / "ojai-install.json") == 0o644


# -- 4. --host and the API key -----------------------------------------------------------------
@pytest.mark.parametrize("host", ["0.0.0.0 --evil", "", "a b", "999.1.1.1", "-x", "fe80::1%eth0",
                                  "[::1]", "host_name", "x" * 254, "a..b", "$(reboot)"])
def test_host_is_refused_unless_an_address_or_name(machine, host):
    root = npu_machine(machine)
    result = ojai("setup", "--root", root, "--host", host, "--llamacpp", "none")
    assert result.exit_code == 64, result.output
    assert "--host" in result.stderr
    with pytest.raises(AddressError):
        check_host(host)
    with pytest.raises(LaunchError):
        render_llama_unit("/opt/ojai/routes/r.sh", "r", host=host)
    with pytest.raises(LaunchError):
        render_flm_script("qwen3:4b", ctx_len=4096, host=host)


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("::1", True),
                                            ("localhost", True), ("127.0.0.2", True),
                                            ("0.0.0.0", False), ("192.168.1.20", False),
                                            ("ojai-box.lan", False), ("::", False)])
def test_host_forms_and_loopback(host, loopback):
    assert check_host(host) == host and is_loopback(host) is loopback


def test_non_loopback_host_is_warned_in_the_plan(machine):
    root = npu_machine(machine)
    quiet = ojai("setup", "--root", root, "--llamacpp", "none")
    assert quiet.exit_code == 2 and "warning" not in quiet.stdout
    loud = ojai("setup", "--root", root, "--llamacpp", "none", "--host", "0.0.0.0")
    assert loud.exit_code == 2, loud.output
    assert "warning: FastFlowLM gemma4-it:e4b will listen on 0.0.0.0 (not loopback)" in \
        " ".join(loud.stdout.split())
    data = json.loads(ojai("setup", "--root", root, "--llamacpp", "none", "--host",
                           "192.168.1.20", "--json").stdout)
    npu = next(s for s in data["steps"] if s["step"] == "npu")
    assert npu["warnings"] and "192.168.1.20" in npu["warnings"][0]


def test_api_key_file_needs_systemd_and_a_usable_key(machine, tmp_path):
    root = npu_machine(machine)
    key = tmp_path / "key"
    key.write_text("k" * 32 + "\n")
    alone = ojai("setup", "--root", root, "--llamacpp", "none", "--api-key-file", key)
    assert alone.exit_code == 64 and "--api-key-file needs --systemd" in alone.stderr
    key.write_text("too-short\n")
    bad = ojai("setup", "--root", root, "--llamacpp", "none", "--systemd", "--api-key-file", key)
    assert bad.exit_code == 64 and "16 to 512" in bad.stderr
    missing = ojai("setup", "--root", root, "--llamacpp", "none", "--systemd", "--api-key-file",
                   tmp_path / "nope")
    assert missing.exit_code == 64 and "cannot read it" in missing.stderr


@pytest.mark.parametrize("content, why", [("", "empty"), ("short\n", "16 to 512"),
                                          ("a" * 20 + "\n" + "b" * 20 + "\n", "single line"),
                                          ("with space " * 3, "16 to 512"),
                                          ("'quoted-key-value-here'", "16 to 512")])
def test_bad_api_keys_are_refused_with_the_reason(tmp_path, content, why):
    from ojai_setup.domain.launch import read_secret

    key = tmp_path / "key"
    key.write_text(content)
    with pytest.raises(LaunchError, match=why):
        read_secret(str(key))
    with pytest.raises(LaunchError, match="cannot read"):
        read_secret(str(tmp_path / "missing"))


# -- 5. the unpacking cap ----------------------------------------------------------------------
def test_unpack_limit_is_a_multiple_of_the_stated_size_with_a_ceiling():
    assert unpack_limit(100 << 20) == (100 << 20) * ARCHIVE_EXPANSION
    assert unpack_limit(10 * GIB) == ARCHIVE_MAX_BYTES
    assert unpack_limit(None) == ARCHIVE_MAX_BYTES


def test_a_zip_bomb_is_refused_before_anything_is_written(tmp_path):
    bomb = tmp_path / "bomb.zip"
    data = make_zip(bomb, [Entry("llama-server", b"#!/bin/sh\n", 0o100755),
                           Entry("libhuge.so", b"\0" * (64 << 20), 0o100644)])
    assert len(data) * ARCHIVE_EXPANSION < 64 << 20  # deflate packs 64 MiB of zeros tightly
    with zipfile.ZipFile(bomb) as zf, pytest.raises(NightlyError, match="unpacks to more than"):
        check_archive(zf, limit=unpack_limit(len(data)))


def test_unpacking_stops_at_the_cap_even_when_sizes_lie(tmp_path):
    bomb = tmp_path / "bomb.zip"
    make_zip(bomb, [Entry("llama-server", b"#!/bin/sh\n", 0o100755),
                    Entry("a.so", b"\0" * 300_000, 0o100644),
                    Entry("b.so", b"\0" * 300_000, 0o100644)])
    staging = tmp_path / "stage"
    staging.mkdir()
    with zipfile.ZipFile(bomb) as zf:
        entries = zf.infolist()
        with pytest.raises(NightlyError, match="unpacks to more than 400000 bytes"):
            _unpack(zf, entries, staging, RecordingProgress(), limit=400_000)
    written = sum(p.stat().st_size for p in staging.rglob("*") if p.is_file())
    assert written <= 400_000


def test_source_build_staging_sets_modes_whatever_the_build_left(tmp_path, umask_000):
    from ojai_setup.apply.build import _stage

    build_bin = tmp_path / "bin"
    build_bin.mkdir()
    (build_bin / "llama-server").write_bytes(b"\x7fELF")
    (build_bin / "llama-server").chmod(0o777)  # what a build under umask 000 leaves
    (build_bin / "libggml.so.0").write_bytes(b"\x7fELF")
    (build_bin / "libggml.so.0").chmod(0o666)
    (build_bin / "libggml.so").symlink_to("libggml.so.0")
    stage = tmp_path / "stage"
    assert _stage(build_bin, stage) == ["llama-server", "libggml.so", "libggml.so.0"]
    assert mode(stage) == 0o755
    assert mode(stage / "llama-server") == 0o755 and mode(stage / "libggml.so.0") == 0o755
    assert (stage / "libggml.so").is_symlink()
    assert loose_modes(tmp_path, "stage") == []


def test_units_leave_out_device_groups_the_machine_lacks():
    """systemd refuses to start a unit whose SupplementaryGroups= names a missing group."""
    debian = render_llama_unit("/opt/ojai/routes/r.sh", "r", groups=frozenset({"root", "video"}))
    assert "SupplementaryGroups=video\n" in debian
    ubuntu = render_llama_unit("/opt/ojai/routes/r.sh", "r", groups=frozenset({"render", "video"}))
    assert "SupplementaryGroups=render video\n" in ubuntu
    from ojai_setup.domain.launch import render_flm_unit

    assert "SupplementaryGroups" not in render_flm_unit("/opt/ojai/routes/f.sh", "qwen3:4b",
                                                        groups=frozenset({"video"}))


def test_the_plan_reads_the_machines_groups(machine):
    root = npu_machine(machine)
    (root / "etc/group").write_text("root:x:0:\nvideo:x:44:\n")
    data = json.loads(ojai("setup", "--root", root, "--systemd", "--llamacpp", "none", "--json").stdout)
    unit = next(a["after"] for s in data["steps"] for a in s["actions"]
                if a["kind"] == "write_file" and a["path"].endswith(".service"))
    assert "SupplementaryGroups" not in unit  # no render group on this machine
    (root / "etc/group").write_text("root:x:0:\nrender:x:110:\n")
    data = json.loads(ojai("setup", "--root", root, "--systemd", "--llamacpp", "none", "--json").stdout)
    unit = next(a["after"] for s in data["steps"] for a in s["actions"]
                if a["kind"] == "write_file" and a["path"].endswith(".service"))
    assert "SupplementaryGroups=render\n" in unit
