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
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ojai_setup.core.atomic import write_text
from ojai_setup.core.digest import sha256_file
from ojai_setup.core.errors import StateError
from ojai_setup.core.paths import STATE_DIR
from ojai_setup.core.progress import Progress
from ojai_setup.core.root import Root
from ojai_setup.facts.state import JournalError, _load_state, read_boot_id, state_dir
from ojai_setup.model.state import (
    ActionRecord,
    FileRecord,
    HandlerRecord,
    JournalEntry,
    State,
)
from ojai_setup.planning.plan import describe_digest, ojai_version, path_digest

ROLLBACK_FORCE_COMMAND = "ojai rollback --force"


def new_apply_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)


# -- state file ------------------------------------------------------------------------------
def _write_json(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text, mode=0o644)


def _save_state(directory: Path, state: State) -> None:
    _write_json(directory / "state.json", state.model_dump_json(indent=2) + "\n")


def record_state(root: Root, key: str, value: Any, *, euid: int | None = None) -> None:
    """Set ``records[key]`` in ``state.json`` (``value`` None removes it)."""
    directory = state_dir(root, euid=euid)
    state = _load_state(directory)
    if value is None:
        state.records.pop(key, None)
    else:
        state.records[key] = json.loads(json.dumps(value))
    _save_state(directory, state)


def load_entry(root: Root, apply_id: str, *, euid: int | None = None) -> JournalEntry:
    """The journal entry of one apply or rollback."""
    path = state_dir(root, euid=euid) / "journal" / f"{apply_id}.json"
    try:
        return JournalEntry.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise JournalError(f"no journal entry {path}") from None
    except (OSError, ValueError, ValidationError) as exc:
        raise JournalError(f"{path} is unreadable or damaged ({exc})") from None


# -- writing a journal -----------------------------------------------------------------------
class Journal:
    """The journal of one apply or rollback while it runs.

    Call :meth:`stage` for every path before anything touches it (it remembers what was there
    and copies a regular file into the backups), :meth:`close` at the end: paths that ended up
    unchanged are dropped along with their backups, the entry is written, and ``state.json``
    is updated.
    """

    def __init__(self, root: Root, kind: Literal["apply", "rollback"], *,
                 euid: int | None = None, plan_fingerprint: str | None = None,
                 rolls_back: str | None = None) -> None:
        self.root = root
        self.dir = state_dir(root, euid=euid)
        self._state = _load_state(self.dir)
        self.entry = JournalEntry(
            apply_id=new_apply_id(), kind=kind, ojai_version=ojai_version(),
            started=datetime.now(timezone.utc), boot_id=read_boot_id(root),
            plan_fingerprint=plan_fingerprint, previous_apply=self._state.last_apply,
            rolls_back=rolls_back)
        self._staged: dict[str, FileRecord] = {}
        try:
            (self.dir / "journal").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JournalError(f"cannot create ojai's journal in {self.dir}: {exc.strerror}") from None

    @property
    def id(self) -> str:
        return self.entry.apply_id

    @property
    def state(self) -> State:
        """``state.json`` as it was when this journal was opened."""
        return self._state

    def stage(self, machine_path: str, *, download: bool = False) -> None:
        """Remember what is at ``machine_path`` (and back up a regular file) before a change.
        ``download``: the path is a download or install (kept by rollback unless asked)."""
        if machine_path in self._staged:
            return
        real = self.root.resolve(machine_path)
        before = path_digest(self.root, machine_path)
        record = FileRecord(path=machine_path, existed_before=before is not None, before=before,
                            download=download)
        if before is not None and before.startswith("sha256:") and not download:
            st = os.lstat(real)
            backup = Path("backups") / self.id / machine_path.lstrip("/")
            dest = self.dir / backup
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(real, dest, follow_symlinks=False)
            os.chmod(dest, 0o600)
            record.backup = backup.as_posix()
            record.mode, record.uid, record.gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
        self._staged[machine_path] = record

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
        for path, record in self._staged.items():
            record.after = path_digest(self.root, path)
            if record.after == record.before:
                if record.backup:
                    self._drop_backup(self.dir / record.backup)
            else:
                self.entry.files.append(record)
        self.entry.status = status
        self.entry.error = error
        self.entry.finished = datetime.now(timezone.utc)
        _write_json(self.dir / "journal" / f"{self.id}.json",
                    self.entry.model_dump_json(indent=2) + "\n")
        if last_apply is not None or self.entry.kind == "rollback":
            self._state.last_apply = last_apply
        elif self.entry.changed:
            self._state.last_apply = self.id
        self._state.pending_handlers = list(pending_handlers or [])
        _save_state(self.dir, self._state)
        return self.entry

    def _drop_backup(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        top = self.dir / "backups"
        parent = path.parent
        while parent != top and parent.is_relative_to(top):
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent


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
    reboot: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        parts = [f"rolled back apply {self.rolled_back}"]
        if self.restored:
            parts.append("restored " + ", ".join(self.restored))
        if self.removed:
            parts.append("removed " + ", ".join(self.removed))
        if self.handlers:
            parts.append("ran " + ", ".join(self.handlers))
        if self.left:
            parts.append("left in place: " + "; ".join(self.left))
        if self.reboot:
            parts.append("reboot to make the restored settings active: " + "; ".join(self.reboot))
        return "; ".join(parts)


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

    def of(self, decision: RollbackDecision) -> list[FileRecord]:
        return [r for r, d, _ in self.items if d == decision]

    def diffs(self, root: Root) -> list[str]:
        """Unified diffs from what is there now to what rollback puts back (text files)."""
        import difflib

        out = []
        for record, decision, _ in self.items:
            if decision != "restore" or record.backup is None:
                continue
            backup = self.directory / record.backup
            real = root.resolve(record.path)
            try:
                if backup.stat().st_size > DIFF_LIMIT or (
                        real.is_file() and real.stat().st_size > DIFF_LIMIT):
                    continue
                old = backup.read_text(encoding="utf-8")
                now = real.read_text(encoding="utf-8") if real.is_file() else ""
            except (OSError, UnicodeDecodeError):
                continue
            diff = "".join(difflib.unified_diff(
                now.splitlines(keepends=True), old.splitlines(keepends=True),
                fromfile=f"{record.path} (now)", tofile=f"{record.path} (restored)"))
            if diff:
                out.append(diff if diff.endswith("\n") else diff + "\n")
        return out


def _decide(root: Root, record: FileRecord, remove_downloads: bool
            ) -> tuple[RollbackDecision, str]:
    now = path_digest(root, record.path)
    kept = "downloaded or installed by the apply; `ojai rollback --remove-downloads` removes it"
    if record.before is None:
        if now is None:
            return "none", "already gone"
        if record.download and not remove_downloads:
            return "keep", kept
        if now.startswith(("sha256:", "symlink:")) or (now == "directory" and record.download):
            return "remove", "created by the apply"
        return "keep", "created by the apply; remove it by hand if it is not wanted"
    if record.before.startswith("symlink:"):
        return "restore", f"back to {describe_digest(record.before)}"
    if record.backup is None:
        if record.download and not remove_downloads:
            return "keep", kept
        return "keep", (f"was {describe_digest(record.before)}; no backup is kept of this kind "
                        "of path")
    return "restore", "from its backup"


def preview_rollback(root: Root, *, remove_downloads: bool = False,
                     euid: int | None = None) -> RollbackPreview:
    """What a rollback of the last apply would restore, remove and keep, the follow-up
    commands it would run and whether a reboot follows. Raises :class:`RollbackError` when
    there is nothing to roll back."""
    directory = state_dir(root, euid=euid)
    state = _load_state(directory)
    if state.last_apply is None:
        hint = ""
        if directory != root.resolve(STATE_DIR) and _load_state(root.resolve(STATE_DIR)).last_apply:
            hint = "; the last apply was made as root: run `sudo ojai rollback`"
        raise RollbackError(f"nothing to roll back: no apply is journaled in {directory}{hint}")
    entry = load_entry(root, state.last_apply, euid=euid)
    preview = RollbackPreview(entry=entry, directory=directory)
    for record in reversed(entry.files):
        now = path_digest(root, record.path)
        if now != record.after:
            preview.conflicts.append(f"{record.path} changed since apply {entry.apply_id} "
                                     f"(it was left as {describe_digest(record.after)}, "
                                     f"now it is {describe_digest(now)})")
        decision, why = _decide(root, record, remove_downloads)
        preview.items.append((record, decision, why))
    # the follow-ups (update-grub, the initramfs) and the reboot belong to the settings that
    # are put back, not to downloads
    if any(not r.download for r, d, _ in preview.items if d in ("restore", "remove")):
        preview.handlers = list(entry.handlers)
        preview.reboot = list(entry.reboot)
    return preview


def rollback(root: Root, progress: Progress, *, force: bool = False,
             remove_downloads: bool = False, euid: int | None = None,
             preview: RollbackPreview | None = None) -> RollbackResult:
    """Put back what the last apply changed, and journal it as a rollback.

    Files that existed are restored from their backup (content, mode, owner), links are
    pointed back at their old target, and files and links the apply created are removed.
    Downloads and installs (model files, llama.cpp folders) stay unless ``remove_downloads``;
    other folders an install created and files without a backup are left in place too, named
    in :attr:`RollbackResult.left`. The follow-up commands the apply ran (``update-grub``, the
    initramfs) run again for what was restored, and :attr:`RollbackResult.reboot` says why a
    reboot is needed. Refuses (:class:`RollbackError`, nothing restored) when a path changed
    after the apply, unless ``force``. Repeated rollbacks walk back through earlier applies.
    ``preview``: the one a person reviewed (:func:`preview_rollback`).
    """
    if preview is None:
        preview = preview_rollback(root, remove_downloads=remove_downloads, euid=euid)
    entry, directory = preview.entry, preview.directory
    if preview.conflicts and not force:
        raise RollbackError("; ".join(preview.conflicts) + "; nothing was restored. Look at the "
                            f"change, then run `{ROLLBACK_FORCE_COMMAND}` to restore anyway")

    last_apply = _load_state(directory).last_apply
    if last_apply != entry.apply_id:
        raise RollbackError(f"the last apply is now {last_apply}, not {entry.apply_id}; "
                            "nothing was restored: run `ojai rollback` again and review it")
    journal = Journal(root, "rollback", euid=euid, rolls_back=entry.apply_id)
    result = RollbackResult(rolled_back=entry.apply_id, journal_id=journal.id)
    task = progress.task(f"roll back apply {entry.apply_id}", total=len(preview.items))
    error: str | None = None
    try:
        for record, decision, why in preview.items:
            if decision == "keep":
                result.left.append(f"{record.path} ({why})")
            elif decision == "remove":
                journal.stage(record.path, download=record.download)
                _remove(root, record, result)
            elif decision == "restore":
                journal.stage(record.path)
                _restore(root, directory, record, result)
            task.advance(1)
        for key, value in entry.records_before.items():
            journal.set_record(key, value)
        for handler in preview.handlers:
            run = root.run(list(handler.argv), env=handler.env or None, timeout=900)
            journal.handler(HandlerRecord(name=handler.name, argv=handler.argv,
                                          env=handler.env, exit_code=run.exit_code))
            if not run.ok:
                raise RollbackError(f"`{' '.join(handler.argv)}` failed with exit code "
                                    f"{run.exit_code} after the files were restored: "
                                    f"{run.stderr.strip()[-500:]}")
            result.handlers.append(handler.name)
        result.reboot = list(preview.reboot)
        for reason in preview.reboot:
            journal.reboot(reason)
    except BaseException as exc:
        error = str(exc) or type(exc).__name__
        raise
    finally:
        task.done()
        journal.close("failed" if error else "complete", error,
                      last_apply=entry.previous_apply if error is None else last_apply)
    return result


def _remove(root: Root, record: FileRecord, result: RollbackResult) -> None:
    real = root.resolve(record.path)
    if real.is_dir() and not real.is_symlink():
        shutil.rmtree(real)
    else:
        real.unlink(missing_ok=True)
    result.removed.append(record.path)


def _restore(root: Root, directory: Path, record: FileRecord, result: RollbackResult) -> None:
    real = root.resolve(record.path)
    before = record.before
    assert before is not None
    if before.startswith("symlink:"):
        tmp = real.parent / f".{real.name}.ojai-{secrets.token_hex(4)}"
        os.symlink(before[len("symlink:"):], tmp)
        try:
            os.replace(tmp, real)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        result.restored.append(record.path)
        return
    if record.backup is None:  # _decide keeps these
        raise RollbackError(f"no backup of {record.path}")
    real.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".ojai-tmp")
    os.close(fd)
    try:
        shutil.copyfile(directory / record.backup, tmp)
        if record.mode is not None:
            os.chmod(tmp, record.mode)
        if record.uid is not None and record.gid is not None:
            st = os.stat(tmp)
            if (st.st_uid, st.st_gid) != (record.uid, record.gid):
                os.chown(tmp, record.uid, record.gid)
        if "sha256:" + sha256_file(Path(tmp)) != before:
            raise RollbackError(f"the backup of {record.path} in {directory / record.backup} "
                                f"does not match its journal entry; {record.path} was left as is")
        os.replace(tmp, real)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    result.restored.append(record.path)
