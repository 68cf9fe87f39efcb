"""Backups, the apply journal, ojai's state file, and the recovery of a killed apply or
rollback; rollback itself is :mod:`ojai_setup.apply.rollback`.

Layout, under the machine's ``/var/lib/ojai`` (see :func:`state_dir`)::

    backups/<apply-id>/<machine path>   originals of the files an apply changed
    journal/<apply-id>.json             what an apply (or rollback) did, file by file
    state.json                          the last apply id and records steps keep

An apply id sorts by time: ``20261014T101500Z-3fa2c1``. A journal entry lists, for every path
that changed, what was there before and after (:func:`ojai_setup.planning.plan.path_digest` strings:
``sha256:<hex>``, ``symlink:<target>``, ``directory``, or null for absent), whether it existed,
and where its backup is. The boot id of the machine at apply time is kept so that a check can
tell "applied, reboot pending" from "rebooted, still not active"."""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ojai_setup.core.atomic import (
    Replacement,
    copy_of,
    ensure_dir,
    fsync_dir,
    write_text,
)
from ojai_setup.core.paths import (
    DIR_MODE,
    FILE_MODE,
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
)
from ojai_setup.core.root import Root
from ojai_setup.facts.state import JournalError, _load_state, read_boot_id, state_dir
from ojai_setup.model.journal import ActionRecord, FileRecord, JournalEntry, PlannedRecord
from ojai_setup.model.state import HandlerRecord, State
from ojai_setup.planning.plan import ojai_version, path_digest


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
            if record.download and record.before is None and download_traces(root, record) \
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
    owed = owed_follow_ups(entry, state.pending_handlers)
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


def owed_follow_ups(entry: JournalEntry, pending: list[HandlerRecord]) -> dict[str, HandlerRecord]:
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


def download_traces(root: Root, record: FileRecord) -> list[Path]:
    """What a download or install left beside its path (records, partial files, unpack
    staging) and the folders made for it that are still there."""
    from ojai_setup.facts.disk import download_leftovers

    return download_leftovers(root.resolve(record.path)) + [
        root.resolve(d) for d in record.made_dirs if root.resolve(d).is_dir()]


