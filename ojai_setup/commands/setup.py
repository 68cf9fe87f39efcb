"""``ojai setup``: plan, show, save, apply, verify. The functions here decide, ask and exit;
what they show are the reports of :mod:`ojai_setup.commands.setup_views`, printed by
:meth:`Terminal.show`. The plan is made by :mod:`ojai_setup.commands.planner`, a saved plan
checked by :mod:`ojai_setup.commands.saved_plan`; ``ojai rollback`` is
:mod:`ojai_setup.commands.rollback`."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ojai_setup.commands.planner import build_plan
from ojai_setup.commands.setup_views import (
    ApplyFailureReport,
    ApplyReport,
    FileReport,
    NothingToApply,
    PlanReport,
    dry_run_exit,
)
from ojai_setup.commands.terminal import Terminal, reviewed
from ojai_setup.core.root import Root
from ojai_setup.core.status import ExitStatus
from ojai_setup.facts.collect import collect
from ojai_setup.model.settings import Settings
from ojai_setup.planning.plan import Plan, PlanFileError, check_fresh

if TYPE_CHECKING:  # an apply's and a saved plan's modules are imported where they are used
    from ojai_setup.apply.signals import SignalGuard

__all__ = ["build_plan", "run_setup"]


def run_setup(term: Terminal, root_dir: Path, settings: Settings, *, apply: bool, yes: bool,
              plan_file: Path | None, out: Path | None, show_new: bool = False,
              show: str | None = None, force_handlers: bool = True, gate: bool = True) -> int:
    from ojai_setup.core.asking import say_with

    previous = say_with(term.network_status())
    try:
        return _run_setup(term, root_dir, settings, apply=apply, yes=yes, plan_file=plan_file,
                          out=out, show_new=show_new, show=show, force_handlers=force_handlers,
                          gate=gate)
    finally:
        say_with(previous)


def _run_setup(term: Terminal, root_dir: Path, settings: Settings, *, apply: bool, yes: bool,
               plan_file: Path | None, out: Path | None, show_new: bool,
               show: str | None, force_handlers: bool, gate: bool) -> int:
    root = Root(root_dir)
    if plan_file is None:
        from ojai_setup.planning.gather import resolve_model

        settings = resolve_model(root, settings)
    if plan_file is not None and settings.options() and not term.json_mode:
        term.note(f"--plan {plan_file}: the plan records the settings it was made with; "
                  f"{' '.join(settings.options())} given here changed nothing")
    if show is not None:
        if apply:
            term.error(f"--show {show}: shows one file of a plan; it cannot be given with --apply")
            return ExitStatus.USAGE
        if plan_file is not None:
            try:
                shown = Plan.load(plan_file)
            except PlanFileError as exc:
                term.error(str(exc))
                return ExitStatus.USAGE if exc.missing else ExitStatus.FAILED
        else:
            shown = build_plan(root, settings)
        return show_file(term, shown, show)
    if plan_file is not None and not apply:
        from ojai_setup.commands.saved_plan import show_saved

        return show_saved(term, root, plan_file, show_new=show_new)
    if not apply:
        return _dry_run(term, root, settings, out, show_new=show_new)
    from ojai_setup.apply.faults import fault_point
    from ojai_setup.apply.lock import MachineLock
    from ojai_setup.apply.signals import SignalGuard
    from ojai_setup.core.errors import StateError
    from ojai_setup.facts.state import state_dir

    # the lock covers planning too: no other ojai changes the machine between the plan
    # this apply makes (or checks) and the apply itself
    lock = MachineLock(state_dir(root), "ojai setup --apply")
    try:
        lock.acquire()
    except StateError as exc:
        term.error(str(exc) + _as_root(root, settings, plan_file, lock.path))
        return ExitStatus.FAILED
    again = settings.command("--apply", root=str(root_dir)) if plan_file is None else \
        f"ojai setup --root {shlex.quote(str(root_dir))} --apply --plan " \
        f"{shlex.quote(str(plan_file))}"
    try:
        with SignalGuard() as stop:
            fault_point("locked")
            return _apply_locked(term, root, settings, yes=yes, plan_file=plan_file, out=out,
                                 show_new=show_new, force_handlers=force_handlers, stop=stop,
                                 gate=gate)
    except KeyboardInterrupt:  # while planning or asking: the apply reports its own
        term.error(f"stopped by {stop.received or 'SIGINT'} before the first change; nothing was "
                   f"changed; to try again: {again}")
        return ExitStatus.INTERRUPTED
    finally:
        lock.release()


def _as_root(root: Root, settings: Settings, plan_file: Path | None, lock: Path) -> str:
    """When the lock could not be taken because this user may not write where it goes: the
    ``sudo`` command that applies as root, else ``""``."""
    import os

    from ojai_setup.apply.executor import _writable, sudo_apply_command

    if os.geteuid() == 0 or _writable(lock):
        return ""
    command = sudo_apply_command(root, settings.options(),
                                 str(plan_file) if plan_file else None)
    return f". Applying here needs root; run:\n  {command}"


def _save_plan(term: Terminal, plan: Plan, out: Path) -> bool:
    """Save ``plan`` to ``out``; False (and the error said) when it cannot be written."""
    try:
        plan.save(out)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if not out.parent.is_dir():
            why = f"no folder {out.parent}"
        term.error(f"--out {out}: the plan cannot be written there ({why.lower()}); "
                   "nothing was saved or applied. Give a file in a folder you can "
                   "write to")
        return False
    return True


def _dry_run(term: Terminal, root: Root, settings: Settings, out: Path | None, *,
             show_new: bool) -> int:
    from ojai_setup.facts.state import JournalError, read_apply_status

    plan = build_plan(root, settings)
    if out is not None and not _save_plan(term, plan, out):
        return ExitStatus.USAGE
    try:
        status = read_apply_status(root)
    except JournalError as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    owed_note = _owed_note(status)
    term.show(PlanReport(plan, owed=owed_note, show_new=show_new,
                         saved=str(out) if out is not None else None))
    if out is not None and not term.json_mode:
        from ojai_setup.planning.plan import apply_command

        term.note(f"plan saved to {out}; show it again (and whether it is still fresh) "
                  f"with `{apply_command(plan, str(out), apply=False)}`; apply exactly it "
                  f"with `{apply_command(plan, str(out))}`")
    return int(dry_run_exit(plan, owed_note))


def _apply_locked(term: Terminal, root: Root, settings: Settings, *, yes: bool,  # noqa: C901
                  plan_file: Path | None, out: Path | None, show_new: bool,
                  force_handlers: bool, stop: SignalGuard | None = None,
                  gate: bool = True) -> int:
    """``ojai setup --apply`` once the machine's lock is held: plan (or check the saved plan),
    show, ask, apply, verify, gate the routes it wrote, and say how it ended."""
    from ojai_setup.facts.state import JournalError, read_apply_status, read_state

    if plan_file is not None:
        try:
            plan = Plan.load(plan_file)
        except PlanFileError as exc:
            term.error(str(exc))
            return ExitStatus.USAGE if exc.missing else ExitStatus.FAILED
        stale = check_fresh(plan, root, collect(root), plan_path=str(plan_file))
        if stale is not None:
            term.error(f"saved plan is stale: {stale.message}")
            return ExitStatus.FAILED
        from ojai_setup.commands.saved_plan import recheck_saved

        refused = recheck_saved(plan, root, plan_file)
        if refused:
            term.error(refused)
            return ExitStatus.FAILED
    else:
        plan = build_plan(root, settings)
        if out is not None and not _save_plan(term, plan, out):
            return ExitStatus.USAGE
    try:
        status = read_apply_status(root, locked=True)
    except JournalError as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    owed_note = _owed_note(status)
    if plan_file is None:
        if not term.json_mode:  # with --apply, --json prints the apply's report
            term.show(PlanReport(plan, show_new=show_new,
                                 saved=str(out) if out is not None else None))
        if out is not None and not term.json_mode:
            from ojai_setup.planning.plan import apply_command

            term.note(f"plan saved to {out}; show it again (and whether it is still fresh) "
                      f"with `{apply_command(plan, str(out), apply=False)}`; apply exactly it "
                      f"with `{apply_command(plan, str(out))}`")
    if plan.blocked() and not plan.changes() and not owed_note:
        term.error(f"nothing can be applied: {plan.left_out()}; nothing was changed")
        return ExitStatus.FAILED
    try:
        read_state(root)
    except JournalError as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    if not plan.changes() and not owed_note:
        term.show(NothingToApply(plan))
        return ExitStatus.OK
    root_arg = "/" if root.is_host else str(root.path)
    from ojai_setup.apply.executor import NeedsRoot, check_privileges

    try:  # before the question: a yes that cannot be carried out is not asked for
        check_privileges(plan, root, plan_path=str(plan_file) if plan_file else None)
    except NeedsRoot as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    unreviewed = plan_file is None and not yes and bool(plan.changes())
    if unreviewed and term.json_mode:  # the plan was not shown, and a question would break the JSON
        term.error("refusing to apply without review: with --json, --apply prints only what "
                   f"was done. Review `{settings.command(root=root_arg)}`, then run "
                   f"`{settings.command('--apply', '--yes', '--json', root=root_arg)}`")
        return ExitStatus.FAILED
    if unreviewed and not reviewed(
            term, "Apply this plan?", declined="nothing was applied",
            unattended="refusing to apply without review: no terminal to ask on. Review "
            f"`{settings.command(root=root_arg)}`, then run "
            f"`{settings.command('--apply', '--yes', root=root_arg)}` (or save it with "
            f"`{settings.command('--out', 'plan.json', root=root_arg)}` and apply "
            "exactly that with --apply --plan plan.json)"):
        return ExitStatus.FAILED
    from ojai_setup.apply.executor import failure_of
    from ojai_setup.apply.executor import apply as apply_plan
    from ojai_setup.core.errors import ApplyError, StateError

    if any(p.action.kind == "prove_build" for p in plan.actions()):
        # an upgrade's proof runs the gate and the bench, which live in this layer
        import ojai_setup.commands.upgrade  # noqa: F401 - registers the prove_build executor

    applied_settings = settings if plan_file is None else Settings(**plan.settings)
    try:
        if stop is not None:
            stop.hold()
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
        from ojai_setup.commands.rollback import rollback_command

        report = ApplyFailureReport(
            plan, failure, finish=applied_settings.command("--apply", root=root_arg),
            undo=rollback_command(root), journal=_journal_path(root, failure.result.journal),
            exit_code=int(code))
        if term.json_mode:
            term.show(report)
            term.error(f"apply failed: {failure.error}" if not failure.signal
                       else f"apply stopped by {failure.signal}")
        else:
            report.render(term)
        return code
    after = build_plan(root, applied_settings)
    # the steps this plan left out stay blocked (or waiting); anything else is a surprise
    left_out = {r.step for r in plan.blocked()}
    leftover = [r for r in after.steps if r.status != "satisfied" and r.step not in left_out]
    # a left-out step the apply unblocked (the room a download took is now counted as used)
    ready = [r.step for r in after.steps if r.step in left_out and r.status == "change"]
    waiting = "; ".join(p for p in (after.left_out(), ", ".join(ready) + (
        " can be applied now" if ready else "")) if p) if not leftover else ""
    gates, gate_stopped = None, False
    if gate:
        from ojai_setup.commands.apply_gate import gate_applied

        if stop is not None:  # the change is done: a signal now stops the gate, not the apply
            stop.stop_again()
        gates, gate_stopped = gate_applied(root, plan, term.progress())
        if stop is not None:
            stop.hold()
    wrong = [g for g in gates or () if g.passed is False]
    code = ExitStatus.FAILED if leftover or wrong else ExitStatus.INTERRUPTED if gate_stopped \
        else ExitStatus.INCOMPLETE if waiting else ExitStatus.OK
    term.show(ApplyReport(plan, result, root, journal=_journal_path(root, result.journal),
                          exit_code=int(code), waiting=waiting,
                          again=applied_settings.command("--apply", root=root_arg),
                          owed=owed_note if not plan.changes() else "", gates=gates))
    if wrong:
        term.error("not ready: " + "; ".join(g.sentence() for g in wrong))
    if leftover:
        term.error("after applying, a new plan is not empty: "
                   + "; ".join(f"{r.step}: {r.sentence}" for r in leftover))
    return code


def _journal_path(root: Root, path: Path | None) -> str | None:
    """A journal file as a machine path (the real path on the host)."""
    if path is None:
        return None
    return str(path if root.is_host else root.machine_path(path))


def show_file(term: Terminal, plan: Plan, path: str) -> int:
    """``--show PATH``: the one file ``path`` of ``plan`` (:class:`FileReport`); a path the plan
    does not write is a usage error naming those it does."""
    from ojai_setup.planning.summary import written_files

    files = written_files(plan)
    for f in files:
        if f.path == path:
            term.show(FileReport(f))
            return ExitStatus.OK
    known = ", ".join(f.path for f in files) or "none"
    term.error(f"--show {path}: the plan writes no such file (it writes: {known})")
    return ExitStatus.USAGE


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
                "`ojai setup --apply` runs them.")
    return ""


