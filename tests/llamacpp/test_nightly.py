"""Installing llama.cpp from Lemonade's nightly ROCm zips, against a local stand-in for GitHub."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import subprocess
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
from support.fake_github import (  # noqa: F401 - fake_github is a fixture
    Entry,
    FakeGitHub,
    fake_github,
    make_zip,
    nightly_entries_from_build,
)
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.progress import RecordingProgress

from ojai_setup.apply.archive import execute_install_archive
from ojai_setup.apply.download import DownloadError, download
from ojai_setup.apply.executor import apply
from ojai_setup.core.progress import NullProgress
from ojai_setup.core.root import Root
from ojai_setup.domain import nightly
from ojai_setup.domain.nightly import (
    CURRENT_LINK,
    NightlyAsset,
    NightlyError,
    asset_name,
    family_for_target,
    install_action,
    install_dir_name,
)
from ojai_setup.facts import github
from ojai_setup.facts.github import resolve_release
from ojai_setup.facts.llama_install import is_installed, read_record
from ojai_setup.model.actions import InstallArchive
from ojai_setup.planning.plan import Fingerprint, Plan
from ojai_setup.planning.result import StepResult

FAKE_SERVER = b"#!/bin/sh\necho 'version: 1 (stand-in)'\n"


@pytest.fixture
def root(tmp_path: Path) -> Root:
    (tmp_path / "machine").mkdir()
    return Root(tmp_path / "machine")


def small_build(extra: list[Entry] | None = None) -> list[Entry]:
    """A tiny archive in the nightly layout (never run)."""
    return [
        Entry("llama-server", FAKE_SERVER, 0o100755),
        Entry("libllama.so.0.6.0", b"\x7fELF not really", 0o100755),
        Entry.symlink("libllama.so.0", "libllama.so.0.6.0"),
        *(extra or []),
    ]


def publish(fake: FakeGitHub, tmp_path: Path, tag: str, entries: list[Entry],
            family: str = "gfx1150", *, latest: bool = True) -> bytes:
    """Put a release with one zip for ``family`` on the fake server; return the zip."""
    (tmp_path / "zips").mkdir(exist_ok=True)
    body = make_zip(tmp_path / "zips" / f"{tag}-{family}.zip", entries)
    fake.add_release(tag, {asset_name(tag, family): body, "llama-b0000-windows-rocm-gfx1150-x64.zip": b"x"},
                     latest=latest)
    return body


def unpacked(body: bytes) -> int:
    """The bytes the files of the zip ``body`` take unpacked."""
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        return sum(info.file_size for info in archive.infolist())


def install(root: Root, tag: str | None = None, family: str = "gfx1150") -> tuple[InstallArchive, bool]:
    action = install_action(resolve_release(None, tag, family))
    return action, execute_install_archive(root, action, RecordingProgress()).changed


def leftovers(root: Root) -> list[str]:
    base = root.resolve(nightly.INSTALL_BASE)
    return sorted(p.name for p in base.iterdir() if p.name.startswith(".")) if base.exists() else []


def current_target(root: Root) -> str:
    return os.readlink(root.resolve(CURRENT_LINK))


# -- naming -----------------------------------------------------------------------------------
@pytest.mark.parametrize("gfx, family", [
    ("gfx1150", "gfx1150"), ("gfx1151", "gfx1151"), ("gfx1100", "gfx110X"), ("gfx1103", "gfx110X"),
    ("gfx1200", "gfx120X"), ("gfx1201", "gfx120X"), ("gfx1030", "gfx103X"), ("gfx1036", "gfx103X"),
    ("gfx90a", "gfx90a"), ("gfx908", "gfx908"), (" GFX1151 ", "gfx1151"),
])
def test_family_for_target(gfx: str, family: str) -> None:
    assert family_for_target(gfx) == family


@pytest.mark.parametrize("gfx", ["gfx1104", "gfx1152", "gfx1037", "gfx942", "gfx900", "", "1150"])
def test_family_for_unknown_target_says_what_is_covered(gfx: str) -> None:
    with pytest.raises(NightlyError, match=r"no nightly llama.cpp build covers .*gfx110X.*from source"):
        family_for_target(gfx)


def test_names() -> None:
    assert install_dir_name("b1311", "gfx1150") == "b1311-gfx1150"
    assert asset_name("b1311", "gfx110X") == "llama-b1311-ubuntu-rocm-gfx110X-x64.zip"
    with pytest.raises(NightlyError, match="not a nightly tag"):
        install_dir_name("../b1311", "gfx1150")
    with pytest.raises(NightlyError, match="unknown GPU family"):
        install_dir_name("b1311", "gfx1103")


# -- resolving --------------------------------------------------------------------------------
def test_resolve_latest_and_by_tag(fake_github: FakeGitHub, tmp_path: Path) -> None:
    old = publish(fake_github, tmp_path, "b1310", small_build(), latest=False)
    new = publish(fake_github, tmp_path, "b1311", small_build([Entry("README.md", b"hi")]))

    latest = resolve_release(None, None, "gfx1150")
    assert latest == NightlyAsset(
        tag="b1311", name="llama-b1311-ubuntu-rocm-gfx1150-x64.zip",
        url=f"{fake_github.api_base}/lemonade-sdk/llamacpp-rocm/releases/download/b1311/"
            "llama-b1311-ubuntu-rocm-gfx1150-x64.zip",
        size=len(new), sha256=hashlib.sha256(new).hexdigest(), unpacked_size=unpacked(new))
    assert latest.family == "gfx1150"
    # the zip's directory came from its end: one ranged request, nothing downloaded
    assert [r.headers["Range"] for r in fake_github.ranged()] == ["bytes=0-"]
    assert fake_github.downloads() == []

    pinned = resolve_release(fake_github.api_base, "b1310", "gfx1150")
    assert (pinned.tag, pinned.size, pinned.sha256) == ("b1310", len(old), hashlib.sha256(old).hexdigest())
    assert [r.path for r in fake_github.requests if r.path.startswith("/repos/")] == [
        "/repos/lemonade-sdk/llamacpp-rocm/releases/latest",
        "/repos/lemonade-sdk/llamacpp-rocm/releases/tags/b1310",
    ]


def test_action_for_asset(fake_github: FakeGitHub, tmp_path: Path) -> None:
    publish(fake_github, tmp_path, "b1311", small_build(), family="gfx110X")
    action = install_action(resolve_release(None, "b1311", "gfx110X"))
    assert action.dest == "/opt/ojai/llama.cpp/b1311-gfx110X"
    assert action.link == "/opt/ojai/llama.cpp/current"
    assert action.targets() == [action.dest, action.link]
    assert action.needs_root


def test_unknown_tag(fake_github: FakeGitHub, tmp_path: Path) -> None:
    publish(fake_github, tmp_path, "b1311", small_build())
    with pytest.raises(NightlyError, match=r"no release b9999 in lemonade-sdk/llamacpp-rocm"):
        resolve_release(None, "b9999", "gfx1150")


def test_no_release_at_all(fake_github: FakeGitHub) -> None:
    with pytest.raises(NightlyError, match="no release latest"):
        resolve_release(None, None, "gfx1150")


def test_no_asset_for_family_lists_what_there_is(fake_github: FakeGitHub, tmp_path: Path) -> None:
    publish(fake_github, tmp_path, "b1311", small_build(), family="gfx1151")
    with pytest.raises(NightlyError, match=r"no llama-b1311-ubuntu-rocm-gfx1150-x64.zip; it offers gfx1151 "):
        resolve_release(None, None, "gfx1150")


@pytest.mark.parametrize("digest", [None, "", "md5:0123456789abcdef0123456789abcdef", "sha256:abc"])
def test_asset_without_sha256_digest_is_refused(fake_github: FakeGitHub, tmp_path: Path,
                                                digest: str | None) -> None:
    publish(fake_github, tmp_path, "b1311", small_build())
    fake_github.asset("b1311", asset_name("b1311", "gfx1150")).digest = digest
    with pytest.raises(NightlyError, match="no sha256 digest .* refusing to install"):
        resolve_release(None, None, "gfx1150")


def test_token_goes_to_the_api_only(fake_github: FakeGitHub, tmp_path: Path, root: Root,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    publish(fake_github, tmp_path, "b1311", small_build())
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_test")
    install(root)
    api = [r for r in fake_github.requests if r.path.startswith("/repos/")]
    rest = [r for r in fake_github.requests if not r.path.startswith("/repos/")]
    assert [r.headers.get("Authorization") for r in api] == ["Bearer ghp_test"]
    # the download URL and the asset host it redirects to, for the zip's end while planning
    # and for the whole zip
    assert len(rest) == 4
    assert all("Authorization" not in r.headers for r in rest)


def test_api_unreachable(root: Root) -> None:
    with pytest.raises(NightlyError, match="could not reach the GitHub API"):
        resolve_release("http://127.0.0.1:9", None, "gfx1150")


def test_api_base_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OJAI_GITHUB_API", raising=False)
    assert github.github_api_base() == "https://api.github.com"
    assert github.github_api_base({"OJAI_GITHUB_API": "http://127.0.0.1:8080/"}) == "http://127.0.0.1:8080"


# -- installing the real llama-server ---------------------------------------------------------
def test_install_real_llama_server_end_to_end(fake_github: FakeGitHub, tmp_path: Path, root: Root,
                                              llama_server_bin: Path) -> None:
    entries = nightly_entries_from_build(llama_server_bin.parent, llama_server_bin)
    body = publish(fake_github, tmp_path, "b1311", entries)

    progress = RecordingProgress()
    action = install_action(resolve_release(None, None, "gfx1150"))
    assert execute_install_archive(root, action, progress).changed

    dest = root.resolve("/opt/ojai/llama.cpp/b1311-gfx1150")
    assert current_target(root) == "b1311-gfx1150"
    assert sorted(p.name for p in dest.iterdir()) == sorted([e.name for e in entries] + ["ojai-install.json"])
    download_bar = progress.bars[0]
    assert (download_bar.total, download_bar.completed, download_bar.finished) == (len(body), len(body), True)

    record = read_record(root, action.dest)
    assert record is not None
    assert (record.tag, record.family, record.asset, record.sha256) == (
        "b1311", "gfx1150", "llama-b1311-ubuntu-rocm-gfx1150-x64.zip", hashlib.sha256(body).hexdigest())
    assert is_installed(root, action.dest, action.sha256)
    assert leftovers(root) == []

    # the installed binary runs from the install folder, loading its libraries from there
    result = root.run(["/opt/ojai/llama.cpp/current/llama-server", "--version"],
                      env={"LD_DEBUG": "libs"}, timeout=60)
    assert result.source == "root-binary"
    assert result.exit_code == 0, result.stderr
    built = subprocess.run([llama_server_bin, "--version"], capture_output=True, text=True, timeout=60)
    version = next(line for line in (built.stdout + built.stderr).splitlines() if line.startswith("version: "))
    assert version in (result.stdout + result.stderr).splitlines()
    loaded = [line for line in result.stderr.splitlines() if "calling init:" in line and "libllama" in line]
    assert loaded and all(str(root.resolve("/opt/ojai/llama.cpp")) in line for line in loaded), loaded

    # a second run finds it present and verified: nothing downloaded, nothing changed
    downloads = len(fake_github.downloads())
    assert not execute_install_archive(root, action, RecordingProgress()).changed
    assert len(fake_github.downloads()) == downloads


# -- failures leave the previous install working ----------------------------------------------
@pytest.fixture
def installed(fake_github: FakeGitHub, tmp_path: Path, root: Root) -> InstallArchive:
    """b1311 installed and current; the fake server's latest is then b1312 (set by the test)."""
    publish(fake_github, tmp_path, "b1311", small_build())
    action, changed = install(root)
    assert changed and current_target(root) == "b1311-gfx1150"
    return action


def assert_previous_intact(root: Root, previous: InstallArchive) -> None:
    assert is_installed(root, previous.dest, previous.sha256)
    assert current_target(root) == "b1311-gfx1150"
    assert os.access(root.resolve("/opt/ojai/llama.cpp/current/llama-server"), os.X_OK)
    assert not root.exists("/opt/ojai/llama.cpp/b1312-gfx1150")
    assert leftovers(root) == []


def test_new_release_switches_link_and_keeps_old(fake_github: FakeGitHub, tmp_path: Path, root: Root,
                                                 installed: InstallArchive) -> None:
    publish(fake_github, tmp_path, "b1312", small_build())
    action, changed = install(root)
    assert changed and current_target(root) == "b1312-gfx1150"
    assert is_installed(root, installed.dest, installed.sha256)
    assert is_installed(root, action.dest, action.sha256)
    # back to the older one: present and verified, so only the link moves
    downloads = len(fake_github.downloads())
    assert execute_install_archive(root, installed, RecordingProgress()).changed
    assert current_target(root) == "b1311-gfx1150"
    assert len(fake_github.downloads()) == downloads


def test_wrong_digest_unpacks_nothing(fake_github: FakeGitHub, tmp_path: Path, root: Root,
                                      installed: InstallArchive) -> None:
    body = publish(fake_github, tmp_path, "b1312", small_build())
    wrong = hashlib.sha256(b"something else").hexdigest()
    fake_github.asset("b1312", asset_name("b1312", "gfx1150")).digest = f"sha256:{wrong}"
    action = install_action(resolve_release(None, None, "gfx1150"))
    with pytest.raises(DownloadError) as err:
        execute_install_archive(root, action, RecordingProgress())
    assert f"expected {wrong}, got {hashlib.sha256(body).hexdigest()}" in str(err.value)
    assert_previous_intact(root, installed)


def test_truncated_download_then_success(fake_github: FakeGitHub, tmp_path: Path, root: Root,
                                         installed: InstallArchive) -> None:
    body = publish(fake_github, tmp_path, "b1312", small_build())
    asset = fake_github.asset("b1312", asset_name("b1312", "gfx1150"))
    asset.cut_after = len(body) // 2
    action = install_action(resolve_release(None, None, "gfx1150"))
    with pytest.raises(DownloadError, match=rf"ended early: got {len(body) // 2} of {len(body)} bytes"):
        execute_install_archive(root, action, RecordingProgress())
    assert_previous_intact(root, installed)

    asset.cut_after = None
    assert execute_install_archive(root, action, RecordingProgress()).changed
    assert current_target(root) == "b1312-gfx1150"
    assert is_installed(root, action.dest, action.sha256)
    assert leftovers(root) == []


@pytest.mark.parametrize("hostile, complaint", [
    (Entry("../escaped", b"x"), "climbs out"),
    (Entry("lib/../../escaped", b"x"), "climbs out"),
    (Entry("/tmp/escaped", b"x"), "absolute path"),
    (Entry("C:/escaped", b"x"), "absolute path"),
    (Entry("..\\escaped", b"x"), "unusable name"),
    (Entry.symlink("rocm", "/opt/rocm"), "symlink to '/opt/rocm', outside"),
    (Entry.symlink("escaped", "../../../escaped"), "symlink to '../../../escaped', outside"),
    (Entry.symlink("up", "lib/.."), "outside"),
    (Entry("kmsg", b"", stat.S_IFCHR | 0o644), "character device"),
    (Entry("pipe", b"", stat.S_IFIFO | 0o644), "FIFO"),
    (Entry("llama-server", b"again", 0o100755), "appears twice"),
])
def test_hostile_zip_is_refused_before_unpacking(fake_github: FakeGitHub, tmp_path: Path, root: Root,
                                                 installed: InstallArchive, hostile: Entry,
                                                 complaint: str) -> None:
    publish(fake_github, tmp_path, "b1312", small_build([hostile]))
    action = install_action(resolve_release(None, None, "gfx1150"))
    with pytest.raises(NightlyError, match=complaint):
        execute_install_archive(root, action, RecordingProgress())
    assert_previous_intact(root, installed)
    assert not list(tmp_path.rglob("escaped"))


def test_archive_without_llama_server_is_refused(fake_github: FakeGitHub, tmp_path: Path, root: Root,
                                                 installed: InstallArchive) -> None:
    publish(fake_github, tmp_path, "b1312", [Entry("build/bin/llama-server", FAKE_SERVER, 0o100755)])
    action = install_action(resolve_release(None, None, "gfx1150"))
    with pytest.raises(NightlyError, match="no llama-server at its top level"):
        execute_install_archive(root, action, RecordingProgress())
    assert_previous_intact(root, installed)


def test_not_a_zip_is_refused(fake_github: FakeGitHub, root: Root, installed: InstallArchive) -> None:
    fake_github.add_release("b1312", {asset_name("b1312", "gfx1150"): b"<html>rate limited</html>"})
    action = install_action(resolve_release(None, None, "gfx1150"))
    with pytest.raises(NightlyError, match="is not a readable zip"):
        execute_install_archive(root, action, RecordingProgress())
    assert_previous_intact(root, installed)


def test_download_errors_are_clear(fake_github: FakeGitHub, tmp_path: Path) -> None:
    target = tmp_path / "dl" / "file.zip"
    sha = "0" * 64
    with pytest.raises(DownloadError, match=r"GET http://127.0.0.1:\d+/assets/gone failed: HTTP 404"):
        download(f"{fake_github.api_base}/assets/gone", target, sha256=sha, progress=NullProgress())
    with pytest.raises(DownloadError, match="only http and https"):
        download("file:///etc/passwd", target, sha256=sha, progress=NullProgress())
    with pytest.raises(DownloadError, match="not 64 hex digits"):
        download(f"{fake_github.api_base}/assets/gone", target, sha256="abc", progress=NullProgress())
    with pytest.raises(DownloadError, match="could not reach http://127.0.0.1:9/x"):
        download("http://127.0.0.1:9/x", target, sha256=sha, progress=NullProgress())
    assert list(target.parent.iterdir()) == []


def test_download_streams_into_place(fake_github: FakeGitHub, tmp_path: Path) -> None:
    body = os.urandom(3 << 20)
    fake_github.add_release("b1311", {"blob.bin": body})
    target = tmp_path / "blob.bin"
    progress = RecordingProgress()
    url = f"{fake_github.api_base}/lemonade-sdk/llamacpp-rocm/releases/download/b1311/blob.bin"
    assert download(url, target, sha256=hashlib.sha256(body).hexdigest(), size=len(body),
                    progress=progress) == target
    assert target.read_bytes() == body
    assert [(b.total, b.completed, b.finished) for b in progress.bars] == [(len(body), len(body), True)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob.bin"]


# -- modes, records, repair -------------------------------------------------------------------
def test_modes(fake_github: FakeGitHub, tmp_path: Path, root: Root) -> None:
    publish(fake_github, tmp_path, "b1311", [
        Entry("llama-server", FAKE_SERVER, None),  # no Unix attributes: zip tools on Windows
        Entry("libplain.so", b"lib", None),
        Entry("libx.so", b"lib", 0o100750),
        Entry("rocblas/library/TensileLibrary.dat", b"dat", 0o100644),
        Entry("suid", b"s", 0o104777),
    ])
    install(root)
    folder = root.resolve("/opt/ojai/llama.cpp/current")

    def mode(name: str) -> int:
        return stat.S_IMODE((folder / name).stat().st_mode)

    assert mode("llama-server") & 0o111 == 0o111
    assert mode("libplain.so") == 0o644
    assert mode("libx.so") == 0o750
    assert mode("rocblas/library/TensileLibrary.dat") == 0o644
    assert mode("suid") == 0o755  # no setuid, not writable by group or others


def test_damaged_install_is_repaired(fake_github: FakeGitHub, tmp_path: Path, root: Root,
                                     installed: InstallArchive) -> None:
    (root.resolve(installed.dest) / "libllama.so.0.6.0").unlink()
    assert not is_installed(root, installed.dest, installed.sha256)
    assert execute_install_archive(root, installed, RecordingProgress()).changed
    assert is_installed(root, installed.dest, installed.sha256)
    assert current_target(root) == "b1311-gfx1150"
    assert leftovers(root) == []


def test_is_installed_checks_record_and_server(root: Root, installed: InstallArchive) -> None:
    folder = root.resolve(installed.dest)
    assert not is_installed(root, installed.dest, "0" * 64)
    assert not is_installed(root, "/opt/ojai/llama.cpp/b1999-gfx1150", installed.sha256)
    (folder / "llama-server").chmod(0o644)
    assert not is_installed(root, installed.dest, installed.sha256)
    (folder / "llama-server").chmod(0o755)
    assert is_installed(root, installed.dest, installed.sha256)
    (folder / "ojai-install.json").write_text("{not json")
    assert not is_installed(root, installed.dest, installed.sha256)


def test_leftovers_of_a_killed_run_are_cleared(fake_github: FakeGitHub, tmp_path: Path, root: Root,
                                               installed: InstallArchive) -> None:
    publish(fake_github, tmp_path, "b1312", small_build())
    base = root.resolve(nightly.INSTALL_BASE)
    (base / ".b1312-gfx1150.zip.part").write_bytes(b"half")
    (base / ".b1312-gfx1150.unpack").mkdir()
    (base / ".b1312-gfx1150.unpack" / "llama-server").write_bytes(b"stale")
    action, changed = install(root)
    assert changed and is_installed(root, action.dest, action.sha256)
    assert leftovers(root) == []


def test_killed_between_renames_puts_the_old_install_back(fake_github: FakeGitHub, tmp_path: Path,
                                                          root: Root, installed: InstallArchive) -> None:
    folder = root.resolve(installed.dest)
    folder.rename(folder.with_name(f".{folder.name}.old"))
    assert execute_install_archive(root, installed, RecordingProgress()).changed is False
    assert is_installed(root, installed.dest, installed.sha256)
    assert leftovers(root) == []


def test_current_that_is_not_a_link_is_left_alone(fake_github: FakeGitHub, tmp_path: Path, root: Root) -> None:
    publish(fake_github, tmp_path, "b1311", small_build())
    (root.resolve(CURRENT_LINK)).mkdir(parents=True)
    with pytest.raises(NightlyError, match="exists and is not a symlink"):
        install(root)
    assert root.resolve(CURRENT_LINK).is_dir()


# -- through the executor ---------------------------------------------------------------------
def plan_of(root: Root, action: InstallArchive) -> Plan:
    return Plan(
        ojai_version="test", created=datetime.now(timezone.utc), root=str(root.path),
        settings={}, facts={},
        steps=(StepResult(step="llamacpp", status="change", sentence="install the nightly build",
                          actions=(action,)),),
        fingerprint=Fingerprint(ojai_version="test", facts_sha256="0" * 64, files={}))


def test_apply_installs_then_has_nothing_to_change(fake_github: FakeGitHub, tmp_path: Path,
                                                   root: Root) -> None:
    publish(fake_github, tmp_path, "b1311", small_build())
    plan = plan_of(root, install_action(resolve_release(None, None, "gfx1150")))
    first = apply(plan, root, NullProgress(), euid=0)
    assert [a.changed for a in first.actions] == [True]
    assert current_target(root) == "b1311-gfx1150"
    second = apply(plan, root, NullProgress(), euid=0)
    assert [a.changed for a in second.actions] == [False]
    assert "already installed and verified" in second.actions[0].message


def test_crash_before_rename_keeps_previous(fake_github: FakeGitHub, tmp_path: Path, root: Root,
                                            installed: InstallArchive) -> None:
    publish(fake_github, tmp_path, "b1312", small_build())
    plan = plan_of(root, install_action(resolve_release(None, None, "gfx1150")))

    def crash(stage: str) -> None:
        if stage == "before-rename":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        apply(plan, root, NullProgress(), euid=0, fault_hook=crash)
    assert_previous_intact(root, installed)
    assert apply(plan, root, NullProgress(), euid=0).actions[0].changed
    assert current_target(root) == "b1312-gfx1150"


def test_the_unpacked_size_is_none_when_the_zips_end_says_nothing(fake_github: FakeGitHub,
                                                                  tmp_path: Path) -> None:
    """Planning reads a nightly's unpacked size from the directory at its zip's end; where
    there is none to read (not a zip, a server that cannot be reached, a directory beyond the
    part fetched) it says None, and the plan estimates."""
    body = publish(fake_github, tmp_path, "b1311", small_build())
    url = resolve_release(None, None, "gfx1150").url
    assert github.zip_unpacked_size(url, len(body)) == unpacked(body)
    assert github.zip_unpacked_size(url, len(body), tail=16) is None  # the directory is longer
    fake_github.asset("b1311", asset_name("b1311", "gfx1150")).body = b"not a zip" * 100
    assert github.zip_unpacked_size(url, 900) is None
    assert github.zip_unpacked_size("http://127.0.0.1:9/x.zip", len(body)) is None
