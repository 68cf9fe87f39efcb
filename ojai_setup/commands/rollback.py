"""``ojai rollback``: undo the last apply, after review. What it shows is a report
(:class:`RollbackPreviewReport`, :class:`RollbackReport`) printed by :meth:`Terminal.show`; the
functions here decide, ask and exit."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from ojai_setup.apply.faults import fault_point
from ojai_setup.apply.signals import SignalGuard
from ojai_setup.commands.setup_views import TEXT_AT
from ojai_setup.commands.terminal import Terminal, reviewed
from ojai_setup.core.root import Root
from ojai_setup.core.status import ExitStatus

if TYPE_CHECKING:  # the apply layer is imported only by the commands that change something
    from ojai_setup.apply.rollback import RollbackPreview, RollbackResult


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
        term.entry("", f"rollback of apply {entry.apply_id} ({entry.status}, "
                   f"{entry.started:%Y-%m-%d %H:%M} UTC):", hang=2)
        for record, decision, why in preview.items:
            verb = "skip" if decision == "none" else decision
            head = f"  {verb:>8} {record.path}"
            if len(head) + len(why) + 4 <= term.console.width:
                term.print(f"{escape(head)}  [dim]({escape(why)})[/]")
            else:  # the path whole on its line (to be copied), why beneath it
                term.print(head, markup=False, soft_wrap=True)
                term.entry("", f"[dim]({escape(why)})[/]", indent=TEXT_AT + 3,
                           hang=TEXT_AT + 4, markup=True)
        if preview.handlers:
            term.print()
            term.print("[bold]Then, as root[/]:")
            for handler in preview.handlers:
                term.entry("  ", " ".join(handler.argv), hang=6)
        diffs = preview.diffs(self.root)
        if diffs:
            term.print()
        for diff in diffs:
            for line in diff_lines(diff):  # as the plan's diffs: one line each, never cropped
                term.print(line, soft_wrap=True)
        for conflict in preview.conflicts:
            term.entry("[bold yellow]changed since the apply:[/] ", conflict, hang=2)
        if preview.reboot:
            term.print()
            term.entry("[bold]A reboot is needed after rolling back:[/] ",
                       "; ".join(preview.reboot), hang=2)


class NothingToRollBackReport:
    """``ojai rollback`` where no apply is journaled: nothing to do, nothing changed."""

    schema = "ojai.rollback/1"

    def __init__(self, message: str) -> None:
        self.message = message

    def to_json(self) -> dict:
        return {"apply_id": None, "files": [], "handlers": [], "conflicts": [],
                "message": self.message, "nothing": True, "restored": [], "removed": [],
                "left": [], "handlers_run": [], "reboot_required": False, "reboot_reasons": [],
                "journal_id": None, "exit_code": int(ExitStatus.OK)}

    def render(self, term: Terminal) -> None:
        term.entry("", f"{self.message}; nothing was changed", hang=2)


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
        term.entry("", self.result.message, hang=2)
        if self.result.reboot and not self.result.nothing:
            term.print("[bold]Reboot now[/] to make the restored settings active.")


def rollback_command(root: Root, *options: str) -> str:
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
    again = rollback_command(root, *(["--remove-downloads"] if remove_downloads else []))
    try:
        with SignalGuard() as stop:
            fault_point("locked")
            return _rollback_locked(term, root, force=force, yes=yes,
                                    remove_downloads=remove_downloads, stop=stop)
    except KeyboardInterrupt:  # while it looks or asks: the rollback reports its own
        term.error(f"stopped by {stop.received or 'SIGINT'} before anything was restored; "
                   f"nothing was changed; to try again: {again}")
        return ExitStatus.INTERRUPTED
    finally:
        lock.release()


def _rollback_locked(term: Terminal, root: Root, *, force: bool, yes: bool,
                     remove_downloads: bool, stop: SignalGuard | None = None) -> int:
    from ojai_setup.apply.rollback import (
        NothingToRollBack,
        RollbackError,
        preview_rollback,
        rollback,
    )
    from ojai_setup.core.errors import StateError

    try:
        with stop.holding() if stop is not None else nullcontext():
            preview = preview_rollback(root, remove_downloads=remove_downloads, locked=True)
    except NothingToRollBack as exc:  # nothing to do is not a failure: exit 0
        term.show(NothingToRollBackReport(str(exc)))
        return ExitStatus.OK
    except (RollbackError, StateError, OSError) as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    if preview.settled is not None:
        term.note(preview.settled.message)
    if preview.nothing:
        if stop is not None:
            stop.hold()
        term.show(RollbackReport(preview, rollback(root, term.progress(), preview=preview,
                                                   locked=True), root))
        return ExitStatus.OK
    if not term.json_mode:  # with --json, the report after the rollback carries the preview
        term.show(RollbackPreviewReport(preview, root))
    again = rollback_command(root, *(["--remove-downloads"] if remove_downloads else []))
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
    if not yes and not reviewed(
            term, "Roll back?", declined="nothing was restored",
            unattended="refusing to roll back without review: no terminal to ask on. Review "
            f"the above, then run `{again} --yes`"):
        return ExitStatus.FAILED
    if stop is not None:
        stop.hold()
    try:
        result = rollback(root, term.progress(), force=force, remove_downloads=remove_downloads,
                          preview=preview, locked=True)
    except (RollbackError, StateError, OSError) as exc:
        term.error(str(exc))
        return ExitStatus.FAILED
    term.show(RollbackReport(preview, result, root))
    if stop is not None and stop.received:
        term.note(f"{stop.received} came while restoring; the rollback was finished first")
    return ExitStatus.OK
