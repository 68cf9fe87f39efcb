"""The follow-up commands of an apply that fails after the GRUB edit finished: by default
(``--force-handlers``, as Ansible's ``force_handlers``) the regeneration that edit notified
still runs, so the machine is consistent; with ``--no-force-handlers`` it is left owed, by its
exact command, in the machine's state: ``ojai doctor`` and the dry run show it and the next
``ojai setup --apply`` runs it. The same through the Ansible module's ``force_handlers``.

The failure is a full disk at the fault point after an action (ojai_setup/apply/faults.py),
reached once /etc/default/grub holds the new limit: the edit is done and journaled, its
follow-up not yet run. The machines are copies of the test machines, whose regeneration
commands are answered from their captures (``update-grub`` writes no grub.cfg under
``--root``): that a follow-up ran is read from the journal, the state and doctor."""

from __future__ import annotations

import errno
import json
import shutil
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.ansible_run import collections, play  # noqa: F401 - collections is a fixture
from typer.testing import CliRunner

from ojai_setup.apply import faults
from ojai_setup.cli import app
from ojai_setup.model.settings import Settings

REPO = Path(__file__).resolve().parents[2]
GRUB = "etc/default/grub"
MODPROBE = "etc/modprobe.d/ttm.conf"
LIMIT = "ttm.pages_limit=12582912"
NO_LLAMA = ["--llamacpp", "none", "--no-npu"]
FULL = "[Errno 28] No space left on device"
#: test machine -> the exact command that regenerates its boot configuration
REGENERATES = {
    "ojai-fresh": "update-grub",
    "opensuse-grub": "grub2-mkconfig -o /boot/grub2/grub.cfg",
}
#: strix-halo-dkms: the GRUB edit first, then modprobe.d, each with its own follow-up
STRIX_INITRAMFS = "update-initramfs -u -k 6.14.0-1014-oem"


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def said(result) -> str:
    return " ".join(result.stderr.split())


def state(root: Path) -> dict:
    return json.loads((root / "var/lib/ojai/state.json").read_text())


def owed(root: Path) -> list[str]:
    """The follow-up commands the machine's state records as owed."""
    return [" ".join(h["argv"]) for h in state(root)["pending_handlers"]]


def journal_entries(root: Path) -> list[dict]:
    folder = root / "var/lib/ojai/journal"
    return sorted((json.loads(p.read_text()) for p in folder.glob("*.json")),
                  key=lambda e: e["started"])


def ran(entry: dict) -> list[tuple[str, int | None]]:
    """The follow-up commands a journal entry ran, with their exit codes."""
    return [(" ".join(h["argv"]), h.get("exit_code")) for h in entry["handlers"]]


def doctor(root: Path) -> dict[str, dict]:
    report = json.loads(ojai("doctor", "--json", "--root", root).stdout)
    return {f["id"]: f for f in report["findings"]}


@contextmanager
def disk_full_after_the_grub_edit(root: Path) -> Iterator[None]:
    """The disk fills at the first action boundary after /etc/default/grub changed."""
    before = (root / GRUB).read_bytes()

    def fault(stage: str) -> None:
        if stage == "action-done" and (root / GRUB).read_bytes() != before:
            raise OSError(errno.ENOSPC, "No space left on device")

    faults.set_fault_hook(fault)
    try:
        yield
    finally:
        faults.set_fault_hook(None)


def failed_apply(root: Path, *options: str):
    """``ojai setup --apply`` with ``options``, failing after the GRUB edit."""
    grub = (root / GRUB).read_bytes()
    with disk_full_after_the_grub_edit(root):
        result = ojai("setup", "--root", root, *NO_LLAMA, "--apply", "--yes", *options)
    assert result.exit_code == 1, result.output
    assert (root / GRUB).read_bytes() != grub  # the edit finished before the failure
    return result


def finish_command(root: Path) -> str:
    return Settings(llamacpp="none", npu=False).command("--apply", root=str(root))


# -- the command line -----------------------------------------------------------------------
@pytest.mark.parametrize("name", REGENERATES)
def test_by_default_a_failed_apply_still_regenerates_the_boot_after_the_grub_edit(machine,
                                                                                  name):
    """The apply fails after the GRUB edit: the regeneration it notified runs anyway (the
    journal has it with exit code 0), the output says it ran and that the boot was changed and
    regenerated, nothing is owed (state, doctor), and the dry run has nothing left to do."""
    root = machine(name)
    command = REGENERATES[name]
    text = said(failed_apply(root))
    assert f"apply failed: {FULL}" in text, text
    assert f"ran: `{command}`" in text, text
    assert "the boot configuration was changed and regenerated; a reboot makes it active" \
        in text, text
    assert "still owed" not in text and "regeneration is owed" not in text, text
    [entry] = journal_entries(root)
    assert entry["status"] == "failed" and entry["error"] == FULL
    assert ran(entry) == [(command, 0)]
    assert owed(root) == []
    findings = doctor(root)
    assert findings["ojai.apply"]["severity"] == "pass", findings["ojai.apply"]
    assert "owes" not in findings["ttm.active"]["evidence"], findings["ttm.active"]
    dry = ojai("setup", "--root", root, *NO_LLAMA)
    assert dry.exit_code == 0, dry.output


@pytest.mark.parametrize("name", REGENERATES)
def test_no_force_handlers_leaves_the_regeneration_owed_until_the_next_apply_runs_it(machine,
                                                                                     name):
    """With --no-force-handlers the same failure runs no follow-up: the output names the
    exact command still owed and says the boot's regeneration is owed; the state records it,
    doctor's apply finding fails with it, the dry run says it is due (exit 2); the next
    ``ojai setup --apply`` runs it and ends with nothing to do and nothing owed."""
    root = machine(name)
    command = REGENERATES[name]
    text = said(failed_apply(root, "--no-force-handlers"))
    assert f"apply failed: {FULL}" in text, text
    assert f"still owed (the next apply runs it): `{command}`" in text, text
    assert "the boot configuration was changed and its regeneration is owed" in text, text
    assert "ran: " not in text, text
    assert f"to finish: {finish_command(root)}" in text, text
    [entry] = journal_entries(root)
    assert entry["status"] == "failed" and ran(entry) == []
    assert owed(root) == [command]

    finding = doctor(root)["ojai.apply"]
    assert finding["severity"] == "fail", finding
    assert finding["evidence"].endswith(f"follow-up commands owed: {command}"), finding
    assert f"Run `{finish_command(root)}`: it runs the owed commands." in finding["fix"], \
        finding
    dry = ojai("setup", "--root", root, *NO_LLAMA)
    assert dry.exit_code == 2, dry.output
    assert "an earlier apply left work owed" in " ".join(dry.stdout.split())

    done = ojai("setup", "--root", root, *NO_LLAMA, "--apply", "--yes")
    assert done.exit_code == 0, done.output
    assert "applied: ran " in done.stdout and "still owed" not in done.stdout, done.stdout
    first, second = journal_entries(root)
    assert second["status"] == "complete" and ran(second) == [(command, 0)]
    assert owed(root) == []
    assert doctor(root)["ojai.apply"]["severity"] == "pass"
    assert ojai("setup", "--root", root, *NO_LLAMA).exit_code == 0


@pytest.mark.parametrize("force", [True, False], ids=["force-handlers", "no-force-handlers"])
def test_only_the_follow_ups_of_the_edits_that_finished_run_or_are_owed(machine, force):
    """strix-halo-dkms edits /etc/default/grub (update-grub) and then modprobe.d (the
    initramfs); a failure between the two concerns update-grub alone: it runs, or is owed,
    while the initramfs, whose edit never happened, is neither run nor owed. The next apply
    makes the second edit and runs what is left."""
    root = machine("strix-halo-dkms")
    modprobe = (root / MODPROBE).read_bytes()
    text = said(failed_apply(root, *([] if force else ["--no-force-handlers"])))
    assert (root / MODPROBE).read_bytes() == modprobe  # the second edit never happened
    [entry] = journal_entries(root)
    if force:
        assert ran(entry) == [("update-grub", 0)] and owed(root) == []
        assert "ran: `update-grub`" in text and "still owed" not in text, text
    else:
        assert ran(entry) == [] and owed(root) == ["update-grub"]
        assert "still owed (the next apply runs it): `update-grub`" in text, text
    assert "update-initramfs" not in text, text

    done = ojai("setup", "--root", root, *NO_LLAMA, "--apply", "--yes")
    assert done.exit_code == 0, done.output
    assert (root / MODPROBE).read_bytes() != modprobe
    _, second = journal_entries(root)
    assert ran(second) == ([] if force else [("update-grub", 0)]) + [(STRIX_INITRAMFS, 0)]
    assert owed(root) == [] and doctor(root)["ojai.apply"]["severity"] == "pass"
    assert ojai("setup", "--root", root, *NO_LLAMA).exit_code == 0


@pytest.mark.parametrize("force", [True, False], ids=["force-handlers", "no-force-handlers"])
def test_the_json_report_of_the_failed_apply_says_what_ran_and_what_is_owed(machine, force):
    """``--apply --json`` (what the Ansible module reads): ``handlers`` has the regeneration
    that ran, or ``owed`` the one left, each by name and command; the error and the commands
    that finish and undo the apply."""
    root = machine("ojai-fresh")
    options = ["--json"] + ([] if force else ["--no-force-handlers"])
    report = json.loads(failed_apply(root, *options).stdout)
    assert report["schema"] == "ojai.apply/1" and report["exit_code"] == 1
    assert report["error"] == FULL and report["follow_ups_failed"] == []
    update_grub = [{"name": "update-grub", "command": "update-grub"}]
    assert (report["handlers"], report["owed"]) == ((update_grub, []) if force
                                                    else ([], update_grub))
    assert report["files_changed"] == ["/etc/default/grub"]
    assert report["finish_command"] == finish_command(root)
    assert report["undo_command"] == f"ojai rollback --root {root}"


# -- the Ansible module --------------------------------------------------------------------
#: an ojai executable for the play: the real command line, with the disk filling once the
#: --root machine's /etc/default/grub is written (as disk_full_after_the_grub_edit)
FAILING_OJAI = '''\
#!{python}
import errno
import sys
from pathlib import Path

from ojai_setup.apply.faults import set_fault_hook
from ojai_setup.cli import app

grub = Path(sys.argv[sys.argv.index("--root") + 1]) / "etc/default/grub"
before = grub.read_bytes()


def fault(stage):
    if stage == "action-done" and grub.read_bytes() != before:
        raise OSError(errno.ENOSPC, "No space left on device")


set_fault_hook(fault)
sys.argv[0] = "ojai"
app()
'''

FOLLOW_UPS_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: ojai setup
      ojai.ojai.setup:
        executable: "{{ ojai_executable }}"
        root: "{{ ojai_root }}"
        llamacpp: none
        npu: false
        force_handlers: "{{ ojai_force_handlers }}"
"""


def test_ansible_force_handlers_false_leaves_the_follow_up_owed_and_the_default_runs_it(
        tmp_path, collections):
    """One play over two copies of ojai-fresh whose apply fails after the GRUB edit: the
    task with ``force_handlers: true`` (the module's default) fails with update-grub run and
    nothing owed; the one with ``force_handlers: false`` (``--no-force-handlers``) fails with
    update-grub owed in the machine's state, which the next ``ojai setup --apply`` runs. The
    failed task's result says what ran, what is owed and the commands that finish or undo."""
    exe = tmp_path / "ojai-disk-fills"
    exe.write_text(FAILING_OJAI.format(python=sys.executable))
    exe.chmod(0o755)
    roots = {}
    for host in ("forced", "owed"):
        roots[host] = tmp_path / "machines" / host
        shutil.copytree(REPO / "tests/machines/ojai-fresh", roots[host], symlinks=True)
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "ojai_executable": str(exe)},
        "hosts": {"forced": {"ojai_root": str(roots["forced"]), "ojai_force_handlers": True},
                  "owed": {"ojai_root": str(roots["owed"]), "ojai_force_handlers": False}}}}))
    book = tmp_path / "play.yml"
    book.write_text(textwrap.dedent(FOLLOW_UPS_PLAY))
    run = play(book, inventory, collections, tmp_path,
               env={"ANSIBLE_REMOTE_TEMP": str(tmp_path / "ansible-remote-tmp")})
    res = run.results("ojai setup")
    assert run.rc == 2, run.stdout[-3000:]  # both hosts failed
    for host, force in (("forced", True), ("owed", False)):
        r = res[host]
        assert r["invocation"]["module_args"]["force_handlers"] is force
        assert r["failed"] is True and r["rc"] == 1, r
        assert r["msg"].startswith(f"apply failed: {FULL}"), r["msg"]
        assert r["changed"] is True and r["files_changed"] == ["/etc/default/grub"], r
        assert LIMIT in (roots[host] / GRUB).read_text()
        assert (r["commands_ran"], r["commands_owed"]) == (
            (["update-grub"], []) if force else ([], ["update-grub"])), r
        assert "handlers" not in r and r["commands_failed"] == [], r  # not the plan's list
        finish = f"ojai setup --root {roots[host]} {' '.join(NO_LLAMA)} --apply"
        assert r["finish_command"] == finish, r
        assert r["undo_command"] == f"ojai rollback --root {roots[host]}", r

    assert owed(roots["forced"]) == []
    assert ran(journal_entries(roots["forced"])[0]) == [("update-grub", 0)]

    assert owed(roots["owed"]) == ["update-grub"]
    assert ran(journal_entries(roots["owed"])[0]) == []
    assert doctor(roots["owed"])["ojai.apply"]["severity"] == "fail"
    done = ojai("setup", "--root", roots["owed"], *NO_LLAMA, "--apply", "--yes")
    assert done.exit_code == 0, done.output
    assert owed(roots["owed"]) == [] and doctor(roots["owed"])["ojai.apply"]["severity"] == "pass"
