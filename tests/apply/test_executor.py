"""The executor against toy steps on a machine folder: apply, re-plan, faults, privileges."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from pydantic import BaseModel
from support.context import ToyContext as PlanContext
from support.machine_state import store_capture

from ojai_setup.apply.executor import (
    EXECUTORS,
    LAZY_EXECUTORS,
    VALIDATORS,
    ActionOutcome,
    NeedsRoot,
    PlanConflict,
    ValidationError,
    VerifyError,
    apply,
    executor_for,
    register_validator,
)
from ojai_setup.core.errors import ApplyError
from ojai_setup.core.progress import NullProgress
from ojai_setup.core.root import CommandResult, Root
from ojai_setup.core.status import ExitStatus
from ojai_setup.model.actions import HubDownload, RunCommand, Symlink, WriteFile
from ojai_setup.planning.plan import Plan, check_fresh, make_plan
from ojai_setup.planning.result import StepResult

GRUB = "/etc/default/grub"
CONFIG = "/etc/ojai/config.json"
LINK = "/opt/ojai/llama.cpp/current"
UPDATE_GRUB = RunCommand(argv=("update-grub",), needs_root=True, reason="regenerate grub.cfg")


class Facts(BaseModel):
    kernel: str = "6.17.0-19-generic"


class Settings(BaseModel):
    pages: int = 12582912
    version: str = "b1311"


def _cmdline_with(text: str, pages: int) -> str:
    """Set ttm.pages_limit in GRUB_CMDLINE_LINUX_DEFAULT by key."""
    out = []
    for line in text.splitlines():
        if line.startswith("GRUB_CMDLINE_LINUX_DEFAULT="):
            words = [w for w in line.split("=", 1)[1].strip('"').split()
                     if not w.startswith("ttm.pages_limit=")]
            words.append(f"ttm.pages_limit={pages}")
            line = 'GRUB_CMDLINE_LINUX_DEFAULT="' + " ".join(words) + '"'
        out.append(line)
    return "\n".join(out) + "\n"


class GrubStep:
    name = "gpu-memory"

    def plan(self, ctx: PlanContext) -> StepResult:
        before = ctx.root.read_text(GRUB)
        after = _cmdline_with(before, ctx.settings.pages)
        if after == before:
            return StepResult.satisfied(self.name, f"ttm.pages_limit={ctx.settings.pages} is "
                                        f"already set in {GRUB}")
        return StepResult.change(
            self.name, f"set ttm.pages_limit={ctx.settings.pages} in {GRUB}",
            [WriteFile(path=GRUB, before=before, after=after, needs_root=True,
                       needs_reboot="the kernel command line changed", notify=("update-grub",))],
            handlers={"update-grub": UPDATE_GRUB},
            records={"ttm": {"expected_pages": ctx.settings.pages}})


class ConfigStep:
    name = "config"

    def plan(self, ctx: PlanContext) -> StepResult:
        want = json.dumps({"pages": ctx.settings.pages}, indent=2) + "\n"
        have = ctx.root.read_text(CONFIG) if ctx.root.exists(CONFIG) else None
        if have == want:
            return StepResult.satisfied(self.name, f"{CONFIG} is up to date")
        return StepResult.change(self.name, f"write {CONFIG}",
                                 [WriteFile(path=CONFIG, before=have, after=want,
                                            needs_root=True, notify=("update-grub",))],
                                 handlers={"update-grub": UPDATE_GRUB})


class LinkStep:
    name = "llama-link"

    def plan(self, ctx: PlanContext) -> StepResult:
        target = f"/opt/ojai/llama.cpp/{ctx.settings.version}"
        real = ctx.root.resolve(LINK)
        now = os.readlink(real) if real.is_symlink() else None
        if now == target:
            return StepResult.satisfied(self.name, f"{LINK} already points to {target}",
                                        reads=(LINK,))
        return StepResult.change(self.name, f"point {LINK} at {target}",
                                 [Symlink(path=LINK, target=target, before=now)], reads=(LINK,))


STEPS = [GrubStep(), ConfigStep(), LinkStep()]
ORIGINAL_GRUB = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n'


def _machine(tmp_path: Path) -> Root:
    base = tmp_path / "machine"
    (base / "etc/default").mkdir(parents=True)
    (base / "etc/default/grub").write_text(ORIGINAL_GRUB)
    os.chmod(base / "etc/default/grub", 0o640)
    (base / "opt/ojai/llama.cpp/b1200").mkdir(parents=True)
    (base / "opt/ojai/llama.cpp/b1311").mkdir(parents=True)
    os.symlink("/opt/ojai/llama.cpp/b1200", base / "opt/ojai/llama.cpp/current")
    (base / "proc/sys/kernel/random").mkdir(parents=True)
    (base / "proc/sys/kernel/random/boot_id").write_text("0f6e4e5a-boot-one\n")
    store_capture(base, CommandResult(("update-grub",), 0, "Generating grub configuration file ...\n"))
    return Root(base)


def _plan(root: Root, **settings: object) -> Plan:
    return make_plan(PlanContext(root, Facts(), Settings(**settings)), STEPS)


def _grub_runs(root: Root) -> int:
    return sum(1 for c in root.commands if c.argv == ("update-grub",))


def test_plan_apply_then_plan_again_has_nothing_to_do(tmp_path):
    root = _machine(tmp_path)
    plan = _plan(root)
    assert plan.exit_code == ExitStatus.CHANGES == 2
    result = apply(plan, root, NullProgress())
    assert result.changed
    assert result.message == ("changed 3 of 3 action(s); ran update-grub; reboot needed: "
                              "the kernel command line changed")
    assert "ttm.pages_limit=12582912" in root.read_text(GRUB)
    assert os.readlink(root.resolve(LINK)) == "/opt/ojai/llama.cpp/b1311"

    again = _plan(root)
    assert again.exit_code == ExitStatus.OK == 0
    assert [r.sentence for r in again.steps] == [
        f"ttm.pages_limit=12582912 is already set in {GRUB}",
        f"{CONFIG} is up to date",
        f"{LINK} already points to /opt/ojai/llama.cpp/b1311",
    ]
    second = apply(again, root, NullProgress())
    assert second.apply_id is None and not second.changed
    assert second.message == "nothing to do: every step is satisfied"


def test_applying_the_same_plan_twice_changes_nothing_the_second_time(tmp_path):
    root = _machine(tmp_path)
    plan = _plan(root)
    apply(plan, root, NullProgress())
    grub_after = root.read_text(GRUB)
    second = apply(plan, root, NullProgress())
    assert not second.changed
    assert second.message == "nothing changed: all 3 action(s) were already in place"
    assert [a.message for a in second.actions] == [  # the boot configuration last
        f"{CONFIG} already has the planned content",
        f"{LINK} already points to /opt/ojai/llama.cpp/b1311",
        f"{GRUB} already has the planned content",
    ]
    assert root.read_text(GRUB) == grub_after
    assert not (root.resolve("/var/lib/ojai/backups") / second.apply_id).exists()


def test_handlers_run_once_and_only_when_something_changed(tmp_path):
    root = _machine(tmp_path)
    plan = _plan(root)
    notifying = [p for p in plan.actions() if "update-grub" in p.action.notify]
    assert len(notifying) == 2
    result = apply(plan, root, NullProgress())
    assert result.handlers == ["update-grub"]
    assert _grub_runs(root) == 1
    apply(plan, root, NullProgress())
    apply(_plan(root), root, NullProgress())
    assert _grub_runs(root) == 1


def test_a_handler_runs_when_only_one_of_its_notifiers_changed(tmp_path):
    root = _machine(tmp_path)
    apply(_plan(root), root, NullProgress())
    assert _grub_runs(root) == 1
    root.resolve(CONFIG).unlink()
    plan = _plan(root)
    assert [r.status for r in plan.steps] == ["satisfied", "change", "satisfied"]
    result = apply(plan, root, NullProgress())
    assert result.handlers == ["update-grub"] and _grub_runs(root) == 2
    assert result.reboot == []


def test_backups_are_made_only_for_files_whose_content_changes(tmp_path):
    root = _machine(tmp_path)
    result = apply(_plan(root), root, NullProgress())
    backups = root.resolve("/var/lib/ojai/backups") / result.apply_id
    files = sorted(p.relative_to(backups).as_posix() for p in backups.rglob("*") if p.is_file())
    assert files == ["etc/default/grub"]  # config.json was new, the link is journaled
    assert (backups / "etc/default/grub").read_text() == ORIGINAL_GRUB


def test_write_keeps_the_original_mode_and_action_mode_wins(tmp_path):
    root = _machine(tmp_path)
    apply(_plan(root), root, NullProgress())
    assert stat.S_IMODE(os.stat(root.resolve(GRUB)).st_mode) == 0o640
    assert stat.S_IMODE(os.stat(root.resolve(CONFIG)).st_mode) == 0o644

    class Script:
        name = "script"

        def plan(self, ctx: PlanContext) -> StepResult:
            return StepResult.change(self.name, "write the launch script", [
                WriteFile(path="/opt/ojai/bin/serve", before=None, after="#!/bin/sh\n", mode=0o755)])

    plan = make_plan(PlanContext(root, Facts(), Settings()), [Script()])
    apply(plan, root, NullProgress())
    assert stat.S_IMODE(os.stat(root.resolve("/opt/ojai/bin/serve")).st_mode) == 0o755


class Boom(Exception):
    pass


def _fail_at(stage: str, after: int = 0):
    seen = []

    def hook(name: str) -> None:
        if name == stage:
            seen.append(name)
            if len(seen) > after:
                raise Boom(f"injected fault at {name}")
    return hook


def _stray_temp_files(root: Root) -> list[str]:
    return [p.name for p in root.resolve("/").rglob(".*")
            if ".ojai-" in p.name or p.name.endswith(".tmp")]


def test_fault_before_rename_leaves_the_original_and_the_next_apply_completes(tmp_path):
    root = _machine(tmp_path)
    plan = _plan(root)
    with pytest.raises(Boom, match="injected fault at before-rename"):
        apply(plan, root, NullProgress(), fault_hook=_fail_at("before-rename"))
    assert root.read_text(GRUB) == ORIGINAL_GRUB
    assert not root.exists(CONFIG)
    assert _stray_temp_files(root) == []
    assert _grub_runs(root) == 0
    assert check_fresh(plan, root, Facts()) is None

    result = apply(plan, root, NullProgress())
    assert [a.changed for a in result.actions] == [True, True, True]
    assert _plan(root).exit_code == ExitStatus.OK


def test_fault_in_a_later_action_leaves_earlier_ones_done_and_a_rerun_finishes(tmp_path):
    root = _machine(tmp_path)
    plan = _plan(root)
    with pytest.raises(Boom):  # at the GRUB file's rename: the boot goes last
        apply(plan, root, NullProgress(), fault_hook=_fail_at("before-rename", after=2))
    assert root.read_text(GRUB) == ORIGINAL_GRUB
    assert root.exists(CONFIG) and os.readlink(root.resolve(LINK)) == "/opt/ojai/llama.cpp/b1311"
    assert _stray_temp_files(root) == []
    assert _grub_runs(root) == 1  # the follow-up of the finished config edit still ran

    result = apply(plan, root, NullProgress())
    assert [a.changed for a in result.actions] == [False, False, True]
    assert result.handlers == ["update-grub"] and _grub_runs(root) == 2


def test_symlink_fault_before_rename_keeps_the_old_link(tmp_path):
    root = _machine(tmp_path)
    plan = _plan(root)
    with pytest.raises(Boom):
        apply(plan, root, NullProgress(), fault_hook=_fail_at("before-rename", after=1))
    assert os.readlink(root.resolve(LINK)) == "/opt/ojai/llama.cpp/b1200"
    assert sorted(p.name for p in root.resolve(LINK).parent.iterdir()) == ["b1200", "b1311", "current"]


def _host_edit_plan(target: Path, settings: Settings) -> Plan:
    """A plan that edits ``target`` on the host itself, with root."""
    target.write_text("old\n")

    class HostStep:
        name = "host"

        def plan(self, ctx: PlanContext) -> StepResult:
            return StepResult.change(self.name, "edit", [
                WriteFile(path=str(target), before="old\n", after="new\n", needs_root=True)])

    return make_plan(PlanContext(Root("/"), Facts(), settings), [HostStep()])


def test_needs_root_stops_before_the_first_change_with_the_sudo_command(tmp_path):
    target = tmp_path / "host-file"
    plan = _host_edit_plan(target, Settings())
    with pytest.raises(NeedsRoot) as err:
        apply(plan, Root("/"), NullProgress(), euid=1000, plan_path="my plan.json")
    assert err.value.command == "sudo ojai setup --apply --plan 'my plan.json'"
    assert str(err.value) == (f"applying this plan needs root (it changes {target}); nothing "
                              f"was changed. Run:\n  sudo ojai setup --apply --plan 'my plan.json'")
    assert target.read_text() == "old\n"


def test_needs_root_without_a_plan_file_names_the_options_it_can_read(tmp_path):
    # the plan's settings are not ojai's (a toy model's keys): the sudo command falls back to
    # no options rather than failing on them
    target = tmp_path / "host-file"
    plan = _host_edit_plan(target, Settings(pages=7))
    with pytest.raises(NeedsRoot) as err:
        apply(plan, Root("/"), NullProgress(), euid=1000)
    assert err.value.command == "sudo ojai setup --apply"
    assert target.read_text() == "old\n"


def test_a_machine_folder_needs_no_privilege(tmp_path):
    root = _machine(tmp_path)
    assert apply(_plan(root), root, NullProgress(), euid=1000).changed


def test_a_saved_plan_round_trips_and_applies_exactly_its_own_actions(tmp_path):
    root = _machine(tmp_path)
    plan = _plan(root, pages=25165824)
    path = tmp_path / "plan.json"
    plan.save(path)
    loaded = Plan.load(path)
    assert loaded == plan
    # the steps would plan something else now; the saved plan is what gets applied
    assert "ttm.pages_limit=100" in _plan(root, pages=100).unified_diffs()[0]
    result = apply(loaded, root, NullProgress())
    assert [a.description for a in result.actions] == [p.action.describe()
                                                       for p in plan.apply_order()]
    assert "ttm.pages_limit=25165824" in root.read_text(GRUB)
    assert json.loads(root.read_text(CONFIG)) == {"pages": 25165824}
    assert _plan(root, pages=25165824).exit_code == ExitStatus.OK


def test_a_target_changed_behind_the_plans_back_stops_the_apply_before_any_change(tmp_path):
    root = _machine(tmp_path)
    plan = _plan(root)
    root.resolve(CONFIG).parent.mkdir(parents=True)
    root.resolve(CONFIG).write_text('{"someone": "else"}\n')
    with pytest.raises(PlanConflict) as err:
        apply(plan, root, NullProgress())
    assert str(err.value).startswith(f"{CONFIG} changed since the plan was made (the plan "
                                     f"expected absent, found sha256 ")
    assert root.read_text(GRUB) == ORIGINAL_GRUB  # the grub edit comes first and was not made
    assert not root.exists("/var/lib/ojai/journal")


def test_a_blocked_step_holds_back_only_the_steps_that_need_it(tmp_path):
    """Once all-or-nothing (a blocked step refused the whole plan), now a step is blocked only
    by what it needs: the link waits for the blocked kernel step, the GRUB edit and the config
    file, which do not need it, are applied."""
    root = _machine(tmp_path)

    class Blocked:
        name = "kernel"

        def plan(self, ctx: PlanContext) -> StepResult:
            return StepResult.blocked(self.name, "kernel 6.8 is too old for gfx1151; install "
                                      "the HWE kernel and reboot")

    class NeedsKernel(LinkStep):
        needs = ("kernel",)

    plan = make_plan(PlanContext(root, Facts(), Settings()),
                     [Blocked(), GrubStep(), ConfigStep(), NeedsKernel()])
    assert plan.exit_code == ExitStatus.FAILED
    waiting = plan.steps[-1]
    assert (waiting.step, waiting.status, waiting.waits_for, waiting.actions) == (
        "llama-link", "blocked", ("kernel",), ())
    assert waiting.sentence == (f"waits for kernel (blocked above); once it is fixed, it will "
                                f"point {LINK} at /opt/ojai/llama.cpp/b1311")
    assert plan.left_out() == "kernel is blocked; llama-link waits for kernel"
    result = apply(plan, root, NullProgress())
    assert "ttm.pages_limit=12582912" in root.read_text(GRUB)
    assert root.exists(CONFIG)
    assert os.readlink(root.resolve(LINK)) == "/opt/ojai/llama.cpp/b1200"  # held back
    assert result.message.startswith("changed 2 of 2 action(s)")
    again = make_plan(PlanContext(root, Facts(), Settings()),
                      [Blocked(), GrubStep(), ConfigStep(), NeedsKernel()])
    assert [r.status for r in again.steps] == ["blocked", "satisfied", "satisfied", "blocked"]


def test_invalid_content_fails_validation_and_leaves_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr("ojai_setup.apply.executor.VALIDATORS", dict(VALIDATORS))

    @register_validator("json")
    def validate_json(path: Path, action: WriteFile) -> None:
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"not valid JSON ({exc})") from None

    root = _machine(tmp_path)
    root.resolve(CONFIG).parent.mkdir(parents=True)
    root.resolve(CONFIG).write_text("{}\n")

    class Broken:
        name = "broken"

        def plan(self, ctx: PlanContext) -> StepResult:
            return StepResult.change(self.name, "write", [
                WriteFile(path=CONFIG, before="{}\n", after="{not json", validate_with="json")])

    plan = make_plan(PlanContext(root, Facts(), Settings()), [Broken()])
    with pytest.raises(ValidationError, match=r"the new /etc/ojai/config.json failed the 'json' "
                                              r"check, so it was left unchanged: not valid JSON"):
        apply(plan, root, NullProgress())
    assert root.read_text(CONFIG) == "{}\n"
    assert _stray_temp_files(root) == []


def test_validators_are_registered_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr("ojai_setup.apply.executor.VALIDATORS", dict(VALIDATORS))
    seen: list[str] = []

    @register_validator("grub-default")
    def check(path: Path, action: WriteFile) -> None:
        seen.append(path.read_text())
        if "nomodeset" in path.read_text():
            raise ValueError("nomodeset stops amdgpu from binding")

    root = _machine(tmp_path)

    class Step:
        name = "grub"

        def __init__(self, after: str) -> None:
            self.after = after

        def plan(self, ctx: PlanContext) -> StepResult:
            return StepResult.change(self.name, "edit", [WriteFile(
                path=GRUB, before=ORIGINAL_GRUB, after=self.after, validate_with="grub-default")])

    bad = make_plan(PlanContext(root, Facts(), Settings()), [Step("nomodeset\n")])
    with pytest.raises(ValidationError, match="nomodeset stops amdgpu"):
        apply(bad, root, NullProgress())
    assert root.read_text(GRUB) == ORIGINAL_GRUB
    good = make_plan(PlanContext(root, Facts(), Settings()), [Step("GRUB_DEFAULT=1\n")])
    apply(good, root, NullProgress())
    assert root.read_text(GRUB) == "GRUB_DEFAULT=1\n" and seen == ["nomodeset\n", "GRUB_DEFAULT=1\n"]


def test_an_unknown_validator_is_refused_before_any_change(tmp_path):
    root = _machine(tmp_path)

    class Step:
        name = "s"

        def plan(self, ctx: PlanContext) -> StepResult:
            return StepResult.change(self.name, "edit", [WriteFile(
                path=GRUB, before=ORIGINAL_GRUB, after="x\n", validate_with="no-such")])

    with pytest.raises(ApplyError, match="no validator named 'no-such' is registered"):
        apply(make_plan(PlanContext(root, Facts(), Settings()), [Step()]), root, NullProgress())
    assert root.read_text(GRUB) == ORIGINAL_GRUB


def test_verify_names_a_target_that_is_not_as_planned(tmp_path, monkeypatch):
    root = _machine(tmp_path)

    def sloppy(root: Root, action: WriteFile, progress: object) -> ActionOutcome:
        root.resolve(action.path).parent.mkdir(parents=True, exist_ok=True)
        root.resolve(action.path).write_text(action.after + "# extra\n")
        return ActionOutcome(True, "written")

    monkeypatch.setitem(EXECUTORS, "write_file", sloppy)
    with pytest.raises(VerifyError) as err:
        apply(_plan(root), root, NullProgress())
    assert err.value.path == CONFIG  # the first target in the order the apply went
    assert str(err.value).startswith(f"{CONFIG} does not hold the planned content after applying")


def test_a_failing_command_stops_the_apply_with_its_output(tmp_path):
    root = _machine(tmp_path)
    store_capture(root.path, CommandResult(("modprobe", "-r", "ttm"), 1, "",
                                           "modprobe: FATAL: Module ttm is in use.\n"))

    class Step:
        name = "reload"

        def plan(self, ctx: PlanContext) -> StepResult:
            return StepResult.change(self.name, "reload", [RunCommand(argv=("modprobe", "-r", "ttm"))])

    from ojai_setup.apply.executor import CommandFailed
    with pytest.raises(CommandFailed, match=r"`modprobe -r ttm` failed with exit code 1: "
                                            r"modprobe: FATAL: Module ttm is in use."):
        apply(make_plan(PlanContext(root, Facts(), Settings()), [Step()]), root, NullProgress())


def test_executors_of_other_modules_are_imported_only_when_needed(tmp_path, monkeypatch):
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "toy_downloads.py").write_text(
        "def execute_hub_download(root, action, progress):\n"
        "    path = root.resolve(action.dest)\n"
        "    path.parent.mkdir(parents=True, exist_ok=True)\n"
        "    path.write_bytes(b'GGUF' + bytes(12))\n")
    monkeypatch.syspath_prepend(str(module_dir))
    monkeypatch.setitem(LAZY_EXECUTORS, "hub_download", ("toy_downloads", "execute_hub_download"))
    # the registry is a copy for this test, so the toy executor does not outlive it
    monkeypatch.setattr("ojai_setup.apply.executor.EXECUTORS",
                        {k: v for k, v in EXECUTORS.items() if k != "hub_download"})
    monkeypatch.delitem(__import__("sys").modules, "toy_downloads", raising=False)
    root = _machine(tmp_path)
    apply(_plan(root), root, NullProgress())
    assert "toy_downloads" not in __import__("sys").modules

    class Download:
        name = "model"

        def plan(self, ctx: PlanContext) -> StepResult:
            return StepResult.change(self.name, "download", [HubDownload(
                repo_id="org/repo", filename="m.gguf", dest="/srv/models/m.gguf", size=16)])

    result = apply(make_plan(PlanContext(root, Facts(), Settings()), [Download()]), root,
                   NullProgress())
    assert result.actions[0].changed  # judged by the target's digest
    assert root.resolve("/srv/models/m.gguf").read_bytes().startswith(b"GGUF")


def test_a_missing_executor_module_is_reported_before_any_change(tmp_path, monkeypatch):
    monkeypatch.setitem(LAZY_EXECUTORS, "hub_download", ("ojai_setup.no_such_module", "f"))
    monkeypatch.setattr("ojai_setup.apply.executor.EXECUTORS",
                        {k: v for k, v in EXECUTORS.items() if k != "hub_download"})
    with pytest.raises(ApplyError, match="cannot carry out hub_download actions: "
                                         "ojai_setup.no_such_module cannot be imported"):
        executor_for("hub_download")
    root = _machine(tmp_path)

    class Both:
        name = "both"

        def plan(self, ctx: PlanContext) -> StepResult:
            return StepResult.change(self.name, "edit and download", [
                WriteFile(path=GRUB, before=ORIGINAL_GRUB, after="x\n"),
                HubDownload(repo_id="o/r", filename="f.gguf", dest="/srv/f.gguf")])

    with pytest.raises(ApplyError):
        apply(make_plan(PlanContext(root, Facts(), Settings()), [Both()]), root, NullProgress())
    assert root.read_text(GRUB) == ORIGINAL_GRUB


def test_a_plan_for_another_machine_is_refused(tmp_path):
    root = _machine(tmp_path)
    plan = _plan(root)
    other = Root(tmp_path / "elsewhere")
    with pytest.raises(ApplyError, match="the plan was made for the machine at"):
        apply(plan, other, NullProgress())


def test_named_validators_of_other_modules_are_imported_on_first_use(monkeypatch):
    from ojai_setup.apply.executor import LAZY_VALIDATORS, validator_for
    from ojai_setup.apply.validate import validate_grub

    monkeypatch.delitem(VALIDATORS, "grub", raising=False)
    assert validator_for("grub") is validate_grub
    monkeypatch.setitem(LAZY_VALIDATORS, "toml", ("ojai_setup.no_such_module", "validate"))
    with pytest.raises(ApplyError, match="cannot run the 'toml' check: ojai_setup.no_such_module "
                                         "cannot be imported"):
        validator_for("toml")


def test_rich_progress_draws_bars_and_stops_when_every_task_is_done(tmp_path):
    import io

    from rich.console import Console

    from ojai_setup.core.progress import RichProgress

    out = io.StringIO()
    progress = RichProgress(Console(file=out, force_terminal=True, width=100))
    root = _machine(tmp_path)
    plan = _plan(root)
    apply(plan, root, progress)
    download = progress.task("download model.gguf", total=3 * 2**20)
    download.advance(2**20)
    download.update(completed=3 * 2**20)
    assert progress.active
    download.done()
    assert not progress.active
    text = out.getvalue()
    assert "apply plan" in text and "3/3" in text
    assert "run update-grub" in text
    assert "download model.gguf" in text and "3.0/3.0 MiB" in text
