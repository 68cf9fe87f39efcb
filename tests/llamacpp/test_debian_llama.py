"""A second real llama.cpp build: Debian unstable's ``llama.cpp-tools`` (build 11669), installed
with ``apt-get install`` in an overlay of the sid chroot (tests/support/sid_llama.py), running
ojai's dialect probe and the same tiny routes as the b11434 build does in test_end_to_end.py:
``ojai setup --llamacpp distro --apply`` writes the launch scripts in that build's own flags, and
the scripts, run unchanged inside the chroot, serve; the MTP route drafts with the tiny head.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support import sid_llama
from support.fake_hub import FakeHub, fake_hub  # noqa: F401 - a fixture
from support.server import free_port, serve
from support.stand_ins import route_toml
from support.tiny_models import write_mtp_pair
from support.distro_box import SID, debian_sid_box
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.domain.render import Route, render_args
from ojai_setup.formats.llama_help import parse_help, parse_version

pytestmark = pytest.mark.slow

REPO = "ojai-test/tiny-gemma4-GGUF"
ROUTE = "tiny-gemma"
#: the rendering must get past argument parsing: these say it did not
ARGUMENT_ERRORS = ("error while handling argument", "invalid argument", "usage:",
                   "to show complete usage")


@pytest.fixture(scope="module")
def overlay() -> Path:
    if os.geteuid() != 0:
        pytest.fail("the sid overlay needs root (unshare, mount): run the tests as root")
    return sid_llama.ensure_sid_llama()


def test_the_probe_reads_the_real_build_as_the_captures_say(overlay):
    version = sid_llama.run_in_overlay(["llama-server", "--version"])
    helped = sid_llama.run_in_overlay(["llama-server", "--help"])
    assert version.stderr == (SID / "llama-server-version.txt").read_text()
    dialect = parse_help(helped.stdout, version=parse_version(version.stderr))
    saved = parse_help((SID / "llama-server-help.txt").read_text(),
                       version=parse_version(version.stderr))
    assert dialect == saved
    assert dialect.version.build == 11669 and dialect.version.semver == "0.7.0"
    assert "draft-mtp" in dialect.spec_types and dialect.complete
    names = {n for o in dialect.options for n in o.names}
    assert {"--moe-cache-mib", "--spec-draft-n-ubatch", "--spec-draft-model"} <= names


def test_the_package_files_doctor_reads_are_what_apt_get_installed(overlay):
    """The test machine's dpkg records and file list (support/distro_box.py) are the overlay's."""
    from ojai_setup.formats.packages import parse_dpkg_status

    names = {"llama.cpp-tools", "libllama0", "libggml0"}
    status = sid_llama.run_in_overlay(["cat", "/var/lib/dpkg/status"]).stdout
    listed = sid_llama.run_in_overlay(["cat", "/var/lib/dpkg/info/llama.cpp-tools.list"]).stdout
    assert parse_dpkg_status(status, names) == parse_dpkg_status(
        (SID / "llama.cpp-tools-status.txt").read_text(), names)
    assert listed == (SID / "llama.cpp-tools.list").read_text()
    owner = sid_llama.run_in_overlay(["dpkg", "-S", "/usr/bin/llama-server"]).stdout
    assert owner.strip() == "llama.cpp-tools: /usr/bin/llama-server"


def test_rendered_arguments_get_past_the_real_parser(overlay, tmp_path):
    dialect = parse_help((SID / "llama-server-help.txt").read_text(),
                         version=parse_version((SID / "llama-server-version.txt").read_text()))
    route = Route(name="gemma4", model="/nonexistent/main.gguf",
                  draft_model="/nonexistent/mtp.gguf", spec_type="draft-mtp", draft_n_max=3,
                  draft_n_min=0, ctx_size=4096, flash_attn="auto", load_mode="none")
    args = render_args(route, dialect)
    res = sid_llama.run_in_overlay(["llama-server", *args], check=False, timeout=120)
    out = (res.stdout + res.stderr).lower()
    assert res.returncode != 0  # the model does not exist ...
    assert not any(e in out for e in ARGUMENT_ERRORS), out[-2000:]  # ... the arguments do
    assert "nonexistent/main.gguf" in out


def test_ojais_tiny_routes_serve_on_debians_build(overlay, machine, tmp_path, monkeypatch,
                                                 fake_hub: FakeHub):
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")  # the machine answers from the captures
    root = debian_sid_box(machine("ojai-fresh"))
    pair = write_mtp_pair(tmp_path / "published")
    fake_hub.add_path(REPO, pair.main.name, pair.main)
    fake_hub.add_path(REPO, pair.draft.name, pair.draft)
    port = free_port()
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(route_toml(ROUTE, REPO, pair.main, pair.draft, draft_n_max=3))
    setup = ["setup", "--root", str(root), "--llamacpp", "distro", "--no-npu", "--model", ROUTE,
             "--catalog", str(catalog), "--port", str(port)]
    applied = CliRunner().invoke(app, [*setup, "--apply", "--yes"])
    assert applied.exit_code == 0, applied.output
    mtp = (root / f"opt/ojai/routes/{ROUTE}-mtp.sh").read_text()
    assert "/usr/bin/llama-server" in mtp and "draft-mtp" in mtp

    binds = [(root / "opt/ojai", "/opt/ojai"), (root / "var/lib/ojai", "/var/lib/ojai")]
    results = {}
    for name, at in ((f"{ROUTE}-mtp", port), (ROUTE, port + 1)):
        scratch = tmp_path / f"overlay-{name}"
        argv = sid_llama.overlay_argv(scratch, ["bash", f"/opt/ojai/routes/{name}.sh"],
                                      binds=binds)
        with serve(argv, at, tmp_path / f"{name}.log"):
            verify = CliRunner().invoke(app, ["verify", "--root", str(root), "--json",
                                              "--route", name])
            assert verify.exit_code == 0, verify.output
            results[name] = json.loads(verify.stdout)["routes"][0]
    drafted = results[f"{ROUTE}-mtp"]
    assert drafted["healthy"] and drafted["draft_n"] > 0 and drafted["draft_n_accepted"] > 0
    plain = results[ROUTE]
    assert plain["healthy"] and plain["predicted_n"] > 0 and plain["draft_n"] is None


def test_dpkg_keeps_the_gpu_architecture_field_that_doctor_reads(overlay, tmp_path):
    """The field doctor reads from /var/lib/dpkg/status is one dpkg keeps there: a .deb built
    with libggml0-backend-hip's own X-Rocm-Gpu-Architecture value, installed by the real dpkg
    in the overlay (the 115 MB package itself is not downloaded)."""
    import subprocess

    from ojai_setup.facts.packages import hip_targets
    from ojai_setup.formats.packages import parse_dpkg_status
    from ojai_setup.model.facts import Package

    record = (SID / "apt-cache-show-libggml0-backend-hip.txt").read_text()
    field = next(line for line in record.splitlines()
                 if line.startswith("X-Rocm-Gpu-Architecture:"))
    tree = tmp_path / "pkg"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text(
        "Package: ojai-hip-field\nVersion: 0.27.0-1\nArchitecture: all\n"
        f"Maintainer: ojai tests <dev@ojai.invalid>\n{field}\nDescription: field probe\n")
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree),
                    str(tmp_path / "p.deb")], check=True, capture_output=True)
    done = sid_llama.run_in_overlay(["sh", "-c", "dpkg -i /x/p.deb >/dev/null && "
                                     "cat /var/lib/dpkg/status"], binds=[(tmp_path, "/x")])
    rec = parse_dpkg_status(done.stdout, {"ojai-hip-field"})["ojai-hip-field"]
    targets = hip_targets(Package(name=rec.name, version=rec.version, manager="dpkg",
                                  fields=rec.fields))
    assert targets == field.split(":", 1)[1].split() and "gfx1150" not in targets
