"""The one signal guard (apply/signals.py) the apply, setup's planning and asking, and rollback
share: real signals sent to this process, in the main thread."""

from __future__ import annotations

import os
import signal

import pytest

from ojai_setup.apply.signals import ApplyInterrupted, SignalGuard


def _send(sig: signal.Signals = signal.SIGTERM) -> None:
    os.kill(os.getpid(), sig)


def test_it_stops_then_holds_and_a_held_signal_stops_after_holding():
    with SignalGuard() as guard:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            _send()
        guard.hold()
        _send(signal.SIGINT)  # held back: no exception here
        assert guard.received == "SIGTERM"
    with SignalGuard() as guard, pytest.raises(KeyboardInterrupt, match="SIGINT"):
        with guard.holding():
            _send(signal.SIGINT)
            assert guard.received == "SIGINT"  # the block ran on


def test_the_apply_s_guard_stops_once_then_holds_until_told_to_stop_again():
    with SignalGuard(ApplyInterrupted, once=True) as guard:
        with pytest.raises(ApplyInterrupted) as first:
            _send(signal.SIGINT)
        assert first.value.signal_name == "SIGINT"
        _send()  # winding down: held
        guard.stop_again()
        with pytest.raises(ApplyInterrupted) as second:
            _send()
        assert second.value.signal_name == "SIGTERM"
        _send()  # held again after the second
    before = signal.getsignal(signal.SIGINT)
    with SignalGuard():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
