"""One lock per machine: only one ``ojai setup --apply`` or ``ojai rollback`` at a time.

The lock is ``flock(2)`` on ``<state dir>/lock`` (``/var/lib/ojai/lock``); the kernel drops it
when its holder exits, however it exits (``kill -9`` included), so a lock is never stale. The
holder's pid, command and start time are in the file from the moment it holds it, so that a
second one can say who holds it.
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


class MachineLock:
    """``with MachineLock(state_dir, "ojai setup --apply"):`` or :class:`LockHeld`.

    The holder's pid is in the lock file from the moment the lock is taken: a new file with
    the pid, command and start time is written and locked under a temp name, then given the
    name ``lock`` (linked when there is none, renamed over a free one), so the file a second
    process finds locked always names its holder. A free lock file keeps the words of its
    last holder (never read: only a held lock's words are). A process that locked a file that
    has been replaced meanwhile (its inode is no longer ``lock``'s) tries again."""

    def __init__(self, directory: Path, command: str | None = None) -> None:
        self.path = Path(directory) / LOCK_NAME
        self.command = command or " ".join(["ojai", *sys.argv[1:]]) or "ojai"
        self._fd: int | None = None

    def _fresh(self) -> tuple[int, Path]:
        """A new file holding this process's words, locked, under a temp name."""
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        tmp = self.path.with_name(f".{LOCK_NAME}-{os.getpid()}-{os.urandom(4).hex()}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.fchmod(fd, 0o644)
            os.write(fd, f"{os.getpid()}\n{self.command}\n{started}\n".encode())
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else knows this file
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        return fd, tmp

    def _is_named(self, fd: int) -> bool:
        """Whether ``fd`` is the file called ``lock`` now."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino)

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = self._fresh()
        except OSError as exc:
            raise StateError(f"cannot open ojai's lock {self.path}: {exc.strerror}; nothing "
                             f"was changed") from None
        try:
            while True:
                try:
                    os.link(tmp, self.path)  # no lock file yet: this one, words and lock at once
                    break
                except FileExistsError:
                    pass
                try:
                    old = os.open(self.path, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    try:
                        fcntl.flock(old, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        if not self._is_named(old):
                            continue  # replaced meanwhile: look at the new one
                        words = _words(old)
                        raise LockHeld(
                            f"another ojai is changing this machine: {words} holds "
                            f"{self.path}; nothing was changed. Wait for it to finish and run "
                            f"this again.") from None
                    if not self._is_named(old):
                        continue
                    os.replace(tmp, self.path)  # the free file, still locked here, replaced
                    break
                finally:
                    os.close(old)
        except LockHeld:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        except OSError as exc:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise StateError(f"cannot take ojai's lock {self.path}: {exc.strerror}; nothing "
                             f"was changed") from None
        tmp.unlink(missing_ok=True)  # linked: the temp name goes; renamed: already gone
        self._fd = fd
        _forget_dead(self.path)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock; the words stay, unread
            self._fd = None

    def __enter__(self) -> MachineLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _words(fd: int) -> str:
    """What the holder of the lock file open at ``fd`` wrote, as words."""
    try:
        lines = os.pread(fd, 4096, 0).decode("utf-8", "replace").splitlines()
    except OSError:
        lines = []
    if len(lines) >= 3:
        return f"process {lines[0]} (`{lines[1]}`, since {lines[2]})"
    return "another process"


def _forget_dead(path: Path) -> None:
    """Remove the temp lock files of processes that died before they named theirs."""
    for tmp in path.parent.glob(f".{LOCK_NAME}-*-*"):
        try:
            pid = int(tmp.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except PermissionError:
            pass
