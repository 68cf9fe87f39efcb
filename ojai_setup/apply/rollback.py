"""``ojai rollback``'s work: what it would put back (:func:`preview_rollback`, for review) and
putting it back (:func:`rollback`) from the last apply's journal entry and backups, through the
apply's writer (:class:`~ojai_setup.core.atomic.Replacement`), journaled as a rollback entry of
its own so that a killed rollback is settled, and its follow-ups owed, like a killed apply."""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ojai_setup.apply.faults import fault_point
from ojai_setup.apply.journal import (
    Interrupted,
    Journal,
    download_traces,
    load_entry,
    owed_follow_ups,
    recover,
)
from ojai_setup.core.atomic import Replacement, copy_of, ensure_dir, replace_symlink
from ojai_setup.core.digest import sha256_file
from ojai_setup.core.errors import StateError
from ojai_setup.core.paths import DIR_MODE, FILE_MODE, STATE_DIR
from ojai_setup.core.progress import Progress
from ojai_setup.core.root import Root
from ojai_setup.facts.state import _load_state, state_dir
from ojai_setup.model.journal import FileRecord, JournalEntry, PlannedRecord
from ojai_setup.model.state import HandlerRecord
from ojai_setup.planning.plan import describe_digest, path_digest, text_digest, unified_diff

ROLLBACK_FORCE_COMMAND = "ojai rollback --force"


# -- rollback --------------------------------------------------------------------------------
class RollbackError(StateError):
    """Rollback is impossible or refused; nothing was restored."""


@dataclass
class RollbackResult:
    rolled_back: str  # the apply id that was undone
    journal_id: str  # the rollback's own journal entry
    restored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    #: paths that could not be put back, with why (created folders, large downloads)
    left: list[str] = field(default_factory=list)
    handlers: list[str] = field(default_factory=list)
    #: the command each handler that ran ran, by name: what the message names
    commands: dict[str, tuple[str, ...]] = field(default_factory=dict)
    reboot: list[str] = field(default_factory=list)
    #: the apply undone was interrupted before it changed anything
    nothing: bool = False

    @property
    def message(self) -> str:
        if self.nothing:
            what = (f"the interrupted apply {self.rolled_back} stopped before its first "
                    f"change; nothing to roll back")
            if self.removed:
                what += "; removed what its downloads left: " + ", ".join(self.removed)
            if self.left:
                what += "; left in place: " + "; ".join(self.left)
            return what
        parts = [f"rolled back apply {self.rolled_back}"]
        if self.restored:
            parts.append("restored " + ", ".join(self.restored))
        if self.removed:
            parts.append("removed " + ", ".join(self.removed))
        if self.handlers:
            parts.append("ran " + ", ".join(shlex.join(self.commands[n]) if n in self.commands
                                            else n for n in self.handlers))
        if self.left:
            parts.append("left in place: " + "; ".join(self.left))
        if self.reboot:
            parts.append("reboot to make the restored settings active: " + "; ".join(self.reboot))
        return "; ".join(parts)


def follow_ups_for(entry: JournalEntry, paths: list[str]) -> list[HandlerRecord]:
    """The follow-up commands that make a change of ``paths`` (restored or removed) reach the
    next boot, from the actions of ``entry`` that wrote them (older entries without planned
    actions: every handler the apply ran)."""
    if not entry.planned:
        return list(entry.handlers)
    found: dict[str, HandlerRecord] = {}
    wanted = set(paths)
    for planned in entry.planned:
        if wanted.intersection(planned.targets):
            for h in planned.notify:
                found.setdefault(h.name, h.model_copy(update={"exit_code": None}))
    return list(found.values())


#: what rollback does with one path of the apply it undoes
RollbackDecision = Literal["restore", "remove", "keep", "none"]


#: largest file rollback shows a diff of
DIFF_LIMIT = 256 * 1024


@dataclass
class RollbackPreview:
    """What ``ojai rollback`` would do, for a person to review before it does it."""

    entry: JournalEntry
    directory: Path  # the state dir holding the backups
    #: (record, decision, why) for each path the apply changed, in the order rollback goes
    items: list[tuple[FileRecord, RollbackDecision, str]] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    handlers: list[HandlerRecord] = field(default_factory=list)
    reboot: list[str] = field(default_factory=list)
    #: an interrupted apply settled first (:func:`recover`), which is the one undone
    settled: Interrupted | None = None

    @property
    def nothing(self) -> bool:
        """The apply to undo was interrupted before its first change."""
        return (self.settled is not None and self.settled.entry.kind == "apply"
                and not self.settled.entry.changed)

    def diffs(self, root: Root) -> list[str]:
        """Unified diffs from what is there now to what rollback puts back (text files)."""
        out = []
        for record, decision, _ in self.items:
            if decision != "restore" or (record.backup is None and record.rollback_to is None):
                continue
            real = root.resolve(record.path)
            try:
                if record.backup is None:
                    old = record.rollback_to or ""
                    if real.is_file() and real.stat().st_size > DIFF_LIMIT:
                        continue
                else:
                    backup = self.directory / record.backup
                    if backup.stat().st_size > DIFF_LIMIT or (
                            real.is_file() and real.stat().st_size > DIFF_LIMIT):
                        continue
                    old = backup.read_text(encoding="utf-8")
                now = real.read_text(encoding="utf-8") if real.is_file() else ""
            except (OSError, UnicodeDecodeError):
                continue
            diff = unified_diff(now, old, record.path,
                                labels=(f"{record.path} (now)", f"{record.path} (restored)"))
            if diff:
                out.append(diff)
        return out


def _decide(root: Root, record: FileRecord, remove_downloads: bool
            ) -> tuple[RollbackDecision, str]:
    now = path_digest(root, record.path)
    remove = shlex.join(["ojai", "rollback", *([] if root.is_host else ["--root", str(root.path)]),
                         "--remove-downloads"])
    kept = f"downloaded or installed by the apply; `{remove}` removes it"
    if record.before is None and record.rollback_to is not None:
        if now == text_digest(record.rollback_to):
            return "restore", "already as rollback writes it"
        return "restore", ("written back without the apply's change, not removed: without it, "
                           "its readers would take what the apply changed from elsewhere")
    if record.before is None:
        if now is None:
            if record.download and download_traces(root, record):
                if remove_downloads:
                    return "remove", ("what the download left (records, partial files, "
                                      "unpack staging, folders made for it)")
                return "keep", ("a download that did not finish left files beside it; "
                                f"`{remove}` removes them")
            return "none", "already gone"
        if record.download and not remove_downloads:
            return "keep", kept
        if now.startswith(("sha256:", "symlink:")) or (now == "directory" and record.download):
            return "remove", "created by the apply"
        return "keep", "created by the apply; remove it by hand if it is not wanted"
    if now == record.before:
        # put back already (an interrupted rollback, or by hand): its follow-ups run again
        return "restore", "already as it was before the apply"
    if record.before.startswith("symlink:"):
        return "restore", f"back to {describe_digest(record.before)}"
    if record.backup is None:
        if record.download and not remove_downloads:
            return "keep", kept
        return "keep", (f"was {describe_digest(record.before)}; no backup is kept of this kind "
                        "of path")
    return "restore", "from its backup"


class NothingToRollBack(RollbackError):
    """No apply is journaled: there is nothing to undo (not a failure)."""


def _preview(root: Root, directory: Path, *, remove_downloads: bool, euid: int | None,
             settled: Interrupted | None = None) -> RollbackPreview:
    state = _load_state(directory)
    last_apply = state.last_apply
    owed = {h.name: h for h in state.pending_handlers}
    if settled is not None:  # settled in memory only (dry): what recover will write
        if settled.entry.kind == "apply" and settled.entry.changed:
            last_apply = settled.entry.apply_id
        owed = {h.name: h for h in settled.owed}
    if last_apply is None:
        hint = ""
        if directory != root.resolve(STATE_DIR) and _load_state(root.resolve(STATE_DIR)).last_apply:
            hint = "; the last apply was made as root: run `sudo ojai rollback`"
            raise RollbackError(f"nothing to roll back: no apply is journaled in {directory}{hint}")
        raise NothingToRollBack(f"nothing to roll back: no apply is journaled in {directory}")
    entry = settled.entry if settled is not None and settled.entry.apply_id == last_apply \
        else load_entry(root, last_apply, euid=euid)
    preview = RollbackPreview(entry=entry, directory=directory)
    for record in entry.traces:
        preview.items.append((record, *_decide(root, record, remove_downloads)))
    for record in reversed(entry.files):
        now = path_digest(root, record.path)
        if now not in (record.after, record.before):
            preview.conflicts.append(f"{record.path} changed since apply {entry.apply_id} "
                                     f"(it was left as {describe_digest(record.after)}, "
                                     f"now it is {describe_digest(now)})")
        decision, why = _decide(root, record, remove_downloads)
        preview.items.append((record, decision, why))
    # the follow-ups (update-grub, the initramfs) and the reboot belong to the settings that
    # are put back, not to downloads
    settings = sorted(r.path for r, d, _ in preview.items
                      if d in ("restore", "remove") and not r.download)
    if settings:
        preview.handlers = follow_ups_for(entry, settings)
        preview.reboot = list(entry.reboot)
    # and those an interrupted rollback (or apply) left owed: a rollback killed after it
    # removed the units still owes their `systemctl daemon-reload`
    named = {h.name for h in preview.handlers}
    preview.handlers += [h.model_copy(update={"exit_code": None}) for name, h in owed.items()
                         if name not in named]
    if owed and not settings:
        preview.reboot = list(entry.reboot)
    return preview


def _settled_preview(root: Root, directory: Path, settled: Interrupted | None, *,
                     remove_downloads: bool, euid: int | None,
                     dry: bool = False) -> RollbackPreview:
    """The preview once :func:`recover` ran (or worked out, ``dry``, what it would settle): an
    interrupted apply that changed nothing is itself what there is to undo (nothing);
    otherwise the last apply journaled."""
    if settled is not None and settled.entry.kind == "apply" and not settled.entry.changed:
        preview = RollbackPreview(entry=settled.entry, directory=directory, settled=settled)
        for record in settled.entry.traces:  # a download killed before it finished
            preview.items.append((record, *_decide(root, record, remove_downloads)))
        return preview
    preview = _preview(root, directory, remove_downloads=remove_downloads, euid=euid,
                       settled=settled if dry else None)
    preview.settled = settled
    return preview


def preview_rollback(root: Root, *, remove_downloads: bool = False,
                     euid: int | None = None, locked: bool = False) -> RollbackPreview:
    """What a rollback of the last apply would restore, remove and keep, the follow-up
    commands it would run and whether a reboot follows, for a person to review.

    Holds the machine's lock while it looks. An apply or rollback that was interrupted is
    worked out as :func:`recover` would settle it (it is then the one to undo) but left as it
    is: a person who says no to the rollback leaves doctor still naming it. Raises
    :class:`RollbackError` when there is nothing to roll back (:class:`NothingToRollBack`
    when no apply is journaled at all). ``locked``: the caller holds the lock already."""
    from ojai_setup.apply.lock import MachineLock

    directory = state_dir(root, euid=euid)
    lock = None if locked else MachineLock(directory, "ojai rollback")
    if lock is not None:
        lock.acquire()
    try:
        return _settled_preview(root, directory, recover(root, euid=euid, dry=True),
                                remove_downloads=remove_downloads, euid=euid, dry=True)
    finally:
        if lock is not None:
            lock.release()


def rollback(root: Root, progress: Progress, *, force: bool = False,
             remove_downloads: bool = False, euid: int | None = None,
             preview: RollbackPreview | None = None, locked: bool = False) -> RollbackResult:
    """Put back what the last apply changed, and journal it as a rollback.

    Holds the machine's lock (:class:`~ojai_setup.apply.lock.LockHeld` when another ojai
    does) and first settles an apply that was interrupted (:func:`recover`), which is then the
    one undone. Files that existed are restored from their backup (content, mode, owner),
    links are pointed back at their old target, and files and links the apply created are
    removed; a path already back as it was counts as restored. Downloads and installs (model
    files, llama.cpp folders) stay unless ``remove_downloads``; other folders an install
    created and files without a backup stay too, named in :attr:`RollbackResult.left`. The
    follow-up commands of the actions that wrote the restored settings (``update-grub``, the
    initramfs) run again and :attr:`RollbackResult.reboot` says why a reboot is needed.
    Refuses (:class:`RollbackError`, nothing restored) when a path changed after the apply,
    unless ``force``, or when the last apply is no longer the one ``preview`` (the one a
    person reviewed, from :func:`preview_rollback`) showed. Repeated rollbacks walk back
    through earlier applies. ``locked``: the caller holds the lock already (it took it
    before the preview, so nothing changed the machine between the two).
    """
    from ojai_setup.apply.lock import MachineLock

    directory = state_dir(root, euid=euid)
    lock = None if locked else MachineLock(directory, "ojai rollback")
    if lock is not None:
        lock.acquire()
    try:
        settled = recover(root, euid=euid)
        if preview is None:
            preview = _settled_preview(root, directory, settled,
                                       remove_downloads=remove_downloads, euid=euid)
        elif not preview.nothing:
            last_apply = _load_state(directory).last_apply
            if last_apply != preview.entry.apply_id:
                raise RollbackError(f"the last apply is now {last_apply}, not "
                                    f"{preview.entry.apply_id}; nothing was restored: run "
                                    "`ojai rollback` again and review it")
        if preview.nothing:
            result = RollbackResult(rolled_back=preview.entry.apply_id,
                                    journal_id=preview.entry.apply_id, nothing=True)
            for record, decision, why in preview.items:  # what its downloads left
                if decision == "remove":
                    _remove(root, record, result)
                elif decision == "keep":
                    result.left.append(f"{record.path} ({why})")
            return result
        return _rollback(root, preview, progress, force=force, euid=euid)
    finally:
        if lock is not None:
            lock.release()


def _rollback(root: Root, preview: RollbackPreview, progress: Progress, *, force: bool,
              euid: int | None) -> RollbackResult:
    entry, directory = preview.entry, preview.directory
    if preview.conflicts and not force:
        raise RollbackError("; ".join(preview.conflicts) + "; nothing was restored. Look at the "
                            f"change, then run `{ROLLBACK_FORCE_COMMAND}` to restore anyway")

    active = [(r, d) for r, d, _ in preview.items if d in ("restore", "remove")]
    journal = Journal(root, "rollback", euid=euid, rolls_back=entry.apply_id)
    journal.open([PlannedRecord(step="rollback", kind=decision,
                                description=f"{decision} {r.path}", targets=[r.path],
                                notify=[] if r.download else follow_ups_for(entry, [r.path]))
                  for r, decision in active])
    result = RollbackResult(rolled_back=entry.apply_id, journal_id=journal.id)
    result.left = [f"{r.path} ({why})" for r, d, why in preview.items if d == "keep"]
    task = progress.task(f"roll back apply {entry.apply_id}", total=len(active))
    error: str | None = None
    try:
        for n, (record, decision) in enumerate(active):
            journal.entry.planned[n].status = "running"
            journal.stage(record.path, download=record.download)
            journal.flush()
            fault_point("restore-start")
            if decision == "remove":
                _remove(root, record, result)
            elif path_digest(root, record.path) != _restored_digest(record):
                _restore(root, directory, record, result)
            else:
                result.restored.append(record.path)
            journal.entry.planned[n].status = "done"
            journal.flush()
            fault_point("restore-done")
            task.advance(1)
        for key, value in entry.records_before.items():
            journal.set_record(key, value)
        for handler in preview.handlers:
            run = root.run(list(handler.argv), env=handler.env or None, timeout=900)
            journal.handler(HandlerRecord(name=handler.name, argv=handler.argv,
                                          env=handler.env, exit_code=run.exit_code))
            journal.flush()
            if not run.ok:
                raise RollbackError(f"`{' '.join(handler.argv)}` failed with exit code "
                                    f"{run.exit_code} after the files were restored: "
                                    f"{run.stderr.strip()[-500:]}")
            result.handlers.append(handler.name)
            result.commands[handler.name] = tuple(handler.argv)
            fault_point("handler-done")
        result.reboot = list(preview.reboot)
        for reason in preview.reboot:
            journal.reboot(reason)
    except BaseException as exc:
        error = str(exc) or type(exc).__name__
        raise
    finally:
        task.done()
        # a rollback that failed part way still owes the follow-ups of what it put back
        owed = list(owed_follow_ups(journal.entry, journal.state.pending_handlers).values()) if error \
            else None
        journal.close("failed" if error else "complete", error, pending_handlers=owed,
                      last_apply=entry.previous_apply if error is None else entry.apply_id)
    return result


def _remove(root: Root, record: FileRecord, result: RollbackResult) -> None:
    real = root.resolve(record.path)
    if real.is_dir() and not real.is_symlink():
        shutil.rmtree(real)
        result.removed.append(record.path)
    elif real.exists() or real.is_symlink():
        real.unlink()
        result.removed.append(record.path)
    if record.download:
        from ojai_setup.facts.disk import download_leftovers

        # what ojai made for the download: its records, partial files, unpack staging
        for extra in download_leftovers(real):
            if extra.is_dir() and not extra.is_symlink():
                shutil.rmtree(extra)
            else:
                extra.unlink(missing_ok=True)
            result.removed.append(root.machine_path(extra) if not root.is_host else str(extra))
    _remove_made_dirs(root, record, result)


def _remove_made_dirs(root: Root, record: FileRecord, result: RollbackResult) -> None:
    """Remove the folders the apply made for ``record``'s path, innermost first, each only
    when empty (other files, another record's too, may share it)."""
    for folder in reversed(record.made_dirs):
        try:
            root.resolve(folder).rmdir()
        except OSError:
            continue
        result.removed.append(folder)


def _restored_digest(record: FileRecord) -> str | None:
    """What ``record``'s path holds once rolled back."""
    if record.before is None and record.rollback_to is not None:
        return text_digest(record.rollback_to)
    return record.before


def _write_back(real: Path, text: str) -> None:
    """``text`` into ``real``, as the apply writes a file (:class:`Replacement`)."""
    ensure_dir(real.parent, DIR_MODE)
    Replacement(real).commit(text.encode("utf-8"), mode=FILE_MODE)


def _restore(root: Root, directory: Path, record: FileRecord, result: RollbackResult) -> None:
    real = root.resolve(record.path)
    before = record.before
    if before is None and record.rollback_to is not None:
        if path_digest(root, record.path) == "directory":
            result.left.append(f"{record.path} (a folder now; rollback would write a file)")
            return
        _write_back(real, record.rollback_to)
        result.restored.append(record.path)
        return
    if before is None:
        now = path_digest(root, record.path)
        if now is None:
            return
        if now.startswith(("sha256:", "symlink:")):
            real.unlink()
            result.removed.append(record.path)
            _remove_made_dirs(root, record, result)
        else:
            result.left.append(f"{record.path} (created by the apply; remove it by hand "
                               f"if it is not wanted)")
        return
    if before.startswith("symlink:"):
        replace_symlink(real, before[len("symlink:"):])
        result.restored.append(record.path)
        return
    if record.backup is None:
        result.left.append(f"{record.path} (was {describe_digest(before)}; no backup is kept "
                           f"of this kind of path)")
        return
    ensure_dir(real.parent, DIR_MODE)

    def check(tmp: Path) -> None:
        if "sha256:" + sha256_file(tmp) != before:
            raise RollbackError(f"the backup of {record.path} in {directory / record.backup} "
                                f"does not match its journal entry; {record.path} was left as is")

    Replacement(real).commit(
        copy_of(directory / record.backup), mode=record.mode, check=check,
        owner=(record.uid, record.gid) if record.uid is not None and record.gid is not None
        else None)
    result.restored.append(record.path)
