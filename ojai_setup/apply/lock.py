"""One lock per machine: only one ``ojai setup --apply`` or ``ojai rollback`` at a time.

The lock is ``flock(2)`` on ``<state dir>/lock`` (``/var/lib/ojai/lock``); the kernel drops it
when its holder exits, however it exits (``kill -9`` included), so a lock is never stale. The
holder writes its pid, command and start time into the file so that a second one can say who
holds it.
"""

from __future__ import annotations

import fcntl
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from ojai_setup.core.errors import StateError

LOCK_NAME = "lock"


class LockHeld(StateError):
    """Another ojai process holds the machine's lock; nothing was changed."""


def holder(path: Path) -> str:
    """Who holds the lock at ``path``, as words (from what the holder wrote)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    if len(lines) >= 3:
        return f"process {lines[0]} (`{lines[1]}`, since {lines[2]})"
    return "another process"


class MachineLock:
    """``with MachineLock(state_dir, "ojai setup --apply"):`` or :class:`LockHeld`."""

    def __init__(self, directory: Path, command: str | None = None) -> None:
        self.path = Path(directory) / LOCK_NAME
        self.command = command or " ".join(["ojai", *sys.argv[1:]]) or "ojai"
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StateError(f"cannot open ojai's lock {self.path}: {exc.strerror}; nothing "
                             f"was changed") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockHeld(f"another ojai is changing this machine: {holder(self.path)} holds "
                           f"{self.path}; nothing was changed. Wait for it to finish and run "
                           f"this again.") from None
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{self.command}\n{started}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                os.close(self._fd)  # closing drops the flock
                self._fd = None

    def __enter__(self) -> MachineLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
