"""ojai's own state on a machine: ``state.json`` read through the root (the apply layer writes it)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from pydantic import ValidationError

from ojai_setup.core.errors import StateError
from ojai_setup.core.paths import BOOT_ID, STATE_DIR
from ojai_setup.core.root import Root
from ojai_setup.model.state import ApplyStatus, State

#: where ojai keeps its state on a machine




def state_dir(root: Root, *, euid: int | None = None) -> Path:
    """The real directory holding backups, journal and state for ``root``.

    The machine's ``/var/lib/ojai``, except for an unprivileged user on the host itself, whose
    applies (of plans that need no root) are journaled in ``$XDG_STATE_HOME/ojai``
    (``~/.local/state/ojai``).
    """
    if root.is_host and (os.geteuid() if euid is None else euid) != 0:
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(base) / "ojai"
    return root.resolve(STATE_DIR)


def read_boot_id(root: Root) -> str | None:
    """The machine's current boot id, or None when it cannot be read."""
    try:
        return root.resolve(BOOT_ID).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


class JournalError(StateError):
    """The journal or state file cannot be read or written."""


def _load_state(directory: Path) -> State:
    import json

    from ojai_setup.core.problems import json_problem, problems

    path = directory / "state.json"
    aside = (f"move it aside (`mv {shlex.quote(str(path))} {shlex.quote(str(path))}.damaged`) "
             "to start a fresh ojai state; rollback then knows no earlier apply")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return State()
    except PermissionError:
        raise JournalError(f"{path}: cannot be read by this user (permission denied); run "
                           "ojai as the user who owns it, or with sudo") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise JournalError(f"{path}: cannot be read ({why}); "
                           f"{aside}") from None
    try:
        return State.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        raise JournalError(f"{path}: ojai's state {json_problem(exc)}; {aside}") from None
    except ValidationError as exc:
        raise JournalError(f"{path}: ojai's state is damaged: {problems(exc.errors())}; "
                           f"{aside}") from None


def read_state(root: Root, *, euid: int | None = None) -> State:
    """ojai's state for ``root``.

    On the host, for an unprivileged user, the system's records come first and the user's
    own (from their unprivileged applies) are laid over them.
    """
    own = state_dir(root, euid=euid)
    system = root.resolve(STATE_DIR)
    if own == system:
        return _load_state(own)
    merged = _load_state(system)
    mine = _load_state(own)
    return State(last_apply=mine.last_apply or merged.last_apply,
                 records={**merged.records, **mine.records},
                 pending_handlers=mine.pending_handlers, running=mine.running)


def lock_is_held(directory: Path) -> bool:
    """Whether a process holds ojai's lock in ``directory`` now (read access is enough)."""
    import fcntl

    try:
        fd = os.open(directory / "lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


#: what an install into ojai's llama.cpp folder leaves when it is stopped half way
_INSTALL_LEFTOVERS = (".*.unpack", ".*.zip", ".*.zip.part", ".*.old", ".*.build-*")


def install_leftovers(root: Root) -> list[str]:
    """Machine paths of what an interrupted nightly unpack or source build left in
    ``/opt/ojai/llama.cpp`` (none while one runs: call it when no apply holds the lock)."""
    from ojai_setup.core.paths import LLAMACPP_DIR

    base = root.resolve(LLAMACPP_DIR)
    if not base.is_dir():
        return []
    found = {p for pattern in _INSTALL_LEFTOVERS for p in base.glob(pattern)}
    return sorted(f"{LLAMACPP_DIR}/{p.name}" for p in found)


def _last_apply_command(journal: Path, look_at: int = 20) -> str | None:
    """The ``ojai setup ... --apply`` command the newest apply journaled in ``journal``
    recorded (entries are named by their start time), or None."""
    from ojai_setup.model.journal import JournalEntry

    try:
        newest = sorted(journal.glob("*.json"), reverse=True)[:look_at]
    except OSError:
        return None
    for path in newest:
        try:
            entry = JournalEntry.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, ValidationError):
            continue
        if entry.kind == "apply":
            return entry.command
    return None


def _is_as_staged(root: Root, machine_path: str, before: str | None) -> bool:
    """Whether ``machine_path`` is still what a journal staged as its ``before``."""
    from ojai_setup.core.digest import sha256_file

    real = root.resolve(machine_path)
    if before is None:
        return not os.path.lexists(real)
    if before.startswith("symlink:"):
        return real.is_symlink() and os.readlink(real) == before.removeprefix("symlink:")
    if before.startswith("sha256:"):
        try:
            return not real.is_symlink() and real.is_file() and \
                "sha256:" + sha256_file(real) == before
        except OSError:
            return False
    return before == "directory" and real.is_dir() and not real.is_symlink()


def read_apply_status(root: Root, *, euid: int | None = None,
                      locked: bool = False) -> ApplyStatus:
    """Whether an apply is under way, was interrupted, or left follow-up commands owed (the
    machine's own state first, so that a user sees what an apply as root left). ``locked``:
    this process holds the machine's lock, so an apply marked running was interrupted."""
    directory = root.resolve(STATE_DIR)
    state = _load_state(directory)
    own = state_dir(root, euid=euid)
    if own != directory and state.running is None and not state.pending_handlers:
        directory, state = own, _load_state(own)
    status = ApplyStatus(last_apply=state.last_apply,
                         owed=[shlex.join(h.argv) for h in state.pending_handlers],
                         leftovers=install_leftovers(root))
    if state.running is None:
        if status.owed or status.leftovers:
            status.command = _last_apply_command(directory / "journal")
        return status
    status.running = not locked and lock_is_held(directory)
    status.interrupted = None if status.running else state.running
    from ojai_setup.model.journal import JournalEntry  # only an apply under way has one

    try:
        entry = JournalEntry.model_validate_json(
            (directory / "journal" / f"{state.running}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError):
        return status
    status.kind = entry.kind
    status.command = entry.command if entry.kind == "apply" else \
        _last_apply_command(directory / "journal")
    status.total = len(entry.planned)
    status.done = sum(1 for p in entry.planned if p.status == "done")
    owed = {h.name: h for h in state.pending_handlers}
    for h in entry.owed:
        owed.setdefault(h.name, h)
    # a rollback owes the follow-ups of what it put back or removed, less those it ran
    ran = {h.name for h in entry.handlers if h.exit_code == 0} if entry.kind == "rollback" \
        else set()
    staged = {f.path: f.before for f in entry.files}
    for p in entry.planned:
        if entry.kind == "rollback" and p.status == "running" and all(
                t in staged and _is_as_staged(root, t, staged[t]) for t in p.targets):
            continue  # stopped before it changed its path: nothing owed for it
        if p.status in ("running", "failed") or p.changed or (
                entry.kind == "rollback" and p.status == "done"):
            for h in p.notify:
                if h.name not in ran:
                    owed.setdefault(h.name, h)
    status.owed = [shlex.join(h.argv) for h in owed.values()]
    return status
