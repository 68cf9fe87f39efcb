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

from ojai_setup.core.atomic import ensure_dir, write_text
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
            ensure_dir(self.dir, DIR_MODE)
            _private_dir(self.dir / "journal")
        except OSError as exc:
            raise JournalError(f"cannot create ojai's journal in {self.dir}: {exc.strerror}") from None

    @property
    def id(self) -> str:
        return self.entry.apply_id

    @property
    def state(self) -> State:
        """``state.json`` as it was when this journal was opened."""
        return self._state

    def stage(self, machine_path: str) -> None:
        """Remember what is at ``machine_path`` (and back up a regular file) before a change."""
        if machine_path in self._staged:
            return
        real = self.root.resolve(machine_path)
        before = path_digest(self.root, machine_path)
        record = FileRecord(path=machine_path, existed_before=before is not None, before=before)
        if before is not None and before.startswith("sha256:"):
            st = os.lstat(real)
            backup = Path("backups") / self.id / machine_path.lstrip("/")
            dest = self.dir / backup
            _private_dir(self.dir / "backups")
            ensure_dir(dest.parent, PRIVATE_DIR_MODE)
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                         PRIVATE_FILE_MODE)
            os.fchmod(fd, PRIVATE_FILE_MODE)  # before a byte of the original is in it
            with os.fdopen(fd, "wb") as out, open(real, "rb") as src:
                shutil.copyfileobj(src, out)
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
        _write_json(_private_dir(self.dir / "journal") / f"{self.id}.json",
                    self.entry.model_dump_json(indent=2) + "\n", PRIVATE_FILE_MODE)
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
        return "; ".join(parts)


def rollback(root: Root, progress: Progress, *, force: bool = False,
             euid: int | None = None) -> RollbackResult:
    """Put back what the last apply changed, and journal it as a rollback.

    Files that existed are restored from their backup (content, mode, owner), links are
    pointed back at their old target, and files and links the apply created are removed.
    Folders an install created and files too large to back up are left in place and named in
    :attr:`RollbackResult.left`. The handlers the apply ran (``update-grub``) run again.
    Refuses (:class:`RollbackError`, nothing restored) when a path changed after the apply,
    unless ``force``. Repeated rollbacks walk back through earlier applies.
    """
    directory = state_dir(root, euid=euid)
    state = _load_state(directory)
    if state.last_apply is None:
        hint = ""
        if directory != root.resolve(STATE_DIR) and _load_state(root.resolve(STATE_DIR)).last_apply:
            hint = "; the last apply was made as root: run `sudo ojai rollback`"
        raise RollbackError(f"nothing to roll back: no apply is journaled in {directory}{hint}")
    entry = load_entry(root, state.last_apply, euid=euid)

    conflicts = []
    for record in entry.files:
        now = path_digest(root, record.path)
        if now != record.after:
            conflicts.append(f"{record.path} changed since apply {entry.apply_id} "
                             f"(it was left as {describe_digest(record.after)}, "
                             f"now it is {describe_digest(now)})")
    if conflicts and not force:
        raise RollbackError("; ".join(conflicts) + "; nothing was restored. Look at the "
                            f"change, then run `{ROLLBACK_FORCE_COMMAND}` to restore anyway")

    journal = Journal(root, "rollback", euid=euid, rolls_back=entry.apply_id)
    result = RollbackResult(rolled_back=entry.apply_id, journal_id=journal.id)
    task = progress.task(f"roll back apply {entry.apply_id}", total=len(entry.files))
    error: str | None = None
    try:
        for record in reversed(entry.files):
            journal.stage(record.path)
            _restore(root, directory, record, result)
            task.advance(1)
        for key, value in entry.records_before.items():
            journal.set_record(key, value)
        if result.restored or result.removed:
            for handler in entry.handlers:
                run = root.run(list(handler.argv), env=handler.env or None, timeout=900)
                journal.handler(HandlerRecord(name=handler.name, argv=handler.argv,
                                              env=handler.env, exit_code=run.exit_code))
                if not run.ok:
                    raise RollbackError(f"`{' '.join(handler.argv)}` failed with exit code "
                                        f"{run.exit_code} after the files were restored: "
                                        f"{run.stderr.strip()[-500:]}")
                result.handlers.append(handler.name)
            result.reboot = list(entry.reboot)
            for reason in entry.reboot:
                journal.reboot(reason)
    except BaseException as exc:
        error = str(exc) or type(exc).__name__
        raise
    finally:
        task.done()
        journal.close("failed" if error else "complete", error,
                      last_apply=entry.previous_apply if error is None else state.last_apply)
    return result


def _restore(root: Root, directory: Path, record: FileRecord, result: RollbackResult) -> None:
    real = root.resolve(record.path)
    before = record.before
    if before is None:
        now = path_digest(root, record.path)
        if now is None:
            return
        if now.startswith(("sha256:", "symlink:")):
            real.unlink()
            result.removed.append(record.path)
        else:
            result.left.append(f"{record.path} (created by the apply; remove it by hand "
                               f"if it is not wanted)")
        return
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
    if record.backup is None:
        result.left.append(f"{record.path} (was {describe_digest(before)}; no backup is kept "
                           f"of this kind of path)")
        return
    ensure_dir(real.parent, DIR_MODE)
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
