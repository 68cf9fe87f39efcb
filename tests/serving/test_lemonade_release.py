"""``ojai setup --lemonade release``: Lemonade's lemonade-server .deb from its GitHub release,
against a local stand-in for GitHub (:mod:`support.fake_github`) serving real .deb files.

The release's shape is Lemonade's own (``.github/workflows/cpp_server_build_test_release.yml``
of lemonade-sdk/lemonade): tag ``v<version>``, beside the .deb the ``.msi``, ``.rpm`` and arm64
files ojai must not take. The sha256 is checked before apt sees the file; in the sid chroot the
real ``apt-get`` installs the real Debian package ojai verified.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.debs import ChrootMachine, deb_field, debian_lemonade_deb, tiny_deb
from support.fake_github import FakeGitHub, fake_github  # noqa: F401 - fake_github is a fixture
from typer.testing import CliRunner

from ojai_setup.apply.download import DownloadError
from ojai_setup.apply.executor import apply
from ojai_setup.cli import app
from ojai_setup.core.paths import DEB_CACHE
from ojai_setup.core.progress import NullProgress
from ojai_setup.core.root import COMMANDS_DIR, Root, command_key
from ojai_setup.domain.lemonade_release import REPO, LemonadeReleaseError
from ojai_setup.facts.github import resolve_lemonade_release
from ojai_setup.planning.plan import Plan

TAG = "v11.7.0"
DEB = "lemonade-server_11.7.0-debian13_amd64.deb"
SID = 'PRETTY_NAME="Debian GNU/Linux forky/sid"\nNAME="Debian GNU/Linux"\nID=debian\n'


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def publish(github: FakeGitHub, deb: bytes, *, tag: str = TAG, name: str = DEB,
            latest: bool = True) -> None:
    """A release in the shape of Lemonade's: the Debian 13 .debs and the other platforms'."""
    version = tag.removeprefix("v")
    github.add_release(tag, {
        "lemonade.msi": b"MSI stand-in",
        f"lemonade-server-{version}-fc43.x86_64.rpm": b"RPM stand-in",
        f"lemonade-server_{version}-debian13_arm64.deb": b"arm64 stand-in",
        name: deb,
        f"lemonade-embeddable-{version}-ubuntu-x64.tar.gz": b"tarball stand-in",
    }, repo=REPO, latest=latest)


def give_commands(root: Path, *commands: str) -> None:
    """What the machine's commands answer (the test machine replays captures)."""
    for argv in commands:
        folder = root / COMMANDS_DIR / command_key(argv.split())
        folder.mkdir(parents=True)
        (folder / "stdout").write_text("")
        (folder / "exit_code").write_text("0\n")


@pytest.fixture
def debian(machine) -> Path:
    root = machine("ojai-fresh")
    (root / "etc/os-release").write_text(SID)
    return root


def plan_args(root: Path, *extra: object) -> list[object]:
    return ["setup", "--root", root, "--llamacpp", "none", "--no-npu", "--lemonade", "release",
            *extra]


def lemonade_step(output: str) -> dict:
    return next(s for s in json.loads(output)["steps"] if s["step"] == "lemonade")


# -- the release lookup ---------------------------------------------------------------------------
def test_the_debian_13_amd64_deb_of_the_latest_or_a_pinned_release(fake_github, tmp_path):
    old = tiny_deb(tmp_path / "old", "11.6.0").read_bytes()
    new = tiny_deb(tmp_path / "new").read_bytes()
    publish(fake_github, old, tag="v11.6.0", name="lemonade-server_11.6.0-debian13_amd64.deb")
    publish(fake_github, new)
    latest = resolve_lemonade_release(fake_github.api_base, None)
    assert (latest.tag, latest.name, latest.version, latest.size, latest.sha256) == \
        (TAG, DEB, "11.7.0", len(new), hashlib.sha256(new).hexdigest())
    assert latest.url.endswith(f"/{REPO}/releases/download/{TAG}/{DEB}")
    assert latest.path == f"{DEB_CACHE}/{DEB}"
    pinned = resolve_lemonade_release(fake_github.api_base, "v11.6.0")
    assert (pinned.version, pinned.sha256) == ("11.6.0", hashlib.sha256(old).hexdigest())
    asked = [r.path for r in fake_github.requests]
    assert asked == [f"/repos/{REPO}/releases/latest", f"/repos/{REPO}/releases/tags/v11.6.0"]


def test_a_deb_without_a_digest_is_refused(fake_github, tmp_path):
    publish(fake_github, tiny_deb(tmp_path).read_bytes())
    fake_github.asset(TAG, DEB, repo=REPO).digest = None
    with pytest.raises(LemonadeReleaseError, match="no sha256 digest for " + DEB):
        resolve_lemonade_release(fake_github.api_base, TAG)


def test_a_release_without_the_deb_says_what_it_has(fake_github):
    fake_github.add_release(TAG, {"lemonade.msi": b"MSI"}, repo=REPO)
    with pytest.raises(LemonadeReleaseError, match=r"has no lemonade-server_<version>-debian13_"
                       r"amd64\.deb \(it offers lemonade\.msi"):
        resolve_lemonade_release(fake_github.api_base, TAG)


def test_unknown_and_malformed_tags(fake_github):
    with pytest.raises(LemonadeReleaseError, match=f"no release v9.9.9 in {REPO}"):
        resolve_lemonade_release(fake_github.api_base, "v9.9.9")
    with pytest.raises(LemonadeReleaseError, match="not a Lemonade release tag: 'latest!'"):
        resolve_lemonade_release(fake_github.api_base, "latest!")


# -- ojai setup -----------------------------------------------------------------------------------
def test_setup_plans_the_exact_commands_then_installs_the_verified_deb(fake_github, debian,
                                                                        tmp_path):
    deb = tiny_deb(tmp_path)
    publish(fake_github, deb.read_bytes())
    path = f"{DEB_CACHE}/{DEB}"
    give_commands(debian, f"apt-get install -y {path}", "systemctl enable --now lemond")

    plan = ojai(*plan_args(debian, "--lemonade-tag", TAG, "--json"))
    assert plan.exit_code == 2, plan.output
    step = lemonade_step(plan.stdout)
    assert step["status"] == "change"
    sha = hashlib.sha256(deb.read_bytes()).hexdigest()
    assert step["sentence"] == (
        f"install Lemonade {TAG} from its GitHub release ({DEB}, sha256 {sha[:12]}... checked "
        f"before installing) and enable lemond (apt-get install -y {path}; systemctl enable "
        "--now lemond)")
    assert [a["kind"] for a in step["actions"]] == ["install_package", "run_command"]
    assert step["actions"][0]["sha256"] == sha
    assert step["actions"][1]["argv"] == ["systemctl", "enable", "--now", "lemond"]

    # applied as `ojai setup --apply --plan` would (the test machine only replays apt-get, so
    # the check after the apply, a new plan with nothing to do, is left out)
    out = tmp_path / "plan.json"
    assert ojai(*plan_args(debian, "--lemonade-tag", TAG, "--out", out)).exit_code == 2
    root = Root(debian)
    result = apply(Plan.model_validate_json(out.read_text()), root, NullProgress(), euid=0)
    messages = [a.message for a in result.actions if a.step == "lemonade"]
    assert messages == [f"downloaded and verified {path} (sha256 {sha[:12]}...) and installed "
                        "lemonade-server 11.7.0", "ran systemctl enable --now lemond"]
    ran = [c.argv for c in root.commands if c.argv[0] in ("apt-get", "systemctl")]
    assert ran == [("apt-get", "install", "-y", path), ("systemctl", "enable", "--now", "lemond")]
    kept = debian / path.lstrip("/")
    assert kept.read_bytes() == deb.read_bytes()
    assert (deb_field(kept, "Package"), deb_field(kept, "Version")) == ("lemonade-server", "11.7.0")
    assert len(fake_github.downloads()) == 1


def test_a_digest_mismatch_refuses_before_apt_runs(fake_github, debian, tmp_path):
    publish(fake_github, tiny_deb(tmp_path).read_bytes())
    give_commands(debian, f"apt-get install -y {DEB_CACHE}/{DEB}", "systemctl enable --now lemond")
    out = tmp_path / "plan.json"
    assert ojai(*plan_args(debian, "--out", out)).exit_code == 2
    # the package GitHub serves is no longer the one its digest describes: same size (a size
    # that differs is refused earlier, as a short download), one byte changed
    served = fake_github.asset(TAG, DEB, repo=REPO)
    served.body = served.body[:-1] + bytes([served.body[-1] ^ 0xFF])
    plan = Plan.model_validate_json(out.read_text())
    root = Root(debian)
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        apply(plan, root, NullProgress(), euid=0)
    assert [c.argv[0] for c in root.commands] == []
    cache = debian / DEB_CACHE.lstrip("/")
    assert sorted(p.name for p in cache.iterdir()) == []


def test_github_unreachable_blocks_only_the_lemonade_step(debian, monkeypatch):
    monkeypatch.setenv("OJAI_GITHUB_API", "http://127.0.0.1:9")
    result = ojai(*plan_args(debian, "--lemonade-tag", TAG, "--json"))
    assert result.exit_code == 1, result.output
    steps = {s["step"]: s for s in json.loads(result.stdout)["steps"]}
    blocked = [name for name, s in steps.items() if s["status"] == "blocked"]
    assert blocked == ["lemonade"]
    assert steps["gpu-memory"]["status"] == "change"
    sentence = steps["lemonade"]["sentence"]
    assert sentence.startswith("could not reach the GitHub API at http://127.0.0.1:9/repos/"
                               f"{REPO}/releases/tags/{TAG}")
    ways = steps["lemonade"]["ways"]  # the ways forward, a list
    assert ways[0].startswith("--lemonade distro")
    assert "sudo apt install ./lemonade-server_11.7.0-debian13_amd64.deb" in ways[1]


def test_ubuntu_is_sent_to_the_ppa(fake_github, machine, tmp_path):
    root = machine("ojai-fresh")
    (root / "etc/os-release").write_text('NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n'
                                         "ID_LIKE=debian\n")
    publish(fake_github, tiny_deb(tmp_path).read_bytes())
    result = ojai(*plan_args(root, "--json"))
    assert result.exit_code == 1
    step = lemonade_step(result.stdout)
    assert step["status"] == "blocked"
    assert "ppa:lemonade-team/stable" in step["sentence"]


def test_a_tag_without_release_install_is_a_usage_error(debian):
    result = ojai("setup", "--root", debian, "--lemonade-tag", TAG)
    assert result.exit_code == 64
    assert "add --lemonade release" in result.output


# -- the real apt in Debian unstable ----------------------------------------------------------
@pytest.mark.slow
def test_real_apt_installs_the_debian_package_ojai_verified(fake_github, debian, tmp_path):
    """Debian's own lemonade-server .deb, published as a release: ojai downloads and checks it,
    then the sid chroot's apt-get takes it (the same version is installed there, so apt
    changes nothing: the chroot is shared). A corrupted download never reaches apt."""
    real = debian_lemonade_deb()
    version = deb_field(real, "Version")
    upstream = version.rsplit("-", 1)[0]
    name = f"lemonade-server_{upstream}-debian13_amd64.deb"
    publish(fake_github, real.read_bytes(), tag=f"v{upstream}", name=name)
    out = tmp_path / "plan.json"
    # planning asks whether systemctl exists (the chroot has it; the machine folder says so)
    give_commands(debian, "systemctl enable --now lemond")
    assert ojai(*plan_args(debian, "--out", out)).exit_code == 2
    plan = Plan.model_validate_json(out.read_text())
    # only the Lemonade step: the others' commands (update-grub) are not the chroot's business
    plan = plan.model_copy(update={"steps": tuple(s for s in plan.steps if s.step == "lemonade"),
                                   "handlers": {}})

    machine = ChrootMachine(debian)
    result = apply(plan, machine, NullProgress(), euid=0)
    assert [a.changed for a in result.actions] == [True, True]
    apt = next(c for c in machine.commands if c.argv[0] == "apt-get")
    assert apt.argv == ("apt-get", "install", "-y", f"{DEB_CACHE}/{name}")
    assert apt.exit_code == 0, apt.stderr
    assert f"lemonade-server is already the newest version ({version})" in apt.stdout
    assert (debian / DEB_CACHE.lstrip("/") / name).read_bytes() == real.read_bytes()

    # again, with the file on GitHub damaged: one flipped byte
    (debian / DEB_CACHE.lstrip("/") / name).unlink()
    damaged = bytearray(real.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    fake_github.asset(f"v{upstream}", name, repo=REPO).body = bytes(damaged)
    again = ChrootMachine(debian)
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        apply(plan, again, NullProgress(), euid=0)
    assert again.commands == []
    assert not (debian / DEB_CACHE.lstrip("/") / name).exists()
