"""The one signal guard of the commands that change the machine (``ojai setup --apply``,
``ojai rollback``): SIGINT and SIGTERM end them with a sentence and the lock let go, never
half way through a change. Only in the main thread; elsewhere signals are left alone.

The commands guard planning, looking and asking with it (a signal stops them as Ctrl-C does,
a ``KeyboardInterrupt``) and make it hold signals back once the change starts; the executor
guards the apply itself with its own (:class:`ApplyInterrupted`: the apply stops between
actions, the action under way undone by its executor, and signals are held while it winds
down)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class ApplyInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while an apply ran."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class SignalGuard:
    """While the ``with`` block runs: SIGINT and SIGTERM raise ``interrupt`` (the signal's
    name as its argument) while the guard stops, and are held back (their name kept in
    :attr:`received`) while it holds. With ``once``, the signal that stops it makes it hold
    the next ones until :meth:`stop_again`."""

    def __init__(self, interrupt: Callable[[str], BaseException] = KeyboardInterrupt, *,
                 once: bool = False) -> None:
        self.received: str | None = None
        self._interrupt, self._once = interrupt, once
        self._stops = True
        self._saved: dict[int, Any] = {}

    def _handler(self, signum: int, frame: object) -> None:
        self.received = self.received or signal.Signals(signum).name
        if not self._stops:
            return  # held back: the change has begun and is not stopped half way here
        if self._once:
            self._stops = False
        raise self._interrupt(self.received)

    def hold(self) -> None:
        """From here on (the apply or the restoring starts, or it winds down) a signal is
        held back."""
        self._stops = False

    def stop_again(self) -> None:
        """After a signal: the next one stops what runs now (the follow-ups of the edits
        finished before the first)."""
        self.received, self._stops = None, True

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Hold signals back while the block runs (it settles a journal), then stop if one
        came."""
        self._stops = False
        try:
            yield
        finally:
            self._stops = True
        if self.received:
            raise self._interrupt(self.received)

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()
