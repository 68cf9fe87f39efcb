"""``ojai setup`` and ``ojai rollback``: plan, show, save, apply, verify. What they show is a
report (:class:`PlanReport`, :class:`SavedPlanReport`, :class:`ApplyReport`,
:class:`NothingToApply`, :class:`RollbackPreviewReport`, :class:`RollbackReport`) printed by
:meth:`Terminal.show`; the functions here decide, ask and exit."""

from __future__ import annotations

from datetime import timezone
from pathlib import Path
from typing import TYPE_CHECKING

from ojai_setup.commands.terminal import SYMBOLS, Terminal
from ojai_setup.core.root import Root
from ojai_setup.core.status import ExitStatus
from ojai_setup.facts.collect import collect
from ojai_setup.model.settings import Settings
from ojai_setup.planning.gather import gather
from ojai_setup.planning.plan import Plan, PlanFileError, check_fresh, make_plan

if TYPE_CHECKING:  # the apply layer is imported only by the commands that change something
    from ojai_setup.apply.journal import RollbackPreview, RollbackResult


def build_plan(root: Root, settings: Settings) -> Plan:
    from ojai_setup.domain.checks import Severity, run_checks
    from ojai_setup.steps import build_steps

    ctx = gather(root, settings)
    plan = make_plan(ctx, build_steps())
    # what this plan changes is not a precondition of it (the TTM limit, when the step sets it)
    fixed_here = {"ttm"} if any(r.step == "gpu-memory" and r.status == "change"
                                for r in plan.steps) else set()
    findings = tuple(f for f in run_checks(ctx.facts, ctx.profile)
                     if Severity[f.severity.upper()] >= Severity.WARN
                     and f.id.split(".")[0] not in fixed_here)
    return plan.model_copy(update={"preconditions": findings})


def plan_json(plan: Plan) -> dict:
    """A plan as ``ojai setup --json`` prints it (``"schema": "ojai.setup/1"``)."""
    data = plan.model_dump(mode="json")
    data["exit_code"] = int(plan.exit_code)
    data["diffs"] = plan.unified_diffs()
    data["reboot_reasons"] = plan.reboot_reasons()
    return data


class PlanReport:
    """The dry run: doctor's findings that matter here, every step with its actions, the
    follow-up commands, the diffs, and whether a reboot is needed; ``owed`` says what an earlier
    apply left to do."""

    schema = "ojai.setup/1"

    def __init__(self, plan: Plan, owed: str = "") -> None:
        self.plan, self.owed = plan, owed

    def to_json(self) -> dict:
        return plan_json(self.plan)

    def render(self, term: Terminal) -> None:
        from rich.markup import escape

        from ojai_setup.commands.diffview import diff_lines

        plan = self.plan
        if plan.preconditions:
            term.print("[bold]Doctor's findings on this machine[/] (`ojai doctor` for all):")
            for f in plan.preconditions:
                pad = " " * (9 - len(SYMBOLS.get(f.severity, f.severity)))
                term.print(f"{pad}{term.styled(f.severity)} {escape(f.title)}: {escape(f.evidence)}")
                if f.fix:
                    term.print(f"{'':>10} fix: {escape(f.fix)}")
        for r in plan.steps:
            pad = " " * (9 - len(SYMBOLS.get(r.status, r.status)))
            term.print(f"{pad}{term.styled(r.status)} [bold]{escape(r.step)}[/]: {escape(r.sentence)}")
            for a in r.actions:
                root_mark = " (root)" if a.needs_root else ""
                term.print(f"{'':>10} - {escape(a.describe())}{root_mark}")
            for warning in r.warnings:
                term.print(f"{'':>10} [bold yellow]warning[/]: {escape(warning)}")
        for name, cmd in plan.handlers.items():
            term.print(f"{'':>10} then, if something changed: {escape(cmd.describe())}  [dim]({name})[/]")
        for diff in plan.unified_diffs():
            for line in diff_lines(diff):
                # one line each, never cropped: the terminal wraps what is wider than it
                term.print(line, soft_wrap=True)
        reasons = plan.reboot_reasons()
        if reasons:
            term.print("[bold]A reboot is needed after applying:[/] " + escape("; ".join(reasons)))
        if self.owed:
            term.print(self.owed)
        term.print(f"plan: {plan_summary(plan, self.owed)}")


def plan_summary(plan: Plan, owed: str = "") -> str:
    """The dry run's last line, which says what its exit code says (:func:`dry_run_exit`)."""
    code = dry_run_exit(plan, owed)
    if code == ExitStatus.CHANGES and plan.exit_code == ExitStatus.OK:
        return "nothing to change, but an earlier apply left work owed (above)"
    return {ExitStatus.OK: "nothing to do", ExitStatus.CHANGES: "changes pending",
            ExitStatus.FAILED: "blocked: fix the step(s) above first"}[code]


def dry_run_exit(plan: Plan, owed: str = "") -> ExitStatus:
    """0 nothing to do, 2 changes pending (or work an earlier apply owes), 1 blocked."""
    if owed and plan.exit_code == ExitStatus.OK:
        return ExitStatus.CHANGES
    return plan.exit_code


def apply_report(plan: Plan, result, *, journal: str | None = None, exit_code: int = 0,
                 failure=None, finish: str | None = None, undo: str | None = None) -> dict:
    """What an apply did, as the JSON document ``ojai setup --apply --json`` prints
    (``"schema": "ojai.apply/1"``): every action with whether it changed something, the files
    changed, the follow-up commands that ran and those still owed (by name and command),
    whether a reboot is needed; for an apply that stopped, its first error (``error``,
    ``interrupted_by``) and the commands that finish or undo it."""
    data = {
        "ojai_version": plan.ojai_version,
        "changed": result.changed,
        "message": result.message,
        "actions": [{"step": a.step, "description": a.description, "changed": a.changed,
                     "message": a.message} for a in result.actions],
        "files_changed": result.files_changed,
        "handlers": [{"name": name, "command": result.command_of(name)}
                     for name in result.handlers],
        "owed": [{"name": h.name, "command": h.command} for h in result.owed],
        "reboot_required": bool(result.reboot),
        "reboot_reasons": list(result.reboot),
        "journal": journal,
        "exit_code": exit_code,
    }
    if failure is not None:
        data.update({
            "error": failure.error, "interrupted_by": failure.signal,
            "journal_error": failure.journal_error,
            "follow_ups_failed": [{"command": c, "error": why}
                                  for c, why in result.failed_handlers],
            "backed_up": [p for p in result.backed_up if p in result.files_changed],
            "finish_command": finish, "undo_command": undo})
    return data


class ApplyReport:
    """What ``ojai setup --apply`` did (:func:`apply_report`), and for a person: what it
    finished first, the summary, the journal, and how to start and check each route."""

    schema = "ojai.apply/1"

    def __init__(self, plan: Plan, result, root: Root, *, journal: str | None = None,
                 exit_code: int = 0, owed: str = "") -> None:
        self.plan, self.result, self.root, self.owed = plan, result, root, owed
        self.journal, self.exit_code = journal, exit_code

    def to_json(self) -> dict:
        return apply_report(self.plan, self.result, journal=self.journal,
                            exit_code=self.exit_code)

    def render(self, term: Terminal) -> None:
        from ojai_setup.commands.verify import next_steps

        if self.owed:
            term.print("every step was already satisfied; an earlier apply left work owed")
        if self.result.recovered:
            term.print(f"finished first: {self.result.recovered}")
        term.print(f"applied: {self.result.message}")
        if self.result.owed:
            term.print("still owed: " + ", ".join(f"`{h.command}`" for h in self.result.owed))
        if self.journal:
            term.print(f"journal: {self.journal}")
        for line in next_steps(self.root):
            term.print(line, markup=False)


class ApplyFailureReport:
    """How an apply that stopped part way ended (an error, Ctrl-C, SIGTERM): its first error,
    what changed (and whether it was backed up), which follow-up commands ran, failed or are
    still owed (each by its command), whether the boot configuration was touched, and the one
    command that finishes the apply and the one that undoes it. For a person it goes to
    stderr, like every error; ``--json`` prints :func:`apply_report`'s document."""

    schema = "ojai.apply/1"

    def __init__(self, plan: Plan, failure, *, finish: str, undo: str,
                 journal: str | None, exit_code: int) -> None:
        self.plan, self.failure, self.finish, self.undo = plan, failure, finish, undo
        self.journal, self.exit_code = journal, exit_code

    def to_json(self) -> dict:
        return apply_report(self.plan, self.failure.result, journal=self.journal,
                            exit_code=self.exit_code, failure=self.failure,
                            finish=self.finish, undo=self.undo)

    def lines(self) -> list[str]:
        """Everything after the first line (the error), as plain sentences."""
        from ojai_setup.planning.plan import apply_phase

        f = self.failure
        result = f.result
        out: list[str] = []
        if result.recovered:
            out.append(f"finished first: {result.recovered}")
        changed = result.files_changed
        if changed:
            backed = [p for p in result.backed_up if p in changed]
            out.append("changed: " + ", ".join(changed)
                       + (f" (the originals of {', '.join(backed)} are backed up)" if backed
                          else ""))
        else:
            out.append("nothing on the machine was changed")
        if result.handlers:
            out.append("ran: " + ", ".join(f"`{result.command_of(n)}`" for n in result.handlers))
        for command, why in result.failed_handlers:
            out.append(f"failed: `{command}`: {why}")
        if result.owed:
            out.append("still owed (the next apply runs it first): "
                       + ", ".join(f"`{h.command}`" for h in result.owed))
        boot = [p.action for p in self.plan.apply_order() if apply_phase(p.action) == "boot"]
        if boot:
            boot_handlers = {n for a in boot for n in a.notify}
            if not any(t in changed for a in boot for t in a.targets()):
                out.append("the boot configuration was not touched: the machine boots as before")
            elif any(h.name in boot_handlers for h in result.owed):
                out.append("the boot configuration was changed and its regeneration is owed")
            else:
                out.append("the boot configuration was changed and regenerated; a reboot "
                           "makes it active")
        if f.journal_error:
            out.append(f"then the journal could not be written: {f.journal_error}")
        if self.journal:
            out.append(f"journal: {self.journal}")
        if changed or result.handlers or result.owed:
            out.append(f"to finish: {self.finish}")
            out.append(f"to undo: {self.undo}")
        else:
            out.append(f"to try again: {self.finish}")
        return out

    def render(self, term: Terminal) -> None:
        f = self.failure
        what = (f"apply stopped by {f.signal}" if f.signal else f"apply failed: {f.error}")
        term.error(what)
        for line in self.lines():
            term.note(line)


class NothingToApply:
    """``ojai setup --apply`` on a machine where every step is satisfied and nothing is owed."""

    schema = ApplyReport.schema

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def to_json(self) -> dict:
        from ojai_setup.apply.executor import ApplyResult

        return apply_report(self.plan, ApplyResult(apply_id=None))

    def render(self, term: Terminal) -> None:
        term.print("nothing to do: every step is satisfied; nothing was changed")


def run_setup(term: Terminal, root_dir: Path, settings: Settings, *, apply: bool, yes: bool,
              plan_file: Path | None, out: Path | None, force_handlers: bool = True) -> int:
    root = Root(root_dir)
    if plan_file is not None and settings.options() and not term.json_mode:
        term.note(f"--plan {plan_file}: the plan records the settings it was made with; "
                  f"{' '.join(settings.options())} given here changed nothing")
    if plan_file is not None and not apply:
        return show_saved(term, root, plan_file)
    if not apply:
        return _dry_run(term, root, settings, out)
    from ojai_setup.apply.lock import MachineLock
    from ojai_setup.core.errors import StateError
    from ojai_setup.facts.state import state_dir

    # the lock covers planning too: no other ojai changes the machine between the plan
    # this apply makes (or checks) and the apply itself
    lock = MachineLock(state_dir(root), "ojai setup --apply")
    try:
        lock.acquire()
    except StateError as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    try:
        return _apply_locked(term, root, settings, yes=yes, plan_file=plan_file, out=out,
                             force_handlers=force_handlers)
    finally:
        lock.release()


def _dry_run(term: Terminal, root: Root, settings: Settings, out: Path | None) -> int:
    from ojai_setup.facts.state import JournalError, read_apply_status

    plan = build_plan(root, settings)
    if out is not None:
        plan.save(out)
    try:
        status = read_apply_status(root)
    except JournalError as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    owed_note = _owed_note(status)
    term.show(PlanReport(plan, owed=owed_note))
    if out is not None and not term.json_mode:
        from ojai_setup.planning.plan import apply_command

        term.note(f"plan saved to {out}; show it again (and whether it is still fresh) "
                  f"with `{apply_command(plan, str(out), apply=False)}`; apply exactly it "
                  f"with `{apply_command(plan, str(out))}`")
    return int(dry_run_exit(plan, owed_note))


def _apply_locked(term: Terminal, root: Root, settings: Settings, *, yes: bool,
                  plan_file: Path | None, out: Path | None, force_handlers: bool) -> int:
    """``ojai setup --apply`` once the machine's lock is held: plan (or check the saved plan),
    show, ask, apply, verify, and say how it ended."""
    from ojai_setup.facts.state import JournalError, read_apply_status, read_state

    if plan_file is not None:
        try:
            plan = Plan.load(plan_file)
        except PlanFileError as exc:
            term.error(str(exc))
            return ExitStatus.FAILED
        stale = check_fresh(plan, root, collect(root), plan_path=str(plan_file))
        if stale is not None:
            term.error(f"saved plan is stale: {stale.message}")
            return ExitStatus.FAILED
        refused = _recheck_saved(plan, root, plan_file)
        if refused:
            term.error(refused)
            return ExitStatus.FAILED
    else:
        plan = build_plan(root, settings)
        if out is not None:
            plan.save(out)
    try:
        status = read_apply_status(root, locked=True)
    except JournalError as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    owed_note = _owed_note(status)
    if plan_file is None:
        if not term.json_mode:  # with --apply, --json prints the apply's report
            term.show(PlanReport(plan))
        if out is not None and not term.json_mode:
            from ojai_setup.planning.plan import apply_command

            term.note(f"plan saved to {out}; show it again (and whether it is still fresh) "
                      f"with `{apply_command(plan, str(out), apply=False)}`; apply exactly it "
                      f"with `{apply_command(plan, str(out))}`")
    if plan.exit_code == ExitStatus.FAILED:
        term.error("the plan has blocked steps; nothing was applied")
        return ExitStatus.FAILED
    try:
        read_state(root)
    except JournalError as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    if plan.exit_code == ExitStatus.OK and not owed_note:
        term.show(NothingToApply(plan))
        return ExitStatus.OK
    root_arg = "/" if root.is_host else str(root.path)
    unreviewed = plan_file is None and not yes and plan.exit_code == ExitStatus.CHANGES
    if unreviewed and term.json_mode:  # the plan was not shown, and a question would break the JSON
        term.error("refusing to apply without review: with --json, --apply prints only what "
                   f"was done. Review `{settings.command(root=root_arg)}`, then run "
                   f"`{settings.command('--apply', '--yes', '--json', root=root_arg)}`")
        return ExitStatus.FAILED
    if unreviewed and not _reviewed(
            term, "Apply this plan?", declined="nothing was applied",
            unattended="refusing to apply without review: no terminal to ask on. Review "
            f"`{settings.command(root=root_arg)}`, then run "
            f"`{settings.command('--apply', '--yes', root=root_arg)}` (or save it with "
            f"`{settings.command('--out', 'plan.json', root=root_arg)}` and apply "
            "exactly that with --apply --plan plan.json)"):
        return ExitStatus.FAILED
    from ojai_setup.apply.executor import NeedsRoot, failure_of
    from ojai_setup.apply.executor import apply as apply_plan
    from ojai_setup.core.errors import ApplyError, StateError

    applied_settings = settings if plan_file is None else Settings(**plan.settings)
    try:
        result = apply_plan(plan, root, term.progress(), locked=True,
                            plan_path=str(plan_file) if plan_file else None,
                            force_handlers=force_handlers)
    except NeedsRoot as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    except (ApplyError, StateError, OSError, ValueError, KeyboardInterrupt) as exc:
        failure = failure_of(exc)
        if failure is None:  # stopped before its journal was opened: nothing changed
            if isinstance(exc, KeyboardInterrupt):
                term.error("interrupted before the first change; nothing was changed")
                return ExitStatus.INTERRUPTED
            term.error(f"{exc}" if isinstance(exc, StateError) else f"apply failed: {exc}; "
                       "nothing was changed")
            return ExitStatus.FAILED
        code = ExitStatus.INTERRUPTED if failure.signal else ExitStatus.FAILED
        report = ApplyFailureReport(
            plan, failure, finish=applied_settings.command("--apply", root=root_arg),
            undo=_rollback_command(root), journal=_journal_path(root, failure.result.journal),
            exit_code=int(code))
        if term.json_mode:
            term.show(report)
            term.error(f"apply failed: {failure.error}" if not failure.signal
                       else f"apply stopped by {failure.signal}")
        else:
            report.render(term)
        return code
    after = build_plan(root, applied_settings)
    leftover = [r for r in after.steps if r.status != "satisfied"]
    term.show(ApplyReport(plan, result, root, journal=_journal_path(root, result.journal),
                          exit_code=int(ExitStatus.FAILED if leftover else ExitStatus.OK),
                          owed=owed_note if plan.exit_code == ExitStatus.OK else ""))
    if leftover:
        term.error("after applying, a new plan is not empty: "
                   + "; ".join(f"{r.step}: {r.sentence}" for r in leftover))
        return ExitStatus.FAILED
    return ExitStatus.OK


def _journal_path(root: Root, path: Path | None) -> str | None:
    """A journal file as a machine path (the real path on the host)."""
    if path is None:
        return None
    return str(path if root.is_host else root.machine_path(path))


def _recheck_saved(plan: Plan, root: Root, plan_file: Path) -> str | None:
    """Why a saved plan is refused (plan again from its settings; every action, file content
    and follow-up command must be the same), or None."""
    from pydantic import ValidationError

    from ojai_setup.planning.compare import plan_differences

    from ojai_setup.planning.plan import remake_command

    redo = f"make and review a new plan: `{remake_command(plan, str(plan_file))}`"
    try:
        settings = Settings(**plan.settings)
    except (ValidationError, TypeError) as exc:
        return f"{plan_file}: the settings it records are not valid ({exc}); nothing was applied; {redo}"
    differences = plan_differences(plan, build_plan(root, settings))
    if not differences:
        return None
    shown = "; ".join(differences[:5]) + (f"; and {len(differences) - 5} more"
                                          if len(differences) > 5 else "")
    return (f"{plan_file} is not what ojai plans for this machine with the settings it records "
            f"(edited by hand, or stale): {shown}. Nothing was applied; {redo}")


def saved_plan_status(root: Root, plan: Plan, plan_file: Path) -> dict:
    """Whether a saved plan is still fresh for the machine at ``root``: its fingerprint (every
    file it read or writes, the facts, the ojai version) checked, and the plan made again from
    the settings it records compared step by step. The commands that make it again and apply
    it are given whole, options and ``--root`` included."""
    from pydantic import ValidationError

    from ojai_setup.core.errors import OjaiError
    from ojai_setup.planning.compare import step_differences
    from ojai_setup.planning.plan import apply_command, remake_command

    path = str(plan_file)
    stale = check_fresh(plan, root, collect(root), plan_path=path)
    changes = list(stale.changes) if stale else []
    steps: list[str] = []
    if plan.root == str(root.path):
        try:
            steps = step_differences(plan, build_plan(root, Settings(**plan.settings)))
        except (ValidationError, TypeError) as exc:
            steps = [f"the settings the plan records are not valid ({exc})"]
        except OjaiError as exc:
            steps = [f"ojai cannot plan again with the settings the plan records: {exc}"]
    return {"path": path, "created": plan.created.isoformat(timespec="seconds"),
            "ojai_version": plan.ojai_version, "root": plan.root,
            "fresh": not changes and not steps, "changes": changes, "steps_differ": steps,
            "made_with": remake_command(plan, path), "apply_command": apply_command(plan, path)}


class SavedPlanReport:
    """A saved plan (``ojai setup --plan FILE``) as the dry run showed it, then whether it is
    still fresh for this machine (:func:`saved_plan_status`) and the command to run next."""

    schema = PlanReport.schema

    def __init__(self, plan: Plan, status: dict) -> None:
        self.plan, self.status = plan, status

    @property
    def exit_code(self) -> int:
        """The plan's own (0, 2, or 1 when blocked) while it is fresh; 1 when it is stale."""
        return int(self.plan.exit_code if self.status["fresh"] else ExitStatus.FAILED)

    def to_json(self) -> dict:
        data = plan_json(self.plan)
        data["saved_plan"] = self.status
        data["exit_code"] = self.exit_code
        return data

    def render(self, term: Terminal) -> None:
        from rich.markup import escape

        plan, status = self.plan, self.status
        PlanReport(plan).render(term)
        made = plan.created.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        term.print(f"[bold]saved plan[/] {escape(status['path'])}, made {made} by ojai "
                   f"{escape(plan.ojai_version)} with:")
        term.print(f"  {status['made_with']}", markup=False, soft_wrap=True)
        if status["fresh"] and self.exit_code == ExitStatus.FAILED:
            term.print("[green]fresh[/]: nothing it read or writes changed since, and ojai plans "
                       "the same now; but a step is blocked, so it cannot be applied: fix the "
                       "step(s) above, then make a new plan with:")
            term.print(f"  {status['made_with']}", markup=False, soft_wrap=True)
            return
        if status["fresh"]:
            term.print("[green]fresh[/]: nothing it read or writes changed since, and ojai plans "
                       "the same now. Apply exactly it with:")
            term.print(f"  {status['apply_command']}", markup=False, soft_wrap=True)
            return
        term.print("[bold red]stale[/]: it no longer matches this machine:")
        for line in status["changes"] + status["steps_differ"]:
            term.print(f"  - {escape(line)}")
        term.print("Make and review a new plan with:")
        term.print(f"  {status['made_with']}", markup=False, soft_wrap=True)


def show_saved(term: Terminal, root: Root, plan_file: Path) -> int:
    """``ojai setup --plan FILE``: the saved plan and whether it is still fresh
    (:class:`SavedPlanReport`), with its exit code."""
    try:
        plan = Plan.load(plan_file)
    except PlanFileError as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    report = SavedPlanReport(plan, saved_plan_status(root, plan, plan_file))
    term.show(report)
    return report.exit_code


def _owed_note(status) -> str:
    """What an interrupted or failed earlier apply left to do, or ``""``."""
    owed = ", ".join(status.owed)
    if status.interrupted:
        what = "rollback" if status.kind == "rollback" else "apply"
        return (f"An earlier {what} ({status.interrupted}) was interrupted after {status.done} "
                f"of {status.total} action(s)" + (f"; owed: {owed}" if owed else "")
                + ". `ojai setup --apply` finishes it first; `ojai rollback` undoes it.")
    if owed:
        return (f"Follow-up commands of an earlier apply are still due: {owed}. "
                "`ojai setup --apply` runs them first.")
    return ""


def _reviewed(term: Terminal, question: str, *, unattended: str, declined: str) -> bool:
    """Whether the person at the terminal said yes to ``question``; without a terminal,
    ``unattended`` is the error, and ``declined`` the note when they say no."""
    if not term.interactive:
        term.error(unattended)
        return False
    if not term.confirm(question):
        term.note(declined)
        return False
    return True


class RollbackPreviewReport:
    """What ``ojai rollback`` will do, for review before it does it: each path with what
    happens to it and why, the follow-up commands, the diffs, the conflicts, the reboot."""

    schema = "ojai.rollback/1"

    def __init__(self, preview: RollbackPreview, root: Root) -> None:
        self.preview, self.root = preview, root

    def to_json(self) -> dict:
        p = self.preview
        return {"apply_id": p.entry.apply_id,
                "files": [{"path": record.path, "decision": decision, "why": why}
                          for record, decision, why in p.items],
                "handlers": [{"name": h.name, "command": " ".join(h.argv)} for h in p.handlers],
                "conflicts": list(p.conflicts)}

    def render(self, term: Terminal) -> None:
        from rich.markup import escape

        from ojai_setup.commands.diffview import diff_lines

        preview = self.preview
        entry = preview.entry
        term.print(f"rollback of apply {escape(entry.apply_id)} ({entry.status}, "
                   f"{entry.started:%Y-%m-%d %H:%M} UTC):")
        for record, decision, why in preview.items:
            verb = "skip" if decision == "none" else decision
            term.print(f"  {verb:>8} {escape(record.path)}  [dim]({escape(why)})[/]")
        for handler in preview.handlers:
            term.print(f"  then run: {escape(' '.join(handler.argv))}  [dim]({handler.name})[/]")
        for diff in preview.diffs(self.root):
            for line in diff_lines(diff):  # as the plan's diffs: one line each, never cropped
                term.print(line, soft_wrap=True)
        for conflict in preview.conflicts:
            term.print(f"[bold yellow]changed since the apply:[/] {escape(conflict)}")
        if preview.reboot:
            term.print("[bold]A reboot is needed after rolling back:[/] "
                       + escape("; ".join(preview.reboot)))


class RollbackReport:
    """What ``ojai rollback`` did: the preview it acted on (``files``, ``handlers``,
    ``conflicts``), then what it restored, removed and left, the follow-ups it ran and whether
    a reboot is needed."""

    schema = RollbackPreviewReport.schema

    def __init__(self, preview: RollbackPreview, result: RollbackResult, root: Root) -> None:
        self.preview, self.result, self.root = preview, result, root

    def to_json(self) -> dict:
        r = self.result
        return {**RollbackPreviewReport(self.preview, self.root).to_json(),
                "message": r.message, "nothing": r.nothing, "restored": list(r.restored),
                "removed": list(r.removed), "left": list(r.left), "handlers_run": list(r.handlers),
                "reboot_required": bool(r.reboot), "reboot_reasons": list(r.reboot),
                "journal_id": r.journal_id, "exit_code": int(ExitStatus.OK)}

    def render(self, term: Terminal) -> None:
        term.print(self.result.message)
        if self.result.reboot and not self.result.nothing:
            term.print("[bold]Reboot now[/] to make the restored settings active.")


def _rollback_command(root: Root, *options: str) -> str:
    """``ojai rollback`` for ``root`` (``--root`` given unless it is this machine), shell-quoted."""
    import shlex

    return shlex.join(["ojai", "rollback", *([] if root.is_host else ["--root", str(root.path)]),
                       *options])


def run_rollback(term: Terminal, root_dir: Path, *, force: bool, yes: bool = False,
                 remove_downloads: bool = False) -> int:
    from ojai_setup.apply.lock import MachineLock
    from ojai_setup.core.errors import StateError
    from ojai_setup.facts.state import state_dir

    root = Root(root_dir)
    # one lock from the preview to the last restore: what a person reviews is what is undone
    lock = MachineLock(state_dir(root), "ojai rollback")
    try:
        lock.acquire()
    except StateError as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    try:
        return _rollback_locked(term, root, force=force, yes=yes,
                                remove_downloads=remove_downloads)
    finally:
        lock.release()


def _rollback_locked(term: Terminal, root: Root, *, force: bool, yes: bool,
                     remove_downloads: bool) -> int:
    from ojai_setup.apply.journal import RollbackError, preview_rollback, rollback
    from ojai_setup.core.errors import StateError

    try:
        preview = preview_rollback(root, remove_downloads=remove_downloads, locked=True)
    except (RollbackError, StateError, OSError) as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    if preview.settled is not None:
        term.note(preview.settled.message)
    if preview.nothing:
        term.show(RollbackReport(preview, rollback(root, term.progress(), preview=preview,
                                                   locked=True), root))
        return ExitStatus.OK
    if not term.json_mode:  # with --json, the report after the rollback carries the preview
        term.show(RollbackPreviewReport(preview, root))
    again = _rollback_command(root, *(["--remove-downloads"] if remove_downloads else []))
    if preview.conflicts and not force:
        term.error("files changed since the apply; nothing was restored. Look at the change, "
                   f"then run `{again} --force` to restore anyway")
        return ExitStatus.FAILED
    if force:
        again += " --force"
    if not yes and term.json_mode:  # a question would break the one JSON document
        term.error("refusing to roll back without review: --json prints only what was done. "
                   f"Review `{again}` first, then run `{again} --yes --json`")
        return ExitStatus.FAILED
    if not yes and not _reviewed(
            term, "Roll back?", declined="nothing was restored",
            unattended="refusing to roll back without review: no terminal to ask on. Review "
            f"the above, then run `{again} --yes`"):
        return ExitStatus.FAILED
    try:
        result = rollback(root, term.progress(), force=force, remove_downloads=remove_downloads,
                          preview=preview, locked=True)
    except (RollbackError, StateError, OSError) as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    term.show(RollbackReport(preview, result, root))
    return ExitStatus.OK
