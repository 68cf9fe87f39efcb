"""The signal guards of the commands that change the machine (``ojai setup --apply``,
``ojai rollback``): SIGINT and SIGTERM end them with a sentence and the lock let go, never
half way through a change. Only in the main thread; elsewhere signals are left alone.

:class:`StopOnSignal` covers planning, looking and asking (a signal stops it as Ctrl-C does)
and holds signals back once the change starts; :class:`ApplySignals` covers the apply itself
(a signal stops it between actions, the action under way undone by its executor)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class ApplyInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while an apply ran."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class StopOnSignal:
    """While ojai plans or asks before an apply or a rollback: SIGTERM stops it as Ctrl-C
    does (a KeyboardInterrupt), so that it ends with a sentence and the lock let go, not
    silently; :attr:`received` names the signal. The apply itself handles both on its own
    (:class:`ojai_setup.apply.executor.ApplyInterrupted`). Only in the main thread."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._armed = True
        self._saved: dict[int, Any] = {}

    def _handler(self, signum: int, frame: object) -> None:
        self.received = self.received or signal.Signals(signum).name
        if self._armed:
            raise KeyboardInterrupt(self.received)
        # held back: the apply or the restoring has begun and is not stopped half way here

    def disarm(self) -> None:
        """From here on (the apply or the restoring starts) a signal is held back."""
        self._armed = False

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Hold signals back while the block runs (it settles a journal), then stop if one
        came."""
        self._armed = False
        try:
            yield
        finally:
            self._armed = True
        if self.received:
            raise KeyboardInterrupt(self.received)

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()


class ApplySignals:
    """While an apply runs: SIGINT and SIGTERM stop it with :class:`ApplyInterrupted` (the
    action under way is undone by its executor, temp file removed); a second signal while the
    apply winds down (the journal closed, the report made) is held back rather than
    interrupting that, except while the follow-ups of the finished edits run after the first
    (:meth:`second_stops`). Only in the main thread; elsewhere signals are left alone."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._saved: dict[int, Any] = {}

    def _handler(self, signum: int, frame: object) -> None:
        if self.received is not None:
            return  # winding down: the first signal is being handled
        self.received = signal.Signals(signum).name
        raise ApplyInterrupted(self.received)

    def __enter__(self) -> ApplySignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handler)
        return self

    def winding_down(self) -> None:
        """From here on a signal no longer interrupts (the first one was or was not seen)."""
        if self.received is None:
            self.received = ""

    def second_stops(self) -> None:
        """After the first signal: the next one stops what runs now (:class:`ApplyInterrupted`)."""
        self.received = None

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()
