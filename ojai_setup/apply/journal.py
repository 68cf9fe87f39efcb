"""Backups, the apply journal, ojai's state file, and rollback.

Layout, under the machine's ``/var/lib/ojai`` (see :func:`state_dir`)::

    backups/<apply-id>/<machine path>   originals of the files an apply changed
    journal/<apply-id>.json             what an apply (or rollback) did, file by file
    state.json                          the last apply id and records steps keep

An apply id sorts by time: ``20261014T101500Z-3fa2c1``. A journal entry lists, for every path
that changed, what was there before and after (:func:`ojai_setup.planning.plan.path_digest` strings:
``sha256:<hex>``, ``symlink:<target>``, ``directory``, or null for absent), whether it existed,
and where its backup is. The boot id of the machine at apply time is kept so that a check can
tell "applied, reboot pending" from "rebooted, still not active".

:func:`rollback` puts back what the last apply changed."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import stat
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ojai_setup.apply.faults import fault_point
from ojai_setup.core.atomic import (
    Replacement,
    copy_of,
    ensure_dir,
    fsync_dir,
    replace_symlink,
    write_text,
)
from ojai_setup.core.digest import sha256_file
from ojai_setup.core.errors import StateError
from ojai_setup.core.paths import (
    DIR_MODE,
    FILE_MODE,
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    STATE_DIR,
)
from ojai_setup.core.progress import Progress
from ojai_setup.core.root import Root
from ojai_setup.facts.state import JournalError, _load_state, read_boot_id, state_dir
from ojai_setup.model.journal import ActionRecord, FileRecord, JournalEntry, PlannedRecord
from ojai_setup.model.state import HandlerRecord, State
from ojai_setup.planning.plan import (
    describe_digest,
    ojai_version,
    path_digest,
    text_digest,
    unified_diff,
)

ROLLBACK_FORCE_COMMAND = "ojai rollback --force"


def new_apply_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)


# -- state file ------------------------------------------------------------------------------
def _write_json(path: Path, text: str, mode: int) -> None:
    write_text(path, text, mode=mode)


def _private_dir(path: Path) -> Path:
    """``path`` (journal, backups), created or brought to owner-only access."""
    ensure_dir(path, PRIVATE_DIR_MODE)
    if stat.S_IMODE(path.stat().st_mode) != PRIVATE_DIR_MODE:
        path.chmod(PRIVATE_DIR_MODE)  # made by an older ojai, or by hand
    return path


def _save_state(directory: Path, state: State) -> None:
    # state.json stays readable by everyone: an unprivileged `ojai doctor` reads its records
    ensure_dir(directory, DIR_MODE)
    _write_json(directory / "state.json", state.model_dump_json(indent=2) + "\n", FILE_MODE)


def load_entry(root: Root, apply_id: str, *, euid: int | None = None) -> JournalEntry:
    """The journal entry of one apply or rollback."""
    path = state_dir(root, euid=euid) / "journal" / f"{apply_id}.json"
    try:
        return JournalEntry.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise JournalError(f"no journal entry {path}") from None
    except ValidationError as exc:
        from ojai_setup.core.problems import problems

        raise JournalError(f"{path}: the journal entry is damaged: {problems(exc.errors())}; "
                           "ojai cannot undo that apply from it") from None
    except (OSError, ValueError) as exc:
        raise JournalError(f"{path}: the journal entry cannot be read "
                           f"({getattr(exc, 'strerror', None) or 'not UTF-8 text'})") from None


# -- writing a journal -----------------------------------------------------------------------
def _copy_synced(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` (0600) through a temp file, fsynced, then renamed into place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    Replacement(dest, suffix=".tmp").commit(copy_of(src), mode=0o600, sync_dir=False)


class Journal:
    """The journal of one apply or rollback while it runs.

    :meth:`open` writes the entry (every planned action, status ``running``) and marks it
    running in ``state.json`` before anything changes; :meth:`stage` backs up a path before a
    change and records it in the entry; :meth:`flush` writes the entry again (fsynced) as each
    action completes; :meth:`close` drops paths that ended up unchanged, along with their
    backups, and updates ``state.json``. A process killed on the way leaves an entry that
    :func:`recover` finishes.
    """

    def __init__(self, root: Root, kind: Literal["apply", "rollback"], *,
                 euid: int | None = None, plan_fingerprint: str | None = None,
                 rolls_back: str | None = None, command: str | None = None) -> None:
        self.root = root
        self.dir = state_dir(root, euid=euid)
        self._state = _load_state(self.dir)
        self.entry = JournalEntry(
            apply_id=new_apply_id(), kind=kind, ojai_version=ojai_version(),
            started=datetime.now(timezone.utc), boot_id=read_boot_id(root),
            plan_fingerprint=plan_fingerprint, previous_apply=self._state.last_apply,
            rolls_back=rolls_back, command=command)
        self._staged: dict[str, FileRecord] = {}
        try:
            ensure_dir(self.dir, DIR_MODE)
            _private_dir(self.dir / "journal")
        except OSError as exc:
            raise JournalError(f"cannot create ojai's journal in {self.dir}: {exc.strerror}") from None

    @property
    def id(self) -> str:
        return self.entry.apply_id

    @property
    def path(self) -> Path:
        return self.dir / "journal" / f"{self.id}.json"

    @property
    def state(self) -> State:
        """``state.json`` as it was when this journal was opened."""
        return self._state

    def open(self, planned: list[PlannedRecord] | None = None) -> None:
        """Write the entry and mark it running in ``state.json``, both fsynced."""
        self.entry.planned = list(planned or [])
        self.flush()
        self._state.running = self.id
        _save_state(self.dir, self._state)
        fsync_dir(self.dir)

    def flush(self) -> None:
        """Write the entry as it is now (temp file, fsync, rename)."""
        try:
            _private_dir(self.path.parent)
            _write_json(self.path, self.entry.model_dump_json(indent=2) + "\n", PRIVATE_FILE_MODE)
        except OSError as exc:
            raise JournalError(f"cannot write ojai's journal {self.path}: {exc.strerror or exc}") from None

    def stage(self, machine_path: str, *, download: bool = False,
              rollback_to: str | None = None) -> None:
        """Remember what is at ``machine_path`` (and back up a regular file) before a change.
        ``download``: the path is a download or an install (a model file, a llama.cpp folder):
        no backup is made of it and rollback keeps it unless asked to remove downloads.
        ``rollback_to``: when the path does not exist, what rollback writes there instead of
        removing what the apply created."""
        if machine_path in self._staged:
            return
        real = self.root.resolve(machine_path)
        before = path_digest(self.root, machine_path)
        record = FileRecord(path=machine_path, existed_before=before is not None, before=before,
                            download=download,
                            made_dirs=_missing_parents(self.root, machine_path),
                            rollback_to=rollback_to if before is None and not download else None)
        if before is not None and before.startswith("sha256:") and not download:
            st = os.lstat(real)
            backup = Path("backups") / self.id / machine_path.lstrip("/")
            dest = self.dir / backup
            _private_dir(self.dir / "backups")
            ensure_dir(dest.parent, PRIVATE_DIR_MODE)
            try:
                _copy_synced(real, dest)  # 0600 before a byte of the original is in it
            except OSError as exc:
                raise JournalError(f"cannot back up {machine_path} into {dest}: "
                                   f"{exc.strerror or exc}") from None
            record.backup = backup.as_posix()
            record.mode, record.uid, record.gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
        self._staged[machine_path] = record
        self.entry.files.append(record)

    def action(self, record: ActionRecord) -> None:
        self.entry.actions.append(record)

    def handler(self, record: HandlerRecord) -> None:
        self.entry.handlers.append(record)

    def reboot(self, reason: str) -> None:
        if reason not in self.entry.reboot:
            self.entry.reboot.append(reason)

    def set_record(self, key: str, value: Any) -> None:
        """Set a state record; the previous value is journaled for rollback."""
        if key not in self.entry.records_before:
            self.entry.records_before[key] = self._state.records.get(key)
        if value is None:
            self._state.records.pop(key, None)
        else:
            self._state.records[key] = json.loads(json.dumps(value))

    def close(self, status: Literal["complete", "failed"], error: str | None = None, *,
              pending_handlers: list[HandlerRecord] | None = None,
              last_apply: str | None = None) -> JournalEntry:
        """Write the entry and ``state.json``.

        ``state.json``'s ``last_apply`` becomes this id when anything changed (or
        ``last_apply`` when given, which a rollback uses to step back in history).
        """
        _settle_files(self.root, self.dir, self.entry)
        self.entry.status = status
        self.entry.error = error
        self.entry.finished = datetime.now(timezone.utc)
        self.entry.owed = list(pending_handlers or []) if status == "failed" else []
        self.flush()
        if last_apply is not None or self.entry.kind == "rollback":
            self._state.last_apply = last_apply
        elif self.entry.changed:
            self._state.last_apply = self.id
        self._state.pending_handlers = list(pending_handlers or [])
        self._state.running = None
        _save_state(self.dir, self._state)
        return self.entry


def _missing_parents(root: Root, machine_path: str) -> list[str]:
    """The folders above ``machine_path`` that do not exist yet, outermost first."""
    from pathlib import PurePosixPath

    missing: list[str] = []
    parent = PurePosixPath(machine_path).parent
    while str(parent) != "/" and not root.resolve(str(parent)).exists():
        missing.insert(0, str(parent))
        parent = parent.parent
    return missing


def _settle_files(root: Root, directory: Path, entry: JournalEntry, *,
                  dry: bool = False) -> None:
    """Record what each staged path is now; forget (and unback, unless ``dry``) those left
    unchanged."""
    kept: list[FileRecord] = []
    for record in entry.files:
        record.after = path_digest(root, record.path)
        if record.after == record.before:
            if record.backup and not dry:
                _drop_backup(directory, directory / record.backup)
            if record.download and record.before is None and _download_traces(root, record) \
                    and record.path not in {t.path for t in entry.traces}:
                entry.traces.append(record)
        else:
            kept.append(record)
    entry.files = kept


def _drop_backup(directory: Path, path: Path) -> None:
    path.unlink(missing_ok=True)
    top = directory / "backups"
    parent = path.parent
    while parent != top and parent.is_relative_to(top):
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


# -- an apply or rollback that was killed ----------------------------------------------------
@dataclass
class Interrupted:
    """What :func:`recover` found and settled."""

    entry: JournalEntry
    owed: list[HandlerRecord]
    cleaned: list[str]

    @property
    def message(self) -> str:
        done = sum(1 for p in self.entry.planned if p.status == "done")
        what = (f"an earlier {'rollback' if self.entry.kind == 'rollback' else 'apply'} "
                f"({self.entry.apply_id}) was interrupted after {done} of "
                f"{len(self.entry.planned)} action(s)")
        if self.owed:
            what += "; follow-up commands still owed: " + ", ".join(
                " ".join(h.argv) for h in self.owed)
        return what


def _temp_leftovers(root: Root, paths: list[str]) -> list[Path]:
    """Temp files a killed write beside ``paths`` may have left (``.NAME.*.ojai-tmp``,
    ``.NAME.ojai-*`` links)."""
    found: list[Path] = []
    for machine_path in paths:
        real = root.resolve(machine_path)
        if not real.parent.is_dir():
            continue
        for pattern in (f".{real.name}.*.ojai-tmp", f".{real.name}.ojai-*"):
            found.extend(p for p in real.parent.glob(pattern) if p.is_file() or p.is_symlink())
    return found


def recover(root: Root, *, euid: int | None = None, dry: bool = False) -> Interrupted | None:
    """Settle an apply or rollback whose process died; call it holding the machine's lock.

    The entry becomes ``interrupted``: each path it staged is recorded as it is now (those
    left unchanged are dropped), the follow-up commands owed by every action that started are
    added to ``state.json``'s pending handlers (the next apply or rollback runs them; a
    rollback's too: the ``systemctl daemon-reload`` after the units it removed, the
    ``limine-update`` after the drop-in), ``last_apply`` points at it when it changed
    something (so ``ojai rollback`` undoes it), and temp files it left beside its targets and
    in the state folder are removed. ``dry``: work out the same without writing or removing
    anything (what a rollback shows for review before the person says yes).
    """
    directory = state_dir(root, euid=euid)
    state = _load_state(directory)
    if state.running is None:
        return None
    try:
        entry = load_entry(root, state.running, euid=euid)
    except JournalError:
        if not dry:
            state.running = None
            _save_state(directory, state)
        return None
    _settle_files(root, directory, entry, dry=dry)
    owed = _owed(entry, state.pending_handlers)
    if dry:
        entry.status = "interrupted"
        return Interrupted(entry=entry, owed=list(owed.values()), cleaned=[])
    targets = [t for p in entry.planned for t in p.targets] + [f.path for f in entry.files]
    cleaned = []
    for leftover in _temp_leftovers(root, targets):
        leftover.unlink(missing_ok=True)
        cleaned.append(root.machine_path(leftover) if not root.is_host else str(leftover))
    for tmp in [*directory.glob(".*.tmp"), *(directory / "journal").glob(".*.tmp")]:
        tmp.unlink(missing_ok=True)
    referenced = {f.backup for f in entry.files if f.backup}
    backups = directory / "backups" / entry.apply_id
    if backups.is_dir():
        for f in sorted(backups.rglob("*"), reverse=True):
            rel = f.relative_to(directory).as_posix()
            if f.is_file() and rel not in referenced:
                f.unlink()
            elif f.is_dir():
                try:
                    f.rmdir()
                except OSError:
                    pass
    entry.status = "interrupted"
    entry.error = entry.error or "the process stopped before the end (killed, or the machine went down)"
    entry.finished = datetime.now(timezone.utc)
    entry.owed = list(owed.values())
    _write_json(directory / "journal" / f"{entry.apply_id}.json",
                entry.model_dump_json(indent=2) + "\n", PRIVATE_FILE_MODE)
    if entry.kind == "apply" and entry.changed:
        state.last_apply = entry.apply_id
    # an interrupted rollback leaves last_apply on the apply it was undoing: run it again
    state.pending_handlers = list(owed.values())
    state.running = None
    _save_state(directory, state)
    return Interrupted(entry=entry, owed=list(owed.values()), cleaned=cleaned)


def _owed(entry: JournalEntry, pending: list[HandlerRecord]) -> dict[str, HandlerRecord]:
    """The follow-up commands an interrupted ``entry`` (its files settled) leaves owed: those
    already pending, and those of every action that changed something; for a rollback, less
    those it ran before it stopped."""
    owed: dict[str, HandlerRecord] = {h.name: h for h in pending}
    for h in entry.owed:
        owed.setdefault(h.name, h)
    changed_paths = {f.path for f in entry.files}
    ran = {h.name for h in entry.handlers if h.exit_code == 0} if entry.kind == "rollback" \
        else set()
    for planned in entry.planned:
        started = planned.status in ("running", "failed") and changed_paths.intersection(planned.targets)
        done = entry.kind == "rollback" and planned.status == "done"
        if started or done or planned.changed:
            for h in planned.notify:
                if h.name not in ran:
                    owed.setdefault(h.name, h.model_copy(update={"exit_code": None}))
    return owed


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
            if record.download and _download_traces(root, record):
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
        owed = list(_owed(journal.entry, journal.state.pending_handlers).values()) if error \
            else None
        journal.close("failed" if error else "complete", error, pending_handlers=owed,
                      last_apply=entry.previous_apply if error is None else entry.apply_id)
    return result


def _download_traces(root: Root, record: FileRecord) -> list[Path]:
    """What a download or install left beside its path (records, partial files, unpack
    staging) and the folders made for it that are still there."""
    from ojai_setup.facts.disk import download_leftovers

    return download_leftovers(root.resolve(record.path)) + [
        root.resolve(d) for d in record.made_dirs if root.resolve(d).is_dir()]


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
