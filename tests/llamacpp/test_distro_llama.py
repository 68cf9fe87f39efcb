"""The distribution's own llama.cpp: Debian unstable's ``llama.cpp-tools`` 1:0.7.0+dfsg-2 (build
11669) on the OJAI box, recognised by doctor from the package database, and setup saying what it
runs on before it routes through it.

The machine is a copy of ``ojai-fresh`` turned into Debian unstable with the files the package
really installed (tests/data/captures/debian-sid, taken from ``apt-get install llama.cpp-tools``
in the sid chroot): ``/etc/os-release``, the dpkg status records, the package's file list,
``llama-server --version`` and ``--help``. For the HIP case, the record of
``libggml0-backend-hip`` 0.27.0-1 as Debian's archive lists it (``apt-cache show``), marked
installed, with its ``X-Rocm-Gpu-Architecture``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.distro_box import SID, debian_sid_box
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.doctor import diagnose
from ojai_setup.core.root import COMMANDS_DIR, Root, command_key

def finding(root: Path, fid: str):
    return next(f for f in diagnose(Root(root)).findings if f.id == fid)


def test_the_captures_are_debians_build_11669():
    assert "build 11669, commit Debian" in (SID / "llama-server-version.txt").read_text()
    assert "/usr/bin/llama-server" in (SID / "llama.cpp-tools.list").read_text().splitlines()
    hip = (SID / "apt-cache-show-libggml0-backend-hip.txt").read_text()
    assert "X-Rocm-Gpu-Architecture: gfx803 gfx900 gfx906 gfx908 gfx90a gfx1010 gfx1030 " \
           "gfx1100 gfx1101 gfx1102\n" in hip


def test_doctor_recognises_the_distribution_llama_server(machine, monkeypatch):
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    root = debian_sid_box(machine("ojai-fresh"))
    report = diagnose(Root(root))
    d = report.facts.distro_llama
    assert (d.path, d.manager, d.package, d.package_version, d.build) == (
        "/usr/bin/llama-server", "dpkg", "llama.cpp-tools", "1:0.7.0+dfsg-2", 11669)
    assert d.backends == ["cpu"]
    f = next(f for f in report.findings if f.id == "llama.distro")
    assert f.severity == "warn"
    assert "no HIP backend, so it runs on the CPU" in f.evidence
    assert "llama.cpp-tools 1:0.7.0+dfsg-2 (dpkg)" in f.evidence


def test_a_hip_backend_without_gfx1150_is_said_to_have_no_code_for_it(machine, monkeypatch):
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    root = debian_sid_box(machine("ojai-fresh"), hip=True)
    f = finding(root, "llama.distro")
    assert f.severity == "warn"
    assert "HIP backend (0.27.0-1) has code for gfx803 to gfx1102 only, not gfx1150" in f.evidence
    assert "it would run on the CPU" in f.evidence


def test_a_hip_backend_that_covers_the_target_passes(machine, monkeypatch):
    """The discrete RX 7900 XTX (gfx1100) box, with the same packages."""
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    root = debian_sid_box(machine("gfx1100-desktop"), hip=True)
    f = finding(root, "llama.distro")
    assert f.severity == "pass", f
    assert "has code for gfx1100" in f.evidence


def test_setup_llamacpp_distro_routes_through_it_and_says_it_runs_on_vulkan(machine, monkeypatch,
                                                                              tmp_path):
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    root = debian_sid_box(machine("ojai-fresh"), hip=True, vulkan=True)
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "distro",
                                      "--no-npu", "--json"])
    plan = json.loads(result.stdout)
    step = next(s for s in plan["steps"] if s["step"] == "llama.cpp")
    assert step["status"] == "satisfied"
    assert "distribution's llama-server (--llamacpp distro)" in step["sentence"]
    assert "it would run on the VULKAN backend" in step["sentence"]
    assert any("runs on the VULKAN here" in w for w in step["warnings"])


def test_setup_llamacpp_distro_without_the_package_is_blocked_with_the_install(machine):
    root = machine("ojai-fresh")
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "distro",
                                      "--no-npu", "--json"])
    plan = json.loads(result.stdout)
    step = next(s for s in plan["steps"] if s["step"] == "llama.cpp")
    assert step["status"] == "blocked"
    assert "sudo apt install llama.cpp-tools` on a release that packages it" in step["sentence"]


def test_setup_never_routes_through_it_silently(machine, monkeypatch, tmp_path):
    """--llamacpp none with the distribution's llama-server on PATH: the routes step renders
    its scripts with build 11669's own flags and warns that it runs on the CPU."""
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    from support.stand_ins import route_toml
    from support.tiny_models import write_mtp_pair

    root = debian_sid_box(machine("ojai-fresh"), hip=True)
    pair = write_mtp_pair(tmp_path / "models")
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(route_toml("tiny-gemma", "ojai-test/tiny-gemma4-GGUF", pair.main,
                                  pair.draft))
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none",
                                      "--no-npu", "--model", "tiny-gemma", "--catalog",
                                      str(catalog), "--lemonade-downloads", "--json"])
    plan = json.loads(result.stdout)
    step = next(s for s in plan["steps"] if s["step"] == "routes")
    assert any("the routes run the distribution's llama-server" in w
               and "not gfx1150" in w for w in step["warnings"]), step


def test_an_rpm_owned_llama_server_is_recognised_by_rpm_qf(machine, monkeypatch):
    """On an rpm machine the owner comes from ``rpm -qf`` (Fedora names its package
    ``llama-cpp``; its package version is composed, no capture of one was found, and its
    ``--version`` is the Debian build's)."""
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    root = machine("fedora-bls-stale")
    (root / "var/lib/rpm").mkdir(parents=True, exist_ok=True)
    server = root / "usr/bin/llama-server"
    server.parent.mkdir(parents=True, exist_ok=True)
    server.write_text("")
    server.chmod(0o755)
    for argv, out in ((["rpm", "-qf", "--qf", "%{NAME}\\n", "/usr/bin/llama-server"], "llama-cpp\n"),
                      (["rpm", "-qa", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\\n"],
                       "llama-cpp 11669-1.fc43\n"),
                      (["llama-server", "--version"], None)):
        folder = root / COMMANDS_DIR / command_key(argv)
        folder.mkdir(parents=True, exist_ok=True)
        if out is None:
            (folder / "stderr").write_text((SID / "llama-server-version.txt").read_text())
        else:
            (folder / "stdout").write_text(out)
    d = diagnose(Root(root)).facts.distro_llama
    assert (d.manager, d.package, d.package_version, d.build) == ("rpm", "llama-cpp",
                                                                 "11669-1.fc43", 11669)


@pytest.mark.parametrize("vulkan", [True, False])
def test_setup_llamacpp_distro_backend_vulkan_needs_debians_vulkan_backend(machine, monkeypatch,
                                                                           vulkan):
    """``--backend vulkan`` with the distribution's build: satisfied where Debian's
    ``libggml0-backend-vulkan`` is installed, else blocked with that package to install."""
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    args = ["--llamacpp", "distro", "--backend", "vulkan", "--no-npu", "--json"]
    root = debian_sid_box(machine("ojai-fresh"), hip=True, vulkan=vulkan)
    plan = json.loads(CliRunner().invoke(app, ["setup", "--root", str(root), *args]).stdout)
    step = next(s for s in plan["steps"] if s["step"] == "llama.cpp")
    if vulkan:
        assert step["status"] == "satisfied", step
        assert "llama-server on its Vulkan backend" in step["sentence"] and not step["warnings"]
        return
    assert step["status"] == "blocked"
    assert "has no Vulkan backend installed" in step["sentence"]
    assert "`sudo apt install libggml0-backend-vulkan`" in step["sentence"]
