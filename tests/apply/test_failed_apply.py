"""Applies that fail or are stopped half way, on copies of ojai-fresh: the long work (model
downloads) runs before any system file is edited and the boot configuration goes last, the
follow-ups of finished edits still run, every ending says what changed, what is owed and the
whole commands that finish and undo; SIGINT and SIGTERM at every boundary; two ojai processes
at once (apply + apply, apply + rollback), each refusal naming the holder of the lock.

Model files come from a local stand-in for the Hugging Face Hub (tests/support/fake_hub.py);
Ctrl-C, SIGTERM and the second process are real (tests/support/kill_at.py runs ojai in a
child process that signals itself, or pauses holding the lock, at a fault point)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ojai_setup.core.status import ExitStatus
from support.fake_github import fake_github  # noqa: F401 - fake_github is a fixture
from support.fake_hub import FakeHub, fake_hub  # noqa: F401 - fake_hub is a fixture
from support.gguf_files import gemma4_assistant, gemma4_main
from support.stand_ins import give_hip_toolchain, give_llama_server, route_toml
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.model.settings import Settings

KILLER = Path(__file__).parents[1] / "support" / "kill_at.py"
REPO = "ojai-test/tiny-gemma4-GGUF"
ROUTE = "tiny-gemma"
MAIN = "gemma-4-tiny-it-Q4_K_M.gguf"
DRAFT = "mtp-gemma-4-tiny-it.gguf"
MODELS = "var/lib/ojai/models"
GRUB = "etc/default/grub"
LIMIT = "ttm.pages_limit=12582912"
NO_LLAMA = ["--llamacpp", "none", "--no-npu"]


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def said(result) -> str:
    return " ".join(result.stderr.split())


@pytest.fixture
def catalog(tmp_path: Path, fake_hub: FakeHub) -> Path:
    folder = tmp_path / "published"
    main = gemma4_main(folder / MAIN, payload_bytes=64 * 1024)
    draft = gemma4_assistant(folder / DRAFT, payload_bytes=64 * 1024)
    fake_hub.add_path(REPO, MAIN, main)
    fake_hub.add_path(REPO, DRAFT, draft)
    path = tmp_path / "catalog.toml"
    path.write_text(route_toml(ROUTE, REPO, main, draft))
    return path


def model_args(root: Path, catalog: Path) -> list[object]:
    return ["--root", root, *NO_LLAMA, "--catalog", catalog, "--model", ROUTE]


def grub_runs(root: Path) -> int:
    return sum(1 for e in journal_entries(root) for h in e["handlers"]
               if h["name"] == "update-grub" and h.get("exit_code") == 0)


def journal_entries(root: Path) -> list[dict]:
    folder = root / "var/lib/ojai/journal"
    entries = [json.loads(p.read_text()) for p in folder.glob("*.json")] if folder.is_dir() else []
    return sorted(entries, key=lambda e: e["started"])


def apply_finding(root: Path) -> dict:
    report = json.loads(ojai("doctor", "--json", "--root", root).stdout)
    return next(f for f in report["findings"] if f["id"] == "ojai.apply")


def planned_step(args: list[object], name: str) -> dict:
    """A step of the dry run of ``args``, as ``--json`` gives it (status, sentence)."""
    data = json.loads(ojai("setup", *args, "--json").stdout)
    return next(s for s in data["steps"] if s["step"] == name)


def last_sentence(result) -> str:
    """The dry run's last line (wrapped at the terminal's width), as one line."""
    text = " ".join(result.stdout.split())
    return text[text.rindex("Plan: "):]


# -- what can be known at planning ----------------------------------------------------------
def blocked_and_left_out(box: Path, args: list[object], name: str):
    """The dry run of ``args`` blocks step ``name`` (exit 1, its last line says so) before
    anything changes; the apply then leaves it out (and the steps that wait for it) and applies
    the rest, ending with what it left out (exit 3). Once all-or-nothing: a blocked step held
    back the whole plan. The step's sentence, and the apply's result."""
    plan = ojai("setup", *args)
    assert plan.exit_code == 1, plan.output
    step = planned_step(args, name)
    assert step["status"] == "blocked", step
    assert "1 step blocked" in last_sentence(plan)
    applied = ojai("setup", *args, "--apply", "--yes")
    assert applied.exit_code == ExitStatus.INCOMPLETE, applied.output
    assert f"not applied: {name} is blocked" in " ".join(applied.stdout.split())
    return step["sentence"], applied


def test_systemd_units_on_a_machine_without_systemctl_are_blocked_in_the_dry_run(box, catalog):
    """ojai-fresh answers no systemctl: the units' daemon-reload could never run, so the routes
    step is blocked before anything changes; the GRUB edit and the downloads, which do not need
    it, are applied, the units and scripts are not."""
    sentence, _ = blocked_and_left_out(box, [*model_args(box, catalog), "--systemd"], "routes")
    assert sentence == (
        "this step runs `systemctl daemon-reload`, and this machine has no systemctl (a machine "
        "folder answers commands from its captures in .ojai/commands)."), sentence
    step = planned_step([*model_args(box, catalog), "--systemd"], "routes")
    assert step["ways"] == ["leave out --systemd (systemd does not manage this machine's "
                            "services), or set up systemd", "install what is missing and plan again"]
    assert "ttm.pages_limit=" in (box / GRUB).read_text() and (box / MODELS).exists()
    assert not (box / "etc/systemd/system").exists() or not list(
        (box / "etc/systemd/system").glob("ojai-*.service"))


def test_a_boot_path_without_its_regeneration_tool_is_blocked_in_the_dry_run(box, catalog):
    """ojai-fresh without update-grub (and no grub-mkconfig): the GRUB edit could never be made
    active, so its step is blocked before anything changes, the downloads included."""
    shutil.rmtree(box / ".ojai/commands/update-grub")
    grub = (box / GRUB).read_bytes()
    sentence, _ = blocked_and_left_out(box, model_args(box, catalog), "gpu-memory")
    assert (box / GRUB).read_bytes() == grub  # the routes and models do not need it: applied
    assert (box / MODELS).exists()
    assert sentence == (
        "none of the tools that regenerate grub.cfg on ubuntu is installed (looked for "
        "update-grub, grub-mkconfig). Install grub (or run the tool your system uses) and run "
        "ojai again.")


def every_file(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def path_without(folder: Path, *hidden: str) -> str:
    """A PATH of every program this computer has but ``hidden``: a computer without them."""
    folder.mkdir()
    for d in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for program in sorted(Path(d).iterdir()) if Path(d).is_dir() else ():
            if program.name not in hidden and not (folder / program.name).exists() and \
                    os.access(program, os.X_OK):
                (folder / program.name).symlink_to(program)
    return str(folder)


SOURCE = ["--no-npu", "--llamacpp", "source", "--backend", "cpu"]


@pytest.mark.parametrize("case", ["service-user", "cmake", "compilers", "git"])
def test_a_program_ojai_would_run_on_this_computer_is_looked_for_at_planning(box, tmp_path,
                                                                            monkeypatch, case):
    """The programs ojai runs here against the machine folder by design (a system user's
    systemd-sysusers or useradd, a source build's cmake, compilers and git) are looked for on
    this computer's PATH in the dry run: without them the step is blocked with what to install,
    and the apply leaves it out: no user, no build; the GRUB edit, which does not need it, is
    made."""
    args, hidden, step, said_there, way = {
        "service-user": (["--root", box, *NO_LLAMA, "--systemd"], ("systemd-sysusers", "useradd"),
                         "service-user", "To create the system user ojai (no home, no login "
                         "shell), ojai runs systemd-sysusers or useradd on this computer (against "
                         "the machine folder), and neither is installed.", "Debian and Ubuntu: "
                         "apt install systemd (or passwd, for useradd)"),
        "cmake": (["--root", box, *SOURCE, "--llamacpp-src", "/srv/llama.tar.gz"], ("cmake",),
                  "llama.cpp", "ojai runs cmake on this computer (against the machine folder), "
                  "and it is not installed.", "Debian and Ubuntu: apt install cmake; or a nightly "
                  "build with --llamacpp nightly"),
        "compilers": (["--root", box, *SOURCE, "--llamacpp-src", "/srv/llama.tar.gz"],
                      ("c++", "g++", "clang++"), "llama.cpp", "ojai runs c++ or g++ or clang++ on "
                      "this computer (against the machine folder), and none is installed.",
                      "Debian and Ubuntu: apt install build-essential"),
        "git": (["--root", box, *SOURCE, "--llamacpp-src", "https://github.com/ggml-org/llama.cpp"],
                ("git",), "llama.cpp", "ojai runs git on this computer (against the machine "
                "folder), and it is not installed.", "Debian and Ubuntu: apt install git; or a "
                "local source with --llamacpp-src"),
    }[case]
    before = every_file(box)
    found = planned_step(args, step)
    assert found["status"] == "change", found  # on this computer, with every program
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", *hidden))
    plan = ojai("setup", *args)
    assert plan.exit_code == 1, plan.output
    found = planned_step(args, step)
    assert found["status"] == "blocked" and said_there in found["sentence"], found
    assert found["ways"] == [way, "install what is missing and plan again"], found
    applied = ojai("setup", *args, "--apply", "--yes")
    # the step is left out, the GRUB edit (which does not need it) is applied
    assert applied.exit_code == ExitStatus.INCOMPLETE, applied.output
    assert f"not applied: {step} is blocked" in " ".join(applied.stdout.split())
    after = every_file(box)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert {p for p in changed if not p.startswith("var/lib/ojai/")} == {"etc/default/grub"}


def published_bytes(catalog: Path) -> int:
    return sum(p.stat().st_size for p in (catalog.parent / "published").iterdir())


def test_a_download_needs_room_beyond_its_own_size(box, catalog, tmp_path, monkeypatch):
    """Free space exactly the size of the downloads is not enough: the plan keeps a margin (a
    twentieth of the need and a hundredth of the filesystem, at most 256 MiB) free."""
    from ojai_setup.planning.space import margin

    need = published_bytes(catalog)
    keep = margin(need, shutil.disk_usage(box).total)
    for budget, status in ((need, "blocked"), (need + keep - 1, "blocked"),
                           (need + keep, "change")):
        monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", str(budget))
        step = planned_step(model_args(box, catalog), "model")
        assert step["status"] == status, (budget, step)
    monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", str(need))
    line = planned_step(model_args(box, catalog), "model")["sentence"]
    assert line == (f"not enough disk space in /var/lib/ojai/models for {ROUTE}: the downloads "
                    f"need {need} bytes; with a margin of {keep / 2**20:.0f} MiB (a twentieth "
                    f"more, and room for the system) that is {(need + keep) / 2**20:.0f} MiB, and "
                    f"{need} bytes is free; free some space, choose another folder with "
                    "--models-dir and plan again"), line


def nightly_zip(github) -> bytes:
    from ojai_setup.domain.nightly import asset_name

    return github.asset("b1311", asset_name("b1311", "gfx1150")).body


def nightly_room(github) -> int:
    """The zip and its files unpacked, as the zip's own directory gives them."""
    import io
    import zipfile

    body = nightly_zip(github)
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        return len(body) + sum(info.file_size for info in archive.infolist())


@pytest.mark.parametrize("ranges", [True, False], ids=["zip-directory", "no-ranges"])
def test_the_nightlys_room_is_read_from_its_zips_directory(machine, fake_github, tmp_path,
                                                           monkeypatch, ranges):
    """A zip of 8 MiB of zeros and 1.25 MiB of noise is about 1.3 MiB: three times the zip
    would fit where its files do not. The plan reads their size from the zip's directory (one
    ranged GET of its end, nothing downloaded) and blocks; from a server that ignores ranges
    (the whole zip would come) it estimates, and says so."""
    from support.fake_github import Entry, make_zip

    from ojai_setup.core.units import size_text
    from ojai_setup.domain.nightly import asset_name
    from ojai_setup.facts.github import ZIP_TAIL
    from ojai_setup.planning.space import margin

    noise, server = os.urandom(5 << 18), b"#!/bin/sh\necho 'version: 1311 (abc1234)' >&2\n"
    body = make_zip(tmp_path / "b1311.zip", [
        Entry("llama-server", server, 0o100755),
        Entry("libggml-hip.so", bytes(8 << 20), 0o100755),
        Entry("librocblas.so", noise, 0o100755)])
    assert ZIP_TAIL < len(body) < 2 * ZIP_TAIL
    fake_github.add_release("b1311", {asset_name("b1311", "gfx1150"): body})
    fake_github.ranges = ranges
    root = machine("ojai-fresh")
    args = ["--root", root, "--no-npu"]
    files = len(server) + (8 << 20) + len(noise)  # the three files' bytes
    size = shutil.disk_usage(root).total
    estimated = 3 * len(body)
    budget = len(body) + files + margin(len(body) + files, size) - (1 << 20)
    assert estimated + margin(estimated, size) < budget
    monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", str(budget))
    step = planned_step(args, "llama.cpp")
    assert fake_github.downloads() == []  # nothing downloaded while planning
    if ranges:
        assert step["status"] == "blocked", step
        assert step["sentence"].startswith(
            f"not enough disk space in /opt/ojai/llama.cpp for llama.cpp nightly b1311: its zip "
            f"is {size_text(len(body))} and its files take {size_text(files)} unpacked (read "
            "from the zip's directory)"), step
        assert [r.headers["Range"] for r in fake_github.ranged()] == [
            f"bytes={len(body) - ZIP_TAIL}-"]  # the end of the zip, at the asset's host
    else:  # estimated as three times the zip: that fits, and the plan says how it counted
        assert step["status"] == "change", step
        monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", "100")
        line = planned_step(args, "llama.cpp")["sentence"]
        assert "its unpacked files are taken as 2 times the zip (its directory could not be " \
            "read)" in line, line


def test_the_steps_on_one_filesystem_share_its_free_space(box, catalog, nightly, monkeypatch):
    """The nightly's zip and unpacked files and the model's downloads each fit alone, not both:
    the later step (the model) is blocked, saying what the earlier one takes; the nightly
    stays planned, and without it the model fits."""
    from ojai_setup.planning.space import margin

    unpack = nightly_room(nightly)
    models = published_bytes(catalog)
    size = shutil.disk_usage(box).total
    alone = max(unpack + margin(unpack, size), models + margin(models, size))
    together = unpack + models + margin(unpack + models, size)
    assert alone < together
    monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", str(together - 1))
    args = ["--root", box, "--no-npu", "--catalog", catalog, "--model", ROUTE]
    grub = (box / GRUB).read_bytes()
    plan = ojai("setup", *args)
    assert plan.exit_code == 1, plan.output
    assert planned_step(args, "llama.cpp")["status"] == "change"
    line = planned_step(args, "model")["sentence"]
    assert line.startswith(f"not enough disk space in /var/lib/ojai/models for {ROUTE}: the "
                           f"downloads need {models} bytes; the filesystem also takes {unpack} "
                           "bytes for llama.cpp nightly b1311 (llama.cpp step), "
                           f"{unpack + models} bytes in all; with a margin of "), line
    monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", str(alone))
    assert planned_step(args, "model")["status"] == "blocked"  # both still do not fit
    assert planned_step([*args, "--llamacpp", "none"], "model")["status"] == "change"
    # the apply leaves the model out (and the routes, which wait for it), and makes the rest
    monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", str(together - 1))
    applied = ojai("setup", *args, "--apply", "--yes")
    assert applied.exit_code == ExitStatus.INCOMPLETE, applied.output
    # once the nightly is in place, its room is counted as used, not as planned: the model
    # fits, and the apply says it can be applied now
    assert " ".join(applied.stdout.split()).endswith("model can be applied now.")
    assert (box / GRUB).read_bytes() != grub and len(nightly.downloads()) == 1
    assert not (box / MODELS).exists()


def test_steps_on_different_filesystems_do_not_share_free_space(box, catalog, nightly,
                                                                monkeypatch, tmp_path):
    """The same nightly and model as above, with the models folder on another filesystem (a
    tmpfs, through a link in the machine folder): each filesystem has room for what goes on
    it, so both steps are planned; only the same filesystem adds the needs up."""
    from ojai_setup.planning.space import margin

    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(box).st_dev:
        pytest.fail("this test needs /dev/shm on a filesystem of its own (a tmpfs)")
    elsewhere = Path(tempfile.mkdtemp(dir=shm))
    try:
        (box / MODELS).parent.mkdir(parents=True, exist_ok=True)
        (box / MODELS).symlink_to(elsewhere)
        unpack, models = nightly_room(nightly), published_bytes(catalog)
        alone = max(unpack + margin(unpack, shutil.disk_usage(box).total),
                    models + margin(models, shutil.disk_usage(elsewhere).total))
        assert alone < unpack + models + margin(unpack + models, shutil.disk_usage(box).total)
        monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", str(alone))
        args = ["--root", box, "--no-npu", "--catalog", catalog, "--model", ROUTE]
        assert planned_step(args, "llama.cpp")["status"] == "change"
        assert planned_step(args, "model")["status"] == "change"
    finally:
        shutil.rmtree(elsewhere)


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("how", ["unreachable", "offline", "no-such-file"])
def test_a_model_the_hub_will_not_serve_is_blocked_in_the_dry_run(box, catalog, fake_hub,
                                                                  monkeypatch, how):
    grub = (box / GRUB).read_bytes()
    if how == "unreachable":
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
        said_there = "cannot reach http://127.0.0.1:"
    elif how == "offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        said_there = "must be downloaded, but HF_HUB_OFFLINE is set"
    else:
        del fake_hub.files[(REPO, DRAFT)]
        said_there = f"has no {REPO}:{DRAFT} (HTTP 404)"
    plan = ojai("setup", *model_args(box, catalog))
    assert plan.exit_code == 1, plan.output
    step = planned_step(model_args(box, catalog), "model")
    line = step["sentence"]
    assert step["status"] == "blocked" and line.startswith(f"{ROUTE}: ") and said_there in line
    ways = " ".join(step["ways"])
    assert "--lemonade-downloads" in ways and "HF_TOKEN" in ways
    applied = ojai("setup", *model_args(box, catalog), "--apply", "--yes")
    # the model and the routes that wait for it are left out; the GRUB edit is made
    assert applied.exit_code == ExitStatus.INCOMPLETE, applied.output
    assert " ".join(applied.stdout.split()).endswith(
        "not applied: model is blocked; routes waits for model.")
    assert (box / GRUB).read_bytes() != grub and not (box / MODELS).exists()
    assert fake_hub.requests_to("cdn") == []


def test_files_already_on_disk_need_no_hub(box, catalog, fake_hub, monkeypatch):
    assert ojai("setup", *model_args(box, catalog), "--apply", "--yes").exit_code == 0
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    plan = ojai("setup", *model_args(box, catalog))
    assert plan.exit_code == 0, plan.output  # verified on disk: nothing asked, nothing to do


# -- fetch first, change the boot last ------------------------------------------------------
def test_a_download_that_fails_after_planning_leaves_the_boot_untouched(box, catalog, fake_hub):
    grub = (box / GRUB).read_bytes()
    plan = ojai("setup", *model_args(box, catalog))
    assert plan.exit_code == 2, plan.output  # the hub answered while planning
    fake_hub.cut_next_download(1000)  # then the connection drops during the download
    failed = ojai("setup", *model_args(box, catalog), "--apply", "--yes")
    assert failed.exit_code == 1, failed.output
    text = said(failed)
    assert "download stopped after" in text
    assert (box / GRUB).read_bytes() == grub  # the boot was never touched
    assert "the boot configuration was not touched" in text
    assert grub_runs(box) == 0 and apply_finding(box)["severity"] == "pass"  # nothing owed
    settings = Settings(llamacpp="none", npu=False, user_catalog=str(catalog), model=ROUTE)
    assert "nothing on the machine was changed" in text and "backed up" not in text
    assert f"to try again: {settings.command('--apply', root=str(box))}" in text, text
    assert "ojai rollback" not in text  # nothing to undo

    fake_hub.restore()
    done = ojai("setup", *model_args(box, catalog), "--apply", "--yes")
    assert done.exit_code == 0, done.output
    assert LIMIT in (box / GRUB).read_text() and grub_runs(box) == 1
    assert ojai("setup", *model_args(box, catalog)).exit_code == 0


def test_the_plan_and_the_journal_put_the_downloads_first_and_the_boot_last(box, catalog):
    from ojai_setup.commands.setup import build_plan
    from ojai_setup.core.root import Root
    from ojai_setup.planning.plan import apply_phase

    plan = build_plan(Root(box), Settings(llamacpp="none", npu=False, user_catalog=str(catalog),
                                          model=ROUTE))
    order = [p.action for p in plan.apply_order()]
    phases = [apply_phase(a) for a in order]
    assert phases == sorted(phases, key=("fetch", "system", "boot").index)
    assert phases[0] == "fetch" and phases[-1] == "boot"
    assert [p.step for p in plan.actions()][0] == "gpu-memory"  # the dry run lists steps as before
    assert ojai("setup", *model_args(box, catalog), "--apply", "--yes").exit_code == 0
    [entry] = journal_entries(box)
    assert [p["kind"] for p in entry["planned"]][:2] == ["hub_download", "hub_download"]
    assert entry["planned"][-1]["targets"] == ["/etc/default/grub"]


def test_a_follow_up_that_fails_before_the_boot_edit_leaves_the_boot_untouched(
        box, catalog, machine):
    """``systemctl daemon-reload`` (of the units) runs before the GRUB edit: when it fails, the
    boot is as before and the one command owed is named by its command, and once it can run,
    the next apply runs it and says so."""
    capture = box / ".ojai/commands/systemctl daemon-reload"
    capture.mkdir(parents=True)
    (capture / "exit_code").write_text("1\n")
    (capture / "stderr").write_text("Failed to connect to bus: No such file or directory\n")
    grub = (box / GRUB).read_bytes()
    args = [*model_args(box, catalog), "--systemd"]
    failed = ojai("setup", *args, "--apply", "--yes")
    assert failed.exit_code == 1, failed.output
    text = said(failed)
    assert "`systemctl daemon-reload` failed with exit code 1" in text
    assert "still owed (the next apply runs it): `systemctl daemon-reload`" in text
    assert (box / GRUB).read_bytes() == grub
    assert "the boot configuration was not touched" in text

    dry = ojai("setup", *args)
    assert dry.exit_code == 2, dry.output
    assert "run 1 command as root (update-grub)" in last_sentence(dry)  # the boot, still to do
    assert "still due: systemctl daemon-reload" in " ".join(dry.stdout.split())  # and what is owed

    (capture / "exit_code").write_text("0\n")
    done = ojai("setup", *args, "--apply", "--yes")
    assert done.exit_code == 0, done.output
    out = " ".join(done.stdout.split())
    assert "ran systemctl daemon-reload, update-grub" in out
    assert "still owed" not in out and "still due" not in out
    assert ojai("setup", *args).exit_code == 0


def test_when_the_boot_regeneration_fails_the_dry_run_says_it_is_owed_and_exits_2(machine):
    root = machine("ojai-fresh")
    (root / ".ojai/commands/update-grub/exit_code").write_text("1\n")
    failed = ojai("setup", "--root", root, *NO_LLAMA, "--apply", "--yes")
    assert failed.exit_code == 1
    assert "the boot configuration was changed and its regeneration is owed" in said(failed)
    assert "still owed (the next apply runs it): `update-grub`" in said(failed)
    dry = ojai("setup", "--root", root, *NO_LLAMA)
    assert dry.exit_code == 2, dry.output
    assert last_sentence(dry) == ("Plan: nothing to change, but an earlier apply left work "
                                  "owed (above).")
    assert "update-grub" in dry.stdout


# -- SIGINT and SIGTERM at every boundary ---------------------------------------------------
CLOUD = 'GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0 amdgpu.gttsize=512"\n'
#: every boundary of the two-file apply of test_interrupted.py
BOUNDARIES = [
    ("journal-opened", 1), ("backups-written", 1),
    ("action-start", 1), ("before-rename", 1), ("action-done", 1),
    ("action-start", 2), ("before-rename", 2), ("action-done", 2),
    ("handler-start", 1), ("handler-done", 1),
]


def cloud_box(machine) -> Path:
    root = machine("ojai-fresh")
    d = root / "etc/default/grub.d"
    d.mkdir(parents=True)
    (d / "50-cloudimg-settings.cfg").write_text(CLOUD)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted((root / "etc").rglob("*")) if p.is_file()}


def at(root: Path, stage: str, nth: int, what: str, *args: str, wait: bool = True):
    env = {**os.environ, "OJAI_TEST_AT": what, "COLUMNS": "200"}
    argv = [sys.executable, str(KILLER), stage, str(nth), *args]
    if not wait:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("stage,nth", BOUNDARIES, ids=[f"{s}-{n}" for s, n in BOUNDARIES])
def test_a_signal_at_any_boundary_ends_with_what_happened_and_both_commands(
        machine, stage, nth, signal_name):
    root = cloud_box(machine)
    original = snapshot(root)
    proc = at(root, stage, nth, signal_name, "setup", "--root", str(root), "--apply", "--yes",
              *NO_LLAMA)
    assert proc.returncode == 130, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    err = " ".join(proc.stderr.split())
    assert f"apply stopped by {signal_name}" in err, err
    assert f"to finish: ojai setup --root {root} {' '.join(NO_LLAMA)} --apply" in err \
        or f"to try again: ojai setup --root {root}" in err, err
    [entry] = journal_entries(root)
    assert entry["status"] == "failed" and entry["error"] == f"stopped by {signal_name}"
    state = json.loads((root / "var/lib/ojai/state.json").read_text())
    assert state["running"] is None  # the journal was closed, not left running
    assert not [p for p in root.rglob(".*") if p.name.endswith((".ojai-tmp", ".tmp"))]
    if entry["files"]:
        assert f"to undo: ojai rollback --root {root}" in err
    # the edits that finished were followed up after the signal: nothing is owed
    assert state["pending_handlers"] == [] and "still owed" not in err, err
    if any(f["path"].startswith("/etc/default/grub") for f in entry["files"]):
        assert "ran: `update-grub`" in err, err

    if nth % 2:  # odd ones are finished by a new apply, even ones undone by rollback
        done = ojai("setup", "--root", root, "--apply", "--yes", *NO_LLAMA)
        assert done.exit_code == 0, done.output
        assert ojai("setup", "--root", root, *NO_LLAMA).exit_code == 0
    else:
        undo = ojai("rollback", "--root", root, "--yes")
        assert undo.exit_code in (0, 1), undo.output
        assert snapshot(root) == original
    assert apply_finding(root)["severity"] == "pass"



def test_a_second_signal_while_the_edits_are_followed_up_leaves_the_rest_owed(machine):
    """Ctrl-C once both edits are made: the apply stops and runs update-grub, which the
    edits notified; Ctrl-C again, as it starts: it is left owed, said by its command, and
    the next apply runs it."""
    root = cloud_box(machine)
    proc = at(root, "action-done,handler-start", 2, "SIGINT", "setup", "--root", str(root),
              "--apply", "--yes", *NO_LLAMA)
    assert proc.returncode == 130, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    err = " ".join(proc.stderr.split())
    assert "apply stopped by SIGINT" in err and "ran: `update-grub`" not in err, err
    assert "still owed (the next apply runs it): `update-grub`" in err, err
    state = json.loads((root / "var/lib/ojai/state.json").read_text())
    assert [h["argv"] for h in state["pending_handlers"]] == [["update-grub"]]
    assert state["running"] is None
    done = ojai("setup", "--root", root, "--apply", "--yes", *NO_LLAMA)
    assert done.exit_code == 0, done.output
    assert grub_runs(root) == 1 and apply_finding(root)["severity"] == "pass"


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_signal_in_the_middle_of_a_download_says_what_happened_and_a_rerun_finishes(
        box, catalog, signal_name):
    """Ctrl-C (or a service manager's SIGTERM) while a model's bytes are arriving: exit 130,
    what happened and the command to go on, the journal closed, the boot untouched, the part
    already fetched kept; the same command then finishes the job."""
    grub = (box / GRUB).read_bytes()
    args = [*map(str, model_args(box, catalog)), "--apply", "--yes"]
    proc = at(box, "download-block", 1, signal_name, "setup", *args)
    assert proc.returncode == 130, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    err = " ".join(proc.stderr.split())
    assert f"apply stopped by {signal_name}" in err, err
    assert "the boot configuration was not touched: the machine boots as before" in err, err
    assert f"ojai setup --root {box}" in err and "--apply" in err, err
    assert "backed up" not in err, err
    [entry] = journal_entries(box)
    assert entry["status"] == "failed" and entry["error"] == f"stopped by {signal_name}"
    state = json.loads((box / "var/lib/ojai/state.json").read_text())
    assert state["running"] is None and state["pending_handlers"] == []
    assert (box / GRUB).read_bytes() == grub
    assert any(n.endswith(".partial") for n in model_leftovers(box)), model_leftovers(box)

    done = ojai("setup", *args)
    assert done.exit_code == 0, done.output
    assert not any(n.endswith(".partial") for n in model_leftovers(box)), model_leftovers(box)
    assert (box / GRUB).read_bytes() != grub
    assert apply_finding(box)["severity"] == "pass"


FILL = """
set -eu
mkdir -p "$MODELS_DIR"
mount -t tmpfs -o size=32m ojai-test-small "$MODELS_DIR"
"$@" > "$OUT" 2> "$ERR" &
pid=$!
while [ ! -e "$GO.ready" ]; do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
dd if=/dev/zero of="$MODELS_DIR/filler" bs=1M 2>/dev/null || true  # until the disk is full
touch "$GO"
rc=0; wait "$pid" || rc=$?
echo "$rc" > "$RC"
"""


def test_a_disk_that_fills_during_a_download_says_so_and_a_rerun_finishes(box, fake_hub,
                                                                          tmp_path):
    """A real full disk: the models folder is a 32 MiB tmpfs (in a mount namespace of its own),
    enough at planning; once the first block is written it is filled up, so the download's next
    write fails with ENOSPC. The apply reports that error (not the journal's, which lives on
    another filesystem), keeps the boot as it was and claims no backup; once there is room the
    same command finishes."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs: it needs root and util-linux's unshare")
    folder = tmp_path / "published"
    main = gemma4_main(folder / MAIN, payload_bytes=9 << 20)  # three blocks of a download
    draft = gemma4_assistant(folder / DRAFT, payload_bytes=9 << 20)
    fake_hub.add_path(REPO, MAIN, main)
    fake_hub.add_path(REPO, DRAFT, draft)
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(route_toml(ROUTE, REPO, main, draft))
    grub = (box / GRUB).read_bytes()
    args = [*map(str, model_args(box, catalog)), "--apply", "--yes"]
    go, out, err, rc = (tmp_path / n for n in ("go", "out", "err", "rc"))
    env = {**os.environ, "OJAI_TEST_AT": f"pause:{go}", "COLUMNS": "200",
           "MODELS_DIR": str(box / MODELS), "GO": str(go), "OUT": str(out), "ERR": str(err),
           "RC": str(rc)}
    subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", FILL, "fill",
                    sys.executable, str(KILLER), "download-block", "1", "setup", *args],
                   env=env, check=True, timeout=120)
    said = " ".join(err.read_text().split())
    assert rc.read_text().strip() == "1", said
    assert "No space left on device" in said, said
    assert "then run again to resume it" in said and f" or more on {box / MODELS}" in said, said
    assert "journal" not in said.split("apply failed:")[1].split(";")[0], said
    assert "backed up" not in said, said
    assert "the boot configuration was not touched: the machine boots as before" in said, said
    assert f"ojai setup --root {box}" in said, said
    [entry] = journal_entries(box)
    assert entry["status"] == "failed" and "No space left on device" in entry["error"]
    state = json.loads((box / "var/lib/ojai/state.json").read_text())
    assert state["running"] is None and state["pending_handlers"] == []
    assert (box / GRUB).read_bytes() == grub

    done = ojai("setup", *args)  # the tmpfs is gone with its namespace: room again
    assert done.exit_code == 0, done.output
    assert (box / MODELS / REPO / MAIN).read_bytes() == main.read_bytes()
    assert (box / GRUB).read_bytes() != grub
    assert apply_finding(box)["severity"] == "pass"

# -- two ojai processes at once -------------------------------------------------------------
def wait_ready(go: Path, proc: subprocess.Popen) -> int:
    ready = go.with_name(go.name + ".ready")
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first ojai never reached its pause"
        time.sleep(0.05)
    return int(ready.read_text())


#: every point at which an apply (of cloud_box, two files and update-grub) and a rollback of
#: it hold the machine's lock, from just after taking it (before planning) to the last step
APPLY_POINTS = [("locked", 1), *BOUNDARIES]
ROLLBACK_POINTS = [("locked", 1), ("restore-start", 1), ("restore-done", 1),
                   ("restore-start", 2), ("restore-done", 2), ("handler-done", 1)]
HELD = [pytest.param(first, stage, nth, id=f"{first}-{stage}-{nth}")
        for first, points in (("apply", APPLY_POINTS), ("rollback", ROLLBACK_POINTS))
        for stage, nth in points]


@pytest.mark.parametrize("first,stage,nth", HELD)
def test_a_second_ojai_is_refused_before_it_plans_and_names_the_holder(machine, tmp_path, first,
                                                                       stage, nth):
    """A first apply or rollback paused at each point where it holds the machine's lock: a
    second apply and a second rollback are refused before they plan, naming the holder,
    changing nothing; the first then finishes as if alone."""
    root = cloud_box(machine)
    if first == "rollback":
        assert ojai("setup", "--root", root, "--apply", "--yes", *NO_LLAMA).exit_code == 0
        args = ["rollback", "--root", str(root), "--yes"]
        holder = "ojai rollback"
    else:
        args = ["setup", "--root", str(root), "--apply", "--yes", *NO_LLAMA]
        holder = "ojai setup --apply"
    go = tmp_path / "go"
    proc = at(root, stage, nth, f"pause:{go}", *args, wait=False)
    try:
        pid = wait_ready(go, proc)
        during = snapshot(root)
        for second in (["setup", "--root", root, "--apply", "--yes", *NO_LLAMA],
                       ["rollback", "--root", root, "--yes"]):
            refused = ojai(*second)
            assert refused.exit_code == 1, refused.output
            text = said(refused)
            assert f"process {pid} (`{holder}`, since 20" in text, text
            assert "nothing was changed" in text
            assert refused.stdout == ""  # refused before planning: no plan shown
        assert snapshot(root) == during
    finally:
        go.write_text("")
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    # the first one finished as if alone
    dry = ojai("setup", "--root", root, *NO_LLAMA)
    assert dry.exit_code == (0 if first == "apply" else 2), dry.output
    assert apply_finding(root)["severity"] == "pass"


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", ["apply", "rollback"])
def test_a_signal_while_planning_ends_with_a_sentence_and_changes_nothing(machine, command,
                                                                           signal_name):
    """Ctrl-C or SIGTERM once the lock is taken, before the plan or the rollback's review is
    made: exit 130, what happened, the command to run again; nothing changed, no journal
    entry, and the lock is free for the next ojai."""
    root = cloud_box(machine)
    if command == "rollback":
        assert ojai("setup", "--root", root, "--apply", "--yes", *NO_LLAMA).exit_code == 0
        args = ["rollback", "--root", str(root), "--yes"]
        again = f"before anything was restored; nothing was changed; to try again: " \
            f"ojai rollback --root {root}"
    else:
        args = ["setup", "--root", str(root), "--apply", "--yes", *NO_LLAMA]
        again = f"before the first change; nothing was changed; to try again: ojai setup " \
            f"--root {root} {' '.join(NO_LLAMA)} --apply"
    before, entries = snapshot(root), len(journal_entries(root))
    proc = at(root, "locked", 1, signal_name, *args)
    assert proc.returncode == 130, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    text = " ".join(proc.stderr.split())
    assert f"stopped by {signal_name} {again}" in text, text
    assert "Traceback" not in proc.stderr and "Aborted" not in proc.stderr
    assert snapshot(root) == before and len(journal_entries(root)) == entries
    done = ojai(*args)
    assert done.exit_code == 0, done.output
    assert apply_finding(root)["severity"] == "pass"


# -- what --remove-downloads removes -------------------------------------------------------
def model_leftovers(root: Path) -> list[str]:
    models = root / MODELS
    return sorted(str(p.relative_to(root)) for p in models.rglob("*")) if models.exists() else []


def test_remove_downloads_takes_the_records_and_the_folders_made_for_them(box, catalog):
    assert ojai("setup", *model_args(box, catalog), "--apply", "--yes").exit_code == 0
    assert any(n.endswith(".sha256") for n in model_leftovers(box))  # the digest records
    undo = ojai("rollback", "--root", box, "--yes", "--remove-downloads")
    assert undo.exit_code == 0, undo.output
    assert not (box / MODELS).exists(), model_leftovers(box)  # made by the apply, so removed


def test_remove_downloads_after_a_kill_mid_download_leaves_no_partial_file(box, catalog):
    """Killed (SIGKILL) with the first model file fully fetched but not yet renamed: the
    ``.partial`` is all there is of it; rollback --remove-downloads takes it and the folders."""
    proc = at(box, "before-rename", 1, "kill", "setup", *map(str, model_args(box, catalog)),
              "--apply", "--yes")
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert any(n.endswith(".partial") for n in model_leftovers(box)), model_leftovers(box)
    undo = ojai("rollback", "--root", box, "--yes", "--remove-downloads")
    assert undo.exit_code == 0, undo.output
    assert "partial" in undo.stdout
    assert not (box / MODELS).exists(), model_leftovers(box)
    assert apply_finding(box)["severity"] == "pass"


NIGHTLY = "/opt/ojai/llama.cpp"
STAGING = f"{NIGHTLY}/.b1311-gfx1150.unpack"


@pytest.fixture
def nightly(fake_github, tmp_path: Path):
    from support.fake_github import Entry, make_zip

    from ojai_setup.domain.nightly import asset_name

    body = make_zip(tmp_path / "b1311.zip", [
        Entry("llama-server", b"#!/bin/sh\necho 'version: 1311 (abc1234)' >&2\n", 0o100755),
        Entry("libllama.so", b"b1311", 0o100755)])
    fake_github.add_release("b1311", {asset_name("b1311", "gfx1150"): body})
    return fake_github


@pytest.mark.parametrize("remove", [True, False], ids=["remove-downloads", "doctor-then-setup"])
def test_a_kill_during_the_nightlys_unpack_leaves_nothing_behind_for_long(machine, nightly,
                                                                          remove):
    root = machine("ojai-fresh")
    proc = at(root, "before-rename", 1, "kill", "setup", "--root", str(root), "--no-npu",
              "--apply", "--yes")  # the nightly is unpacked, not yet renamed into place
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert (root / STAGING.lstrip("/")).is_dir()
    assert LIMIT not in (root / GRUB).read_text()  # the boot comes after the install
    if remove:
        undo = ojai("rollback", "--root", root, "--yes", "--remove-downloads")
        assert undo.exit_code == 0, undo.output
        assert STAGING in undo.stdout
        assert not (root / STAGING.lstrip("/")).exists()
        assert apply_finding(root)["severity"] == "pass"
        return
    undo = ojai("rollback", "--root", root, "--yes")  # settles it; keeps downloads
    assert undo.exit_code == 0, undo.output
    finding = apply_finding(root)
    assert finding["severity"] == "warn" and STAGING in finding["evidence"], finding
    # the whole command of the apply that was stopped, and the real path (in the machine folder)
    assert finding["fix"].startswith(f"`ojai setup --root {root} --no-npu --apply` clears them")
    assert f"`rm -rf {root}{STAGING}`" in finding["fix"] and "sudo" not in finding["fix"]
    done = ojai("setup", "--root", root, "--no-npu", "--apply", "--yes")
    assert done.exit_code == 0, done.output
    assert not (root / STAGING.lstrip("/")).exists()
    assert apply_finding(root)["severity"] == "pass"


# -- nothing of the host under --root -------------------------------------------------------
def test_a_program_inside_a_root_is_not_run_on_the_host_unless_asked(machine, tmp_path,
                                                                       monkeypatch):
    """A llama-server inside the machine folder that would leave a mark if it ran: by default
    ojai answers from the machine's captures (none here: it cannot tell its flags) and never
    runs it; with OJAI_RUN_ROOT_PROGRAMS=1 it does."""
    from ojai_setup.core.root import Root

    root = machine("ojai-fresh")
    mark = tmp_path / "it-ran"
    server = give_llama_server(root)
    server.write_text(f"#!/bin/sh\ntouch '{mark}'\necho 'version: 1 (abc)' >&2\n")
    monkeypatch.delenv("OJAI_RUN_ROOT_PROGRAMS")
    plan = ojai("setup", "--root", root, *NO_LLAMA)
    assert plan.exit_code in (1, 2), plan.output
    assert not mark.exists()
    result = Root(root).run(["/opt/ojai/llama.cpp/current/llama-server", "--version"])
    assert result.source == "missing" and not mark.exists()

    capture = root / ".ojai/commands/llama-server --version"  # a recorded answer stands in
    capture.mkdir(parents=True)
    (capture / "stderr").write_text("version: 0.6.0-dev (build 11434, commit abc1234)\n")
    result = Root(root).run(["/opt/ojai/llama.cpp/current/llama-server", "--version"])
    assert result.source == "capture" and "build 11434" in result.stderr and not mark.exists()

    asked = Root(root, run_programs=True).run(["/opt/ojai/llama.cpp/current/llama-server",
                                               "--version"])
    assert asked.source == "root-binary" and mark.exists()


def test_too_little_room_for_the_nightly_or_a_build_is_blocked_in_the_dry_run(
        machine, nightly, monkeypatch):
    """OJAI_DISK_BUDGET_BYTES caps the free space ojai counts: the nightly's zip and its
    unpacked files, or a build's measured folder and install, must fit before anything runs."""
    root = give_hip_toolchain(machine("ojai-fresh"))
    grub = (root / GRUB).read_bytes()
    monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", "100")
    for extra in ([], ["--llamacpp", "source", "--llamacpp-src", "/srv/llama.tar.gz",
                       "--backend", "hip"]):
        plan = ojai("setup", "--root", root, "--no-npu", *extra)
        assert plan.exit_code == 1, plan.output
        step = planned_step(["--root", root, "--no-npu", *extra], "llama.cpp")
        line = step["sentence"]
        assert step["status"] == "blocked", step
        assert line.startswith("not enough disk space in /opt/ojai/llama.cpp"), line
        assert "and 100 bytes is free" in line and "with a margin of" in line, line
        applied = ojai("setup", "--root", root, "--no-npu", *extra, "--apply", "--yes")
        # llama.cpp is left out; the GRUB edit is made by the first apply, so the second has
        # nothing it can apply
        if not extra:
            assert applied.exit_code == ExitStatus.INCOMPLETE, applied.output
            assert (root / GRUB).read_bytes() != grub
        else:
            assert applied.exit_code == ExitStatus.FAILED, applied.output
            assert "nothing can be applied: llama.cpp is blocked" in " ".join(
                applied.stderr.split())
    assert nightly.downloads() == []
    monkeypatch.delenv("OJAI_DISK_BUDGET_BYTES")
    assert ojai("setup", "--root", root, "--no-npu").exit_code == 2  # room enough: planned
    del grub
