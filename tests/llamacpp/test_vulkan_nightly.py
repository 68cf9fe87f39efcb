"""Upstream llama.cpp's Vulkan release as a nightly (``--llamacpp nightly --backend vulkan``):
a tarball laid out as ggml-org/llama.cpp's release workflow packs it, served by the GitHub
stand-in on 127.0.0.1, installed beside Lemonade's ROCm nightly."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from support.fake_github import (  # noqa: F401 - fake_github is a fixture
    UPSTREAM_REPO,
    Entry,
    FakeGitHub,
    fake_github,
    make_upstream_tarball,
    make_zip,
    nightly_entries_from_build,
    upstream_vulkan_entries,
)
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.progress import RecordingProgress
from typer.testing import CliRunner

from ojai_setup.apply.archive import execute_install_archive
from ojai_setup.apply.download import DownloadError
from ojai_setup.cli import app
from ojai_setup.core.root import Root
from ojai_setup.domain import nightly
from ojai_setup.domain.nightly import asset_name, install_action
from ojai_setup.facts.github import resolve_release
from ojai_setup.facts.llama_install import is_installed, read_record

BASE = "/opt/ojai/llama.cpp"
SERVER = b"#!/bin/sh\necho 'version: 7000 (abc1234)' >&2\n"
TARBALL = "llama-b7000-bin-ubuntu-vulkan-x64.tar.gz"


@pytest.fixture
def root(tmp_path: Path) -> Root:
    (tmp_path / "machine").mkdir()
    return Root(tmp_path / "machine")


def publish_vulkan(fake: FakeGitHub, tmp_path: Path, tag: str = "b7000",
                   entries: list[Entry] | None = None) -> bytes:
    """An upstream release ``tag`` with its Vulkan tarball among other assets, as upstream's
    releases carry a dozen builds."""
    (tmp_path / "up").mkdir(exist_ok=True)
    body = make_upstream_tarball(tmp_path / "up" / f"{tag}.tar.gz", tag,
                                 entries or upstream_vulkan_entries(SERVER, tag))
    fake.add_release(tag, {
        f"llama-{tag}-bin-ubuntu-x64.tar.gz": b"the CPU build",
        f"llama-{tag}-bin-ubuntu-vulkan-x64.tar.gz": body,
        f"llama-{tag}-bin-win-vulkan-x64.zip": b"the Windows build",
    }, repo=UPSTREAM_REPO)
    return body


def publish_rocm(fake: FakeGitHub, tmp_path: Path, tag: str = "b1311") -> bytes:
    body = make_zip(tmp_path / f"{tag}.zip", [Entry("llama-server", b"#!/bin/sh\n", 0o100755),
                                              Entry("libllama.so", b"rocm", 0o100755)])
    fake.add_release(tag, {asset_name(tag, "gfx1150"): body})
    return body


def leftovers(root: Root) -> list[str]:
    base = root.resolve(BASE)
    return sorted(p.name for p in base.iterdir() if p.name.startswith(".")) if base.exists() else []


def test_names_and_the_asset_upstream_publishes(fake_github, tmp_path):
    assert asset_name("b7000", "vulkan") == TARBALL
    assert nightly.install_dir_name("b7000", "vulkan") == "b7000-vulkan"
    body = publish_vulkan(fake_github, tmp_path)
    asset = resolve_release(None, None, "vulkan")
    assert (asset.tag, asset.name, asset.family, asset.size) == ("b7000", TARBALL, "vulkan", len(body))
    assert asset.sha256 == hashlib.sha256(body).hexdigest()
    assert asset.url.endswith(f"/{UPSTREAM_REPO}/releases/download/b7000/{TARBALL}")
    asked = [r.path for r in fake_github.requests if r.path.startswith("/repos/")]
    assert asked == [f"/repos/{UPSTREAM_REPO}/releases/latest"]
    assert "github.com/ggml-org/llama.cpp/releases" in install_action(asset).reason


def test_a_release_without_the_vulkan_build_says_what_it_offers(fake_github):
    fake_github.add_release("b7001", {"llama-b7001-bin-ubuntu-x64.tar.gz": b"cpu"},
                            repo=UPSTREAM_REPO)
    with pytest.raises(nightly.NightlyError, match="has no llama-b7001-bin-ubuntu-vulkan-x64"
                       r".tar.gz; it offers no Ubuntu Vulkan build"):
        resolve_release(None, "b7001", "vulkan")


def test_upstream_tarball_installs_flat_beside_the_rocm_nightly(fake_github, tmp_path, root):
    publish_rocm(fake_github, tmp_path)
    rocm = install_action(resolve_release(None, None, "gfx1150"))
    assert execute_install_archive(root, rocm, RecordingProgress()).changed
    body = publish_vulkan(fake_github, tmp_path)
    vulkan = install_action(resolve_release(None, None, "vulkan"))
    assert vulkan.dest == f"{BASE}/b7000-vulkan"
    assert execute_install_archive(root, vulkan, RecordingProgress()).changed

    dest = root.resolve(vulkan.dest)
    names = sorted(p.name for p in dest.iterdir())
    # the top folder llama-b7000/ is unpacked flat, as the ROCm zip is
    assert names == sorted([e.name for e in upstream_vulkan_entries(SERVER, "b7000")]
                           + ["ojai-install.json"])
    assert (dest / "llama-server").read_bytes() == SERVER and os.access(dest / "llama-server", os.X_OK)
    assert os.readlink(dest / "libllama.so") == "libllama.so.0"
    record = read_record(root, vulkan.dest)
    assert (record.tag, record.family, record.asset, record.sha256) == (
        "b7000", "vulkan", TARBALL, hashlib.sha256(body).hexdigest())
    # both installed and verified; current names the one installed last
    assert is_installed(root, rocm.dest, rocm.sha256) and is_installed(root, vulkan.dest, vulkan.sha256)
    assert os.readlink(root.resolve(f"{BASE}/current")) == "b7000-vulkan"
    assert leftovers(root) == []
    downloads = len(fake_github.downloads())
    assert execute_install_archive(root, rocm, RecordingProgress()).changed  # the link only
    assert os.readlink(root.resolve(f"{BASE}/current")) == "b1311-gfx1150"
    assert len(fake_github.downloads()) == downloads


def test_a_wrong_digest_is_refused_with_nothing_unpacked(fake_github, tmp_path, root):
    body = publish_vulkan(fake_github, tmp_path)
    wrong = hashlib.sha256(b"another tarball").hexdigest()
    fake_github.asset("b7000", TARBALL, repo=UPSTREAM_REPO).digest = f"sha256:{wrong}"
    action = install_action(resolve_release(None, None, "vulkan"))
    with pytest.raises(DownloadError) as err:
        execute_install_archive(root, action, RecordingProgress())
    assert f"expected {wrong}, got {hashlib.sha256(body).hexdigest()}" in str(err.value)
    assert not root.exists(action.dest) and not root.exists(f"{BASE}/current")
    assert leftovers(root) == []


@pytest.mark.parametrize("entries, says", [
    ([Entry("llama-server", SERVER, 0o100755)], "no llama-server in llama-b7000/"),
    ([Entry("llama-server", SERVER, 0o100755), Entry("../evil", b"x")], "climbs out"),
    ([Entry("llama-server", SERVER, 0o100755), Entry.symlink("libx.so", "/etc/passwd")],
     "outside the archive"),
])
def test_a_hostile_or_misplaced_tarball_is_refused_before_unpacking(fake_github, tmp_path, root,
                                                                    entries, says):
    body = make_upstream_tarball(tmp_path / "t.tar.gz", "b7000", entries)
    if says.startswith("no llama-server"):  # llama-server at the top, not in llama-b7000/
        import io
        import tarfile
        with tarfile.open(tmp_path / "t.tar.gz", "w:gz") as tf:
            info = tarfile.TarInfo("llama-server")
            info.size, info.mode = len(SERVER), 0o755
            tf.addfile(info, io.BytesIO(SERVER))
        body = (tmp_path / "t.tar.gz").read_bytes()
    fake_github.add_release("b7000", {TARBALL: body}, repo=UPSTREAM_REPO)
    action = install_action(resolve_release(None, None, "vulkan"))
    with pytest.raises(nightly.NightlyError, match=says.replace("(", r"\(")):
        execute_install_archive(root, action, RecordingProgress())
    assert not root.exists(action.dest) and leftovers(root) == []


def test_an_older_release_zip_of_build_bin_installs_flat(fake_github, tmp_path, root):
    body = make_zip(tmp_path / "old.zip", [Entry("build/", b"", 0o040755),
                                           Entry("build/bin/", b"", 0o040755),
                                           Entry("build/bin/llama-server", SERVER, 0o100755),
                                           Entry("build/bin/libggml-vulkan.so", b"v", 0o100755)])
    fake_github.add_release("b4500", {"llama-b4500-bin-ubuntu-vulkan-x64.zip": body},
                            repo=UPSTREAM_REPO)
    action = install_action(resolve_release(None, "b4500", "vulkan"))
    assert action.url.endswith("llama-b4500-bin-ubuntu-vulkan-x64.zip")
    assert execute_install_archive(root, action, RecordingProgress()).changed
    assert sorted(p.name for p in root.resolve(action.dest).iterdir()) == [
        "libggml-vulkan.so", "llama-server", "ojai-install.json"]


def test_the_real_llama_server_in_upstream_layout_runs_from_its_folder(fake_github, tmp_path, root,
                                                                      llama_server_bin):
    entries = nightly_entries_from_build(llama_server_bin.parent, llama_server_bin)
    publish_vulkan(fake_github, tmp_path, entries=entries)
    action = install_action(resolve_release(None, None, "vulkan"))
    assert execute_install_archive(root, action, RecordingProgress()).changed
    result = root.run([f"{BASE}/current/llama-server", "--version"], env={"LD_DEBUG": "libs"},
                      timeout=60)
    assert result.exit_code == 0, result.stderr
    built = subprocess.run([llama_server_bin, "--version"], capture_output=True, text=True, timeout=60)
    version = next(line for line in (built.stdout + built.stderr).splitlines()
                   if line.startswith("version: "))
    assert version in (result.stdout + result.stderr).splitlines()
    loaded = [line for line in result.stderr.splitlines() if "calling init:" in line and "libllama" in line]
    assert loaded and all(str(root.resolve(f"{BASE}/b7000-vulkan")) in line for line in loaded), loaded


# -- through ojai setup -----------------------------------------------------------------------
def ojai(*args: str):
    return CliRunner().invoke(app, list(args))


def test_setup_plans_and_applies_the_vulkan_nightly_and_its_routes(machine, fake_github, tmp_path):
    root = machine("ojai-fresh")
    publish_vulkan(fake_github, tmp_path)
    result = ojai("setup", "--root", str(root), "--json", "--no-npu", "--llamacpp", "nightly",
                  "--backend", "vulkan")
    plan = json.loads(result.stdout)
    step = next(s for s in plan["steps"] if s["step"] == "llama.cpp")
    assert step["status"] == "change", step
    assert "nightly b7000 for vulkan" in step["sentence"]
    [action] = step["actions"]
    assert action["dest"] == f"{BASE}/b7000-vulkan" and action["url"].endswith(TARBALL)
    applied = ojai("setup", "--root", str(root), "--apply", "--yes", "--no-npu", "--llamacpp",
                   "nightly", "--backend", "vulkan")
    assert os.readlink(root / BASE.lstrip("/") / "current") == "b7000-vulkan", applied.output
    again = ojai("setup", "--root", str(root), "--json", "--no-npu", "--llamacpp", "nightly",
                 "--backend", "vulkan")
    step = next(s for s in json.loads(again.stdout)["steps"] if s["step"] == "llama.cpp")
    assert step["status"] == "satisfied" and "b7000 for vulkan is installed and verified" in step["sentence"]
