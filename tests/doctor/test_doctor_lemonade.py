"""``ojai doctor``'s Lemonade finding: version, port and health where Lemonade is installed;
where it is not, the ``ojai setup --lemonade`` choice that installs it on that distribution, the
same choices the lemonade step accepts there."""

from __future__ import annotations

import json
from pathlib import Path

from support import stand_ins
from support.server import free_port
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.domain.checks import KINDS
from ojai_setup.facts.lemonade import health
from ojai_setup.model.facts import Facts

#: /etc/os-release of Debian unstable, as the sid chroot the tests build has it
#: (tests/support/sid.py; debootstrap sid, base-files of forky/sid): no VERSION_ID
SID_OS_RELEASE = """\
PRETTY_NAME="Debian GNU/Linux forky/sid"
NAME="Debian GNU/Linux"
VERSION_CODENAME=forky
ID=debian
HOME_URL="https://www.debian.org/"
SUPPORT_URL="https://www.debian.org/support"
BUG_REPORT_URL="https://bugs.debian.org/"
"""


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def finding(root: Path) -> dict:
    """The Lemonade finding, the machine folder named ``M`` in its fix's commands."""
    report = json.loads(ojai("doctor", "--root", root, "--json").stdout)
    found = next(f for f in report["findings"] if f["id"] == "lemonade.version")
    return {**found, "fix": (found["fix"] or "").replace(f" --root {root} ", " --root M ")}


def debian_sid(machine) -> Path:
    root = machine("strix-halo-debian13-grub-dropin")
    (root / "etc/os-release").write_text(SID_OS_RELEASE)
    return root


def test_missing_lemonade_on_debian_sid_offers_the_release_and_the_distribution_package(machine):
    f = finding(debian_sid(machine))
    assert f["evidence"] == ("Lemonade is not installed; `ojai setup --lemonade release` or "
                             "`ojai setup --lemonade distro` installs it")
    assert "`ojai setup --root M --lemonade release`" in f["fix"]
    assert "`ojai setup --root M --lemonade distro`, from Debian's own lemonade-server package" \
        in f["fix"]


def test_missing_lemonade_on_debian_13_offers_the_release(machine):
    f = finding(machine("strix-halo-debian13-grub-dropin"))
    assert "`ojai setup --root M --lemonade release`" in f["fix"]
    assert "--lemonade distro" not in f["fix"]  # Debian 13 has no lemonade-server package


def test_missing_lemonade_on_ubuntu_offers_the_ppa(machine):
    f = finding(machine("ojai-fresh"))
    assert "`ojai setup --root M --lemonade distro`, from Lemonade's PPA" in f["fix"]
    assert "--lemonade release is not offered" in f["fix"]


def test_missing_lemonade_elsewhere_points_at_lemonades_releases(machine):
    f = finding(machine("strix-halo-r9700-override"))  # Fedora 43
    assert f["evidence"] == "Lemonade is not installed"
    assert "ojai knows no lemonade-server package for fedora" in f["fix"]
    assert "ojai setup --lemonade" not in f["fix"]


def test_installed_lemonade_reports_version_port_and_config_folder(machine):
    root = machine("ojai-fresh")
    stand_ins.give_lemonade(root, (), versions={"lemond --version": "lemond version 2026.39.1-2\n"})
    (root / "var/lib/lemonade/config.json").write_text('{"port": 13400}\n')
    f = finding(root)
    assert f["evidence"].startswith("lemond version 2026.39.1-2 (calendar version, line 2026.39); port 13400; "
                                    "system-service reading /var/lib/lemonade; health: ")


def _check(detail: dict) -> object:
    facts = Facts.model_validate({"root": "/", "tools": {"lemond": {"name": "lemond", "detail": detail}}})
    return KINDS["lemonade_server"](facts, None, {})


def test_a_server_that_does_not_answer_fails():
    port = free_port()
    said = health(port, timeout=1.0)
    assert said.startswith("no answer")
    out = _check({"port": port, "mode": "system-service", "config_dir": "/var/lib/lemonade",
                  "version": None, "health": said})
    assert out.ok is False and f"port {port}" in out.evidence and "no answer" in out.evidence
