"""The long-generation check against a server stand-in that slows down mid-stream."""

from __future__ import annotations

import pytest
from support.stream_stand_in import Pace, stream_stand_in

from ojai_setup.measure.campaign import BenchConfig, Runner, finalize
from ojai_setup.measure.client import Endpoint
from ojai_setup.measure.command import new_result

# streams paced in real time: the fast loop leaves them to CI
pytestmark = pytest.mark.slow


def _long_run(mtp_pace: Pace, plain_pace: Pace, tokens: int = 600, window: int = 50):
    config = BenchConfig(long_tokens=tokens, long_window=window, parts=("long",))
    with stream_stand_in(mtp_pace) as mtp_url, stream_stand_in(plain_pace) as plain_url:
        runner = Runner(Endpoint(mtp_url), Endpoint(plain_url), config)
        result = new_result("stand-in", config)
        return runner.run(result)


def test_a_stream_that_slows_down_is_flagged_where_it_began():
    # 2 ms a token, then 10 ms from token 300 on: a fifth of the throughput
    result = _long_run(Pace(delay=0.002, slow_after=300, slow_delay=0.010), Pace(delay=0.002))
    mtp = result.long.mtp
    assert mtp.tokens == 600 and len(mtp.rates) == 11
    assert mtp.collapse.detected
    # token 300 is the start of window 6; the first slow window is 5 or 6 depending on
    # which side of the boundary the first slow token's arrival lands
    assert mtp.collapse.window in (5, 6)
    assert mtp.rates[-1] < 0.4 * mtp.rates[0]
    assert not result.long.plain.collapse.detected
    assert result.verdict.decision == "do not adopt" and "collapsed" in result.verdict.reason


def test_a_steady_stream_is_not_flagged():
    result = _long_run(Pace(delay=0.002), Pace(delay=0.003))
    assert not result.long.mtp.collapse.detected
    assert result.long.mtp.harness_tps == pytest.approx(result.long.mtp.server_tps, rel=0.1)


def test_below_the_baseline_from_the_start_is_a_collapse():
    result = _long_run(Pace(delay=0.010), Pace(delay=0.002), tokens=300, window=50)
    assert result.long.mtp.collapse.detected and result.long.mtp.collapse.window == 0
    assert "baseline" in result.long.mtp.collapse.reason


def test_caps_end_a_run_early_and_keep_what_finished():
    config = BenchConfig(long_tokens=200, long_window=50, parts=("long",), max_tokens=300)
    with stream_stand_in(Pace()) as url:
        result = Runner(Endpoint(url), Endpoint(url), config).run(new_result("x", config))
    assert result.stopped and "token cap" in result.stopped
    assert result.long.mtp is None  # the second arm would have passed the cap
    finalize(result, config, None)
    assert result.verdict.decision == "inconclusive"
