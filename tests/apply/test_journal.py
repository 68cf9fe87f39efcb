"""Journal, state records and rollback on a machine folder."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from pydantic import BaseModel
from support.context import ToyContext as PlanContext
from support.machine_state import record_state, store_capture

from ojai_setup.apply.executor import CommandFailed, apply, failure_of
from ojai_setup.apply.journal import load_entry
from ojai_setup.apply.rollback import RollbackError, rollback
from ojai_setup.core.progress import NullProgress
from ojai_setup.core.root import CommandResult, Root
from ojai_setup.core.status import ExitStatus
from ojai_setup.facts.state import JournalError, read_state, state_dir
from ojai_setup.model.actions import RunCommand, Symlink, WriteFile
from ojai_setup.planning.plan import make_plan
from ojai_setup.planning.result import StepResult

GRUB = "/etc/default/grub"
MODPROBE = "/etc/modprobe.d/ttm.conf"
LINK = "/opt/ojai/current"
ORIGINAL = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n'
EDITED = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash ttm.pages_limit=12582912"\n'
UPDATE_GRUB = RunCommand(argv=("update-grub",), needs_root=True)


class Facts(BaseModel):
    boot: str = "one"


class Settings(BaseModel):
    grub: str = EDITED
    link: str = "/opt/ojai/b2"


class TtmStep:
    """Edits grub, adds a modprobe file, switches a link, and records what it expects."""

    name = "ttm"

    def plan(self, ctx: PlanContext) -> StepResult:
        grub = ctx.root.read_text(GRUB)
        modprobe = ctx.root.read_text(MODPROBE) if ctx.root.exists(MODPROBE) else None
        link_real = ctx.root.resolve(LINK)
        link = os.readlink(link_real) if link_real.is_symlink() else None
        actions: list = []
        if grub != ctx.settings.grub:
            actions.append(WriteFile(path=GRUB, before=grub, after=ctx.settings.grub,
                                     needs_reboot="the kernel command line changed",
                                     notify=("update-grub",)))
        if modprobe != "options ttm pages_limit=12582912\n":
            actions.append(WriteFile(path=MODPROBE, before=modprobe,
                                     after="options ttm pages_limit=12582912\n"))
        if link != ctx.settings.link:
            actions.append(Symlink(path=LINK, target=ctx.settings.link, before=link))
        if not actions:
            return StepResult.satisfied(self.name, "the GPU memory limit is configured")
        return StepResult.change(self.name, "raise the GPU memory limit", actions,
                                 handlers={"update-grub": UPDATE_GRUB},
                                 records={"ttm": {"expected_pages": 12582912}})


def _machine(tmp_path: Path, boot_id: str = "boot-one") -> Root:
    base = tmp_path / "machine"
    (base / "etc/default").mkdir(parents=True)
    (base / "etc/default/grub").write_text(ORIGINAL)
    os.chmod(base / "etc/default/grub", 0o600)
    (base / "opt/ojai").mkdir(parents=True)
    os.symlink("/opt/ojai/b1", base / "opt/ojai/current")
    (base / "proc/sys/kernel/random").mkdir(parents=True)
    (base / "proc/sys/kernel/random/boot_id").write_text(boot_id + "\n")
    store_capture(base, CommandResult(("update-grub",), 0, "done\n"))
    return Root(base)


def _apply(root: Root, **settings: str):
    plan = make_plan(PlanContext(root, Facts(), Settings(**settings)), [TtmStep()])
    return apply(plan, root, NullProgress())


def test_the_journal_records_every_changed_path_with_digests_and_the_boot_id(tmp_path):
    root = _machine(tmp_path)
    result = _apply(root)
    journal = root.resolve(f"/var/lib/ojai/journal/{result.apply_id}.json")
    assert result.journal == journal
    entry = load_entry(root, result.apply_id)
    assert entry.kind == "apply" and entry.status == "complete" and entry.boot_id == "boot-one"
    files = {f.path: f for f in entry.files}
    assert sorted(files) == [GRUB, MODPROBE, LINK]
    assert files[GRUB].existed_before and files[GRUB].before.startswith("sha256:")
    assert files[GRUB].after != files[GRUB].before
    assert files[GRUB].backup == f"backups/{result.apply_id}/etc/default/grub"
    assert files[MODPROBE].existed_before is False and files[MODPROBE].before is None
    assert files[MODPROBE].backup is None
    assert files[LINK].before == "symlink:/opt/ojai/b1"
    assert files[LINK].after == "symlink:/opt/ojai/b2"
    assert [h.name for h in entry.handlers] == ["update-grub"]
    assert entry.reboot == ["the kernel command line changed"]
    assert json.loads(journal.read_text())["format"] == "ojai-journal"
    assert read_state(root).last_apply == result.apply_id


def test_step_records_land_in_state_with_the_boot_and_apply_ids(tmp_path):
    root = _machine(tmp_path)
    result = _apply(root)
    state = read_state(root)
    assert state.records["ttm"] == {"expected_pages": 12582912, "boot_id": "boot-one",
                                    "apply_id": result.apply_id}
    # re-applying with nothing to change keeps the record of the apply that changed things
    again = make_plan(PlanContext(root, Facts(), Settings()), [TtmStep()])
    assert again.exit_code == ExitStatus.OK
    apply(again, root, NullProgress())
    assert read_state(root).records["ttm"]["apply_id"] == result.apply_id


def test_record_state_and_read_state(tmp_path):
    root = _machine(tmp_path)
    assert read_state(root).records == {}
    record_state(root, "lemonade", {"port": 13305})
    record_state(root, "ttm", {"expected_pages": 1})
    assert read_state(root).records == {"lemonade": {"port": 13305}, "ttm": {"expected_pages": 1}}
    record_state(root, "ttm", None)
    assert read_state(root).records == {"lemonade": {"port": 13305}}
    assert state_dir(root) == root.resolve("/var/lib/ojai")


def test_a_damaged_state_file_is_named(tmp_path):
    root = _machine(tmp_path)
    path = root.resolve("/var/lib/ojai/state.json")
    path.parent.mkdir(parents=True)
    path.write_text("{truncated")
    with pytest.raises(JournalError, match=r"state.json: ojai's state is not valid JSON at line 1, "
                       r"column 2 .*; move it aside \(`mv .*state.json .*state.json.damaged`\)"):
        read_state(root)


def test_a_state_file_that_is_not_text_is_named(tmp_path):
    root = _machine(tmp_path)
    path = root.resolve("/var/lib/ojai/state.json")
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"records": "\xff\xfe"}')
    with pytest.raises(JournalError, match=r"state.json: cannot be read \(not UTF-8 text\); move "
                       r"it aside \(`mv .*state.json .*state.json.damaged`\)"):
        read_state(root)


def test_rollback_restores_files_links_and_records_and_removes_created_files(tmp_path):
    root = _machine(tmp_path)
    record_state(root, "ttm", {"expected_pages": 1})
    applied = _apply(root)
    assert root.read_text(GRUB) == EDITED

    result = rollback(root, NullProgress())
    assert result.rolled_back == applied.apply_id
    assert root.read_text(GRUB) == ORIGINAL
    assert stat.S_IMODE(os.stat(root.resolve(GRUB)).st_mode) == 0o600
    assert not root.exists(MODPROBE)
    assert os.readlink(root.resolve(LINK)) == "/opt/ojai/b1"
    # the folder the apply made for it goes too, once empty
    assert sorted(result.restored) == [GRUB, LINK] and result.removed == [MODPROBE, "/etc/modprobe.d"]
    assert not root.exists("/etc/modprobe.d")
    assert result.handlers == ["update-grub"]
    assert sum(1 for c in root.commands if c.argv == ("update-grub",)) == 2
    assert result.reboot == ["the kernel command line changed"]
    assert read_state(root).records["ttm"] == {"expected_pages": 1}
    assert read_state(root).last_apply is None
    entry = load_entry(root, result.journal_id)
    assert entry.kind == "rollback" and entry.rolls_back == applied.apply_id
    assert sorted(f.path for f in entry.files) == [GRUB, MODPROBE, LINK]
    # the machine is back where it started: the same plan is needed again
    plan = make_plan(PlanContext(root, Facts(), Settings()), [TtmStep()])
    assert len(plan.actions()) == 3


def test_rollback_refuses_when_a_file_changed_after_the_apply_unless_forced(tmp_path):
    root = _machine(tmp_path)
    _apply(root)
    root.resolve(GRUB).write_text(EDITED + "# edited by hand\n")
    with pytest.raises(RollbackError) as err:
        rollback(root, NullProgress())
    message = str(err.value)
    assert message.startswith(f"{GRUB} changed since apply ")
    assert "nothing was restored" in message
    assert "`ojai rollback --force`" in message
    assert root.exists(MODPROBE)  # nothing was restored

    rollback(root, NullProgress(), force=True)
    assert root.read_text(GRUB) == ORIGINAL and not root.exists(MODPROBE)


def test_rollback_with_nothing_applied(tmp_path):
    root = _machine(tmp_path)
    with pytest.raises(RollbackError, match="nothing to roll back: no apply is journaled"):
        rollback(root, NullProgress())


def test_successive_rollbacks_walk_back_through_applies(tmp_path):
    root = _machine(tmp_path)
    first = _apply(root)
    second = _apply(root, grub=EDITED + "GRUB_TIMEOUT=3\n", link="/opt/ojai/b3")
    assert [a.changed for a in second.actions] == [True, True]
    assert rollback(root, NullProgress()).rolled_back == second.apply_id
    assert root.read_text(GRUB) == EDITED
    assert os.readlink(root.resolve(LINK)) == "/opt/ojai/b2"
    assert rollback(root, NullProgress()).rolled_back == first.apply_id
    assert root.read_text(GRUB) == ORIGINAL
    assert os.readlink(root.resolve(LINK)) == "/opt/ojai/b1"
    with pytest.raises(RollbackError, match="nothing to roll back"):
        rollback(root, NullProgress())


def test_an_apply_that_changed_nothing_is_not_what_rollback_undoes(tmp_path):
    root = _machine(tmp_path)
    first = _apply(root)
    plan = make_plan(PlanContext(root, Facts(), Settings()), [TtmStep()])
    assert apply(plan, root, NullProgress()).apply_id is None
    assert rollback(root, NullProgress()).rolled_back == first.apply_id


def _fail_after_grub(root: Root):
    """A fault hook: the disk fills once the GRUB file (the last action: the boot goes last)
    is written, with update-grub still to run."""
    def fault(stage: str) -> None:
        if stage == "action-done" and root.read_text(GRUB) != ORIGINAL:
            raise OSError("disk full")
    return fault


def test_a_failed_apply_is_journaled_and_can_be_rolled_back(tmp_path):
    root = _machine(tmp_path)
    plan = make_plan(PlanContext(root, Facts(), Settings()), [TtmStep()])
    with pytest.raises(OSError, match="disk full"):
        apply(plan, root, NullProgress(), fault_hook=_fail_after_grub(root), force_handlers=False)
    state = read_state(root)
    entry = load_entry(root, state.last_apply)
    assert entry.status == "failed" and entry.error == "disk full"
    assert [f.path for f in entry.files] == [MODPROBE, LINK, GRUB]  # the boot last
    assert [h.name for h in state.pending_handlers] == ["update-grub"]
    backups = root.resolve("/var/lib/ojai/backups") / entry.apply_id
    assert sorted(p.name for p in backups.rglob("*") if p.is_file()) == ["grub"]

    result = rollback(root, NullProgress())
    assert GRUB in result.restored and root.read_text(GRUB) == ORIGINAL


def test_the_follow_ups_of_finished_edits_run_when_an_apply_fails(tmp_path):
    root = _machine(tmp_path)
    plan = make_plan(PlanContext(root, Facts(), Settings()), [TtmStep()])
    with pytest.raises(OSError, match="disk full") as err:
        apply(plan, root, NullProgress(), fault_hook=_fail_after_grub(root))
    failure = failure_of(err.value)
    assert failure is not None and failure.error == "disk full"
    assert failure.result.handlers == ["update-grub"] and failure.result.owed == []
    assert failure.result.files_changed == [MODPROBE, LINK, GRUB]
    state = read_state(root)
    assert state.pending_handlers == []  # the machine is consistent: nothing is owed
    entry = load_entry(root, state.last_apply)
    assert entry.status == "failed"
    assert [(h.name, h.exit_code) for h in entry.handlers] == [("update-grub", 0)]


def test_handlers_left_due_by_a_failed_apply_run_on_the_next_apply(tmp_path):
    root = _machine(tmp_path)
    store_capture(root.path, CommandResult(("update-grub",), 1, "", "grub-mkconfig: error\n"))
    with pytest.raises(CommandFailed, match="`update-grub` failed with exit code 1: "
                                            "grub-mkconfig: error"):
        _apply(root)
    assert root.read_text(GRUB) == EDITED
    assert [h.name for h in read_state(root).pending_handlers] == ["update-grub"]

    store_capture(root.path, CommandResult(("update-grub",), 0, "done\n"))
    plan = make_plan(PlanContext(root, Facts(), Settings()), [TtmStep()])
    assert plan.exit_code == ExitStatus.OK
    result = apply(plan, root, NullProgress())
    assert result.handlers == ["update-grub"]
    assert result.message == "ran update-grub"
    assert read_state(root).pending_handlers == []
    assert apply(plan, root, NullProgress()).handlers == []


def test_an_unprivileged_user_on_the_host_journals_in_their_own_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert state_dir(Root("/"), euid=1000) == tmp_path / "state" / "ojai"
    assert state_dir(Root("/"), euid=0) == Path("/var/lib/ojai")
    target = tmp_path / "user.conf"

    class UserStep:
        name = "user"

        def plan(self, ctx: PlanContext) -> StepResult:
            return StepResult.change(self.name, "write", [
                WriteFile(path=str(target), before=None, after="a = 1\n")])

    host = Root("/")
    plan = make_plan(PlanContext(host, Facts(), Settings()), [UserStep()])
    result = apply(plan, host, NullProgress(), euid=1000)
    assert result.journal == tmp_path / "state/ojai/journal" / f"{result.apply_id}.json"
    assert rollback(host, NullProgress(), euid=1000).removed == [str(target)]
    assert not target.exists()


def test_the_first_error_is_reported_when_the_journal_cannot_be_written_after_it(tmp_path,
                                                                                 monkeypatch):
    """The disk fills during the apply and the journal's last write fails on it too: the apply's
    own error is the one raised and reported, the journal's comes second, and the report still
    names what changed and both commands."""
    from ojai_setup.apply.journal import Journal
    from ojai_setup.commands.setup_views import ApplyFailureReport

    def full(self, *args, **kwargs):
        raise JournalError(f"cannot write ojai's journal {self.dir}: No space left on device")

    monkeypatch.setattr(Journal, "close", full)
    root = _machine(tmp_path)
    plan = make_plan(PlanContext(root, Facts(), Settings()), [TtmStep()])
    with pytest.raises(OSError, match="^disk full$") as err:
        apply(plan, root, NullProgress(), fault_hook=_fail_after_grub(root))
    assert not isinstance(err.value, JournalError)
    failure = failure_of(err.value)
    assert failure.error == "disk full"
    assert failure.journal_error.startswith("cannot write ojai's journal ")
    assert failure.journal_error.endswith(": No space left on device")
    assert failure.result.files_changed == [MODPROBE, LINK, GRUB]
    assert failure.result.handlers == ["update-grub"]  # the follow-up still ran

    lines = ApplyFailureReport(plan, failure, finish="ojai setup --root M --apply",
                               undo="ojai rollback --root M", journal=None, exit_code=1).lines()
    assert lines[0] == (f"changed: {MODPROBE}, {LINK}, {GRUB} "
                        f"(the originals of {GRUB} are backed up)")
    assert f"then the journal could not be written: {failure.journal_error}" in lines
    assert lines[-2:] == ["to finish: ojai setup --root M --apply",
                          "to undo: ojai rollback --root M"]
