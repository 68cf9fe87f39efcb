"""What ``ojai setup`` shows: the dry run (:class:`PlanReport`), a saved plan
(:class:`SavedPlanReport`), one file of a plan (:class:`FileReport`), what an apply did
(:class:`ApplyReport`, :class:`NothingToApply`) or how it stopped (:class:`ApplyFailureReport`),
and the JSON documents behind them. Each is printed by :meth:`Terminal.show`; the setup flow
(:mod:`ojai_setup.commands.setup`) decides, asks and exits."""

from __future__ import annotations

import shlex
from datetime import timezone

from ojai_setup.commands.terminal import SYMBOLS, Terminal
from ojai_setup.core.root import Root
from ojai_setup.core.status import ExitStatus
from ojai_setup.planning.plan import Plan


def plan_json(plan: Plan) -> dict:
    """A plan as ``ojai setup --json`` prints it (``"schema": "ojai.setup/1"``)."""
    from ojai_setup.planning.summary import summarize

    data = plan.model_dump(mode="json")
    data["exit_code"] = int(plan.exit_code)
    data["diffs"] = plan.unified_diffs()
    data["reboot_reasons"] = plan.reboot_reasons()
    data["summary"] = summarize(plan).to_json()
    return data


#: the column a step's or finding's text starts at, after its status word; its details below
#: start two columns further in
TEXT_AT, DETAIL_AT = 10, 12


def clauses(sentence: str) -> list[str]:
    """A step's sentence cut where a person would break it: at ``; `` and between sentences,
    outside brackets and quotes, each piece keeping its own punctuation (so that the pieces
    joined by spaces are the sentence again)."""
    pieces: list[str] = []
    depth, quoted, start, i = 0, False, 0, 0
    while i < len(sentence):
        c = sentence[i]
        if c == "`":
            quoted = not quoted
        elif c in "([{" and not quoted:
            depth += 1
        elif c in ")]}" and not quoted:
            depth = max(0, depth - 1)
        elif not depth and not quoted and c in ";." and sentence[i + 1:i + 2] == " " and (
                c == ";" or sentence[i + 2:i + 3][:1].isupper()):
            pieces.append(sentence[start:i + 1].strip())
            start = i + 2
        i += 1
    pieces.append(sentence[start:].strip())
    return [p for p in pieces if p]


def show_step(term: Terminal, status: str, name: str, sentence: str,
              ways: tuple[str, ...] = ()) -> None:
    """A step's head line (its status, name and what it does) and the rest of its sentence
    beneath, each wrapped with a hanging indent; then a blocked step's ways forward, one
    ``- `` item each."""
    head, *rest = clauses(sentence) or [sentence]
    label = term.styled(status) + " " * (TEXT_AT - 2 - len(SYMBOLS.get(status, status)))
    term.entry(label, f"[bold]{escape(name)}[/]: {escape(head)}", indent=2, hang=TEXT_AT,
               markup=True)
    for piece in rest:
        term.entry("", piece, indent=DETAIL_AT, hang=DETAIL_AT + 2)
    if ways:
        term.entry("", "ways forward:", indent=DETAIL_AT)
        for way in ways:
            term.entry("- ", way, indent=DETAIL_AT, hang=DETAIL_AT + 2)


def escape(text: str) -> str:
    from rich.markup import escape as _escape

    return _escape(text)


def show_findings(term: Terminal, findings) -> None:
    """Doctor's findings: the severity and title as the head line, the evidence and the fix
    beneath, each wrapped with a hanging indent."""
    for f in findings:
        label = term.styled(f.severity) + " " * (TEXT_AT - 2 - len(SYMBOLS.get(f.severity, f.severity)))
        term.entry(label, f.title, indent=2, hang=TEXT_AT)
        term.entry("", f.evidence, indent=DETAIL_AT, hang=DETAIL_AT + 2)
        if f.fix:
            term.entry("[bold]fix:[/] ", f.fix, indent=DETAIL_AT, hang=DETAIL_AT + 5)
        if getattr(f, "link", None):
            term.entry("see ", f.link, indent=DETAIL_AT, hang=DETAIL_AT + 4)


def action_line(action) -> str:
    """What one action does, for the list under its step: a verb first, ``as root`` when it
    needs root, a file to create with its size."""
    from ojai_setup.model.actions import HubDownload, WriteFile

    if isinstance(action, WriteFile):
        text = f"{'create' if action.before is None else 'edit'} {action.path}"
    elif isinstance(action, HubDownload):  # its folder is in the step's sentence
        size = action.size or action.estimated_size
        text = (f"download {action.filename} from {action.repo_id}"
                + (f" ({'' if action.size else 'about '}{_size(size)})" if size else ""))
    else:
        text = action.describe()
    return text + (", as root" if action.needs_root else "")


def _size(n: int) -> str:
    if n < 10_000:
        return f"{n} bytes" if n != 1 else "1 byte"
    if n < 2**20:
        return f"{n / 1024:.1f} KiB"
    if n < 2**30:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 2**30:.1f} GiB"


class PlanReport:
    """The dry run, in the order a reviewer needs it: doctor's findings that matter here,
    every step (a head line, its details and actions beneath), the follow-up commands, the
    whole diff of every file that exists and is edited (what the boot reads first), the files
    ojai creates (listed with their size; whole with ``--show-new``), the reboot, and one line
    counting it all before the question. ``owed`` says what an earlier apply left to do."""

    schema = "ojai.setup/1"

    def __init__(self, plan: Plan, owed: str = "", *, show_new: bool = False,
                 saved: str | None = None) -> None:
        self.plan, self.owed, self.show_new, self.saved = plan, owed, show_new, saved

    def to_json(self) -> dict:
        return plan_json(self.plan)

    def render(self, term: Terminal) -> None:
        from ojai_setup.commands.diffview import diff_lines
        from ojai_setup.planning.plan import unified_diff
        from ojai_setup.planning.summary import written_files

        from ojai_setup.core.commandline import ojai_command
        from ojai_setup.domain.checks import fix_for_root

        plan = self.plan

        def here(text: str) -> str:  # the `ojai ...` commands it quotes, for this machine
            return fix_for_root(text, plan.root) or text

        if plan.preconditions:
            term.print("[bold]Doctor's findings on this machine[/] "
                       f"(`{escape(ojai_command(plan.root, 'doctor'))}` for all):",
                       soft_wrap=True)  # never cut: the terminal wraps it
            show_findings(term, plan.preconditions)
            term.print()
        term.print("[bold]Steps[/]:")
        for r in plan.steps:
            show_step(term, "waiting" if r.waits_for else r.status, r.step, here(r.sentence),
                      tuple(map(here, r.ways)))
            for a in r.actions:
                term.entry("", action_line(a), indent=DETAIL_AT, hang=DETAIL_AT + 2)
            for warning in r.warnings:
                term.entry("[bold yellow]warning:[/] ", here(warning), indent=DETAIL_AT,
                           hang=DETAIL_AT + 2)
        files = written_files(plan)
        # whole: every file that exists and is edited, and any the boot reads (a new
        # modprobe.d file too); listed by size: the rest of the files it creates
        whole = [f for f in files if f.change == "edit" or f.boot]
        new = [f for f in files if f not in whole]
        if whole:
            term.print()
            term.print("[bold]Files to review[/] (whole diffs; what the boot reads first):")
            for f in whole:
                for line in diff_lines(unified_diff(f.before, f.after, f.path)):
                    # one line each, never cropped: the terminal wraps what is wider than it
                    term.print(line, soft_wrap=True)
        if new:
            term.print()
            if self.show_new:
                term.print(f"[bold]Other files it creates[/] ({len(new)}, whole):")
                for f in new:
                    for line in diff_lines(unified_diff(None, f.after, f.path)):
                        term.print(line, soft_wrap=True)
            else:
                how = ("one shown whole by the command below" if self.saved
                       else "shown whole with --show-new, one with --show PATH")
                term.entry("", f"[bold]{'Other files' if whole else 'Files'} it creates[/] "
                           f"({len(new)}; {how}):", hang=2, markup=True)
                for f in new:
                    term.entry("  + ", f"{f.path}  ({_lines(f.lines)}, {_size(f.size)})",
                               hang=6)
                if self.saved:  # a command is printed whole, to be copied
                    term.print(f"  ojai setup --plan {shlex.quote(self.saved)} --show PATH",
                               markup=False, soft_wrap=True)
        if plan.handlers:
            term.print()
            term.print("[bold]Then, as root, once and only if a change above needs it[/]:")
            for cmd in plan.handlers.values():
                term.entry("  ", f"{' '.join(cmd.argv)}" + (f"  ({cmd.reason})" if cmd.reason
                                                             else ""), hang=6)
        reasons = plan.reboot_reasons()
        term.print()
        if reasons:
            term.entry("[bold]A reboot is needed after applying:[/] ", "; ".join(reasons),
                       hang=2)
        if self.owed:
            term.entry("", self.owed, hang=2)
        # the last line says what the exit code says, work owed by an earlier apply included
        term.entry("", f"[bold]{escape(plan_summary(plan, self.owed))}[/]", hang=6, markup=True)


def _lines(n: int) -> str:
    return "1 line" if n == 1 else f"{n} lines"


def plan_summary(plan: Plan, owed: str = "") -> str:
    """The dry run's last line (the plan's count of what it does), which says what its exit
    code says (:func:`dry_run_exit`): with nothing to change but work an earlier apply owes,
    that work."""
    from ojai_setup.planning.summary import summarize

    if dry_run_exit(plan, owed) == ExitStatus.CHANGES and plan.exit_code == ExitStatus.OK:
        return "Plan: nothing to change, but an earlier apply left work owed (above)."
    return summarize(plan).sentence()


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
                 exit_code: int = 0, owed: str = "", waiting: str = "",
                 again: str = "", gates: list | None = None) -> None:
        self.plan, self.result, self.root, self.owed = plan, result, root, owed
        self.journal, self.exit_code = journal, exit_code
        self.waiting, self.again = waiting, again
        #: the correctness gate of each route the apply wrote
        #: (:class:`ojai_setup.commands.apply_gate.RouteGate`); None: ``--no-gate``
        self.gates = gates

    def to_json(self) -> dict:
        data = apply_report(self.plan, self.result, journal=self.journal,
                            exit_code=self.exit_code)
        data["left_out"] = [{"step": r.step, "sentence": r.sentence,
                             "waits_for": list(r.waits_for)} for r in self.plan.blocked()]
        data["gates"] = None if self.gates is None else [
            dict(g.model_dump(mode="json"), passed=g.passed) for g in self.gates]
        return data

    def what_next(self) -> list[tuple[str, str, list[str]]]:
        """What a person does after this apply, in order, each with its command (or a line per
        route): the reboot when one is due, ``ojai doctor`` to confirm the limit the next
        boot reads, then how to start each route (its unit, enabled for boot, or its script)
        and the ``ojai verify`` that checks it."""
        from ojai_setup.commands.verify import next_steps
        from ojai_setup.core.commandline import ojai_command

        out: list[tuple[str, str, list[str]]] = []
        if self.result.reboot:
            out.append((f"reboot ({'; '.join(self.result.reboot)})", "sudo reboot", []))
            out.append(("after the reboot, confirm that the GPU memory limit is active",
                        ojai_command(self.root.path, "doctor"), []))
        routes = next_steps(self.root, {g.route: g for g in self.gates or ()},
                            gated=self.gates is not None)
        if routes:
            out.append(("start each route and check it (a unit enabled with `enable --now` "
                        "also starts at every boot)", "", routes))
        return out

    def render(self, term: Terminal) -> None:
        if self.owed:
            term.entry("", "every step was already satisfied; an earlier apply left work owed",
                       hang=2)
        if self.result.recovered:
            term.entry("finished first: ", self.result.recovered, hang=2)
        term.entry("[bold]applied:[/] ", self.result.message, hang=2)
        for a in self.result.actions:  # an upgrade's proof: what was compared, its figures
            if a.description.startswith("prove ") and a.changed:
                term.entry("new llama.cpp build: ", a.message, hang=2)
        if self.result.owed:
            term.entry("still owed: ", ", ".join(f"`{h.command}`" for h in self.result.owed),
                       hang=2)
        if self.journal:
            term.entry("journal: ", self.journal, hang=2)
        for g in self.gates or ():
            term.entry("gate: ", g.sentence(), hang=2)
        steps = self.what_next()
        if steps and not self.result.reboot:
            term.entry("", "no reboot is needed: nothing this apply changed is read only at boot",
                       hang=2)
        if steps:
            term.print("[bold]Next[/], in order:")
        for n, (text, command, lines) in enumerate(steps, start=1):
            term.entry(f"  {n}. ", text + (":" if command or lines else ""), hang=5)
            if command:  # whole, to be copied
                term.print(f"       {command}", markup=False, soft_wrap=True)
            for line in lines:
                term.entry("     - ", line, hang=7)
        if self.waiting:  # the last line says what the exit status (3) says
            term.entry("", "once what blocks them is fixed (the plan above says how), the "
                       "same command applies the rest:", hang=2)
            term.print(f"  {self.again}", markup=False, soft_wrap=True)
            term.entry("", f"[bold]Applied what it could; not applied: "
                       f"{escape(self.waiting)}.[/]", hang=2, markup=True)


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
            out.append("still owed (the next apply runs it): "
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


class SavedPlanReport:
    """A saved plan (``ojai setup --plan FILE``) as the dry run showed it, then whether it is
    still fresh for this machine (:func:`saved_plan_status`) and the command to run next."""

    schema = PlanReport.schema

    def __init__(self, plan: Plan, status: dict, *, show_new: bool = False) -> None:
        self.plan, self.status, self.show_new = plan, status, show_new

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
        PlanReport(plan, show_new=self.show_new, saved=status["path"]).render(term)
        made = plan.created.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        term.print()
        term.entry("[bold]saved plan[/] ", f"{escape(status['path'])}, made {made} by ojai "
                   f"{escape(plan.ojai_version)} with:", hang=2, markup=True)
        # commands are printed whole, to be copied: the terminal wraps what is wider
        term.print(f"  {status['made_with']}", markup=False, soft_wrap=True)
        if status["fresh"] and self.exit_code == ExitStatus.FAILED and plan.changes():
            term.entry("[green]fresh[/]: ", "nothing it read or writes changed since, and ojai "
                       f"plans the same now; {plan.left_out()}: an apply leaves "
                       f"{'it' if len(plan.blocked()) == 1 else 'them'} out and applies the "
                       "rest. Apply exactly it with:", hang=2)
            term.print(f"  {status['apply_command']}", markup=False, soft_wrap=True)
            return
        if status["fresh"] and self.exit_code == ExitStatus.FAILED:
            term.entry("[green]fresh[/]: ", "nothing it read or writes changed since, and ojai "
                       "plans the same now; but a step is blocked, so it cannot be applied: fix "
                       "the blocked steps above, then make a new plan with:", hang=2)
            term.print(f"  {status['made_with']}", markup=False, soft_wrap=True)
            return
        if status["fresh"]:
            term.entry("[green]fresh[/]: ", "nothing it read or writes changed since, and ojai "
                       "plans the same now. Apply exactly it with:", hang=2)
            term.print(f"  {status['apply_command']}", markup=False, soft_wrap=True)
            return
        term.print("[bold red]stale[/]: it no longer matches this machine:")
        for line in status["changes"] + status["steps_differ"]:
            term.entry("  - ", line, hang=4)
        term.print("Make and review a new plan with:")
        term.print(f"  {status['made_with']}", markup=False, soft_wrap=True)


class FileReport:
    """One file of a plan (``ojai setup --show PATH``): a file it creates exactly as it will be
    written, a file it edits as its whole diff."""

    schema = "ojai.setup-file/1"

    def __init__(self, written) -> None:
        self.file = written

    def to_json(self) -> dict:
        from ojai_setup.planning.plan import unified_diff

        f = self.file
        return {"path": f.path, "change": f.change, "step": f.step, "size": f.size,
                "before": f.before, "after": f.after,
                "diff": unified_diff(f.before, f.after, f.path)}

    def render(self, term: Terminal) -> None:
        from ojai_setup.commands.diffview import diff_lines
        from ojai_setup.planning.plan import unified_diff

        f = self.file
        if f.change == "create":  # as it will be written: ready for a pipe or an editor
            term.print(f.after, markup=False, soft_wrap=True, end="")
            return
        for line in diff_lines(unified_diff(f.before, f.after, f.path)):
            term.print(line, soft_wrap=True)
