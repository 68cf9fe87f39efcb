"""ojai's own state on a machine: ``state.json`` read through the root (the apply layer writes it)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from ojai_setup.core.errors import StateError
from ojai_setup.core.paths import BOOT_ID, STATE_DIR
from ojai_setup.core.root import Root
from ojai_setup.model.state import State

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
    path = directory / "state.json"
    try:
        return State.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return State()
    except (OSError, ValueError, ValidationError) as exc:
        raise JournalError(f"{path} is unreadable or damaged ({exc}); move it aside to start "
                           f"a fresh ojai state") from None


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
                 pending_handlers=mine.pending_handlers)
