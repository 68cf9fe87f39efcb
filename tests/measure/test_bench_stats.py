"""The statistics of ojai bench, property-tested against known distributions."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ojai_setup.measure.stats import (
    acceptance_mle,
    bootstrap_ci,
    detect_collapse,
    draft_cost,
    expected_tokens,
    first_divergence,
    implied_mean_length,
    mean_accepted_length,
    per_position_rates,
    predicted_speedup,
    summarize,
    verdict,
    window_rates,
)

speedups = st.lists(st.floats(min_value=0.2, max_value=5.0, allow_nan=False), min_size=2, max_size=30)


@settings(deadline=None)
@given(speedups)
def test_summary_matches_its_definitions(values):
    s = summarize(values)
    assert s.n == len(values)
    assert s.mean == pytest.approx(statistics.fmean(values))
    assert s.sd == pytest.approx(statistics.stdev(values))
    assert s.low == min(values) and s.high == max(values)
    assert s.low <= s.ci_low <= s.ci_high <= s.high
    assert s.ci_low <= s.mean + 1e-9 and s.mean - 1e-9 <= s.ci_high


@settings(deadline=None)
@given(speedups, st.integers(0, 1000))
def test_bootstrap_is_deterministic_per_seed(values, seed):
    assert bootstrap_ci(values, seed=seed) == bootstrap_ci(values, seed=seed)


def test_bootstrap_interval_covers_the_true_mean_about_as_often_as_it_says():
    rng = random.Random(7)
    true_mean, hits, trials = 1.4, 0, 300
    for t in range(trials):
        sample = [rng.gauss(true_mean, 0.1) for _ in range(15)]
        lo, hi = bootstrap_ci(sample, resamples=1000, seed=t)
        hits += lo <= true_mean <= hi
    # a percentile bootstrap at n=15 under-covers a little; 95 % nominal
    assert 0.87 <= hits / trials <= 0.99


def test_bootstrap_interval_narrows_with_more_pairs():
    rng = random.Random(3)
    small = [rng.gauss(1.5, 0.1) for _ in range(5)]
    large = small + [rng.gauss(1.5, 0.1) for _ in range(95)]
    lo_s, hi_s = bootstrap_ci(small)
    lo_l, hi_l = bootstrap_ci(large)
    assert hi_l - lo_l < hi_s - lo_s


@settings(deadline=None)
@given(st.floats(min_value=0.5, max_value=3.0), st.floats(min_value=0.0, max_value=0.5))
def test_verdict_follows_the_interval(centre, threshold):
    rng = random.Random(1)
    tight = [centre + rng.uniform(-0.001, 0.001) for _ in range(10)]
    v = verdict(summarize(tight), threshold)
    bar = 1 + threshold
    if centre > bar + 0.01:
        assert v.decision == "adopt"
    elif centre < bar - 0.01:
        assert v.decision == "do not adopt"
    assert f"{bar:.2f}x" in v.reason


def test_verdict_needs_pairs_and_no_collapse():
    assert verdict(summarize([2.0, 2.1]), 0.1).decision == "inconclusive"
    assert verdict(None, 0.1).decision == "inconclusive"
    assert verdict(summarize([1.9, 2.0, 2.1]), 0.1).decision == "adopt"
    wide = verdict(summarize([0.5, 1.1, 2.0, 0.6, 1.9]), 0.1)
    assert wide.decision == "inconclusive" and "contains" in wide.reason
    collapsed = verdict(summarize([1.9, 2.0, 2.1]), 0.1, collapse="from window 3 on")
    assert collapsed.decision == "do not adopt" and "collapsed" in collapsed.reason


def _geometric_steps(a: float, g: int, n: int, seed: int) -> list[tuple[int, int]]:
    """Steps of a geometric acceptance: each drafted token accepted with probability a until
    the first rejection, at most g."""
    rng = np.random.default_rng(seed)
    k = np.minimum(g, rng.geometric(1 - a, size=n) - 1)
    return [(g, int(x)) for x in k]


@settings(max_examples=30, deadline=None)
@given(st.floats(min_value=0.05, max_value=0.95), st.integers(1, 8), st.integers(0, 10_000))
def test_acceptance_mle_recovers_a_known_acceptance(a, g, seed):
    steps = _geometric_steps(a, g, 4000, seed)
    assert acceptance_mle(steps) == pytest.approx(a, abs=0.03)
    # the mean accepted length is the model's E at that a
    assert mean_accepted_length(steps) == pytest.approx(expected_tokens(a, g), rel=0.04)


def test_acceptance_mle_handles_short_drafts_and_edges():
    assert acceptance_mle([]) is None
    assert acceptance_mle([(3, 3), (3, 3)]) == 1.0
    assert acceptance_mle([(3, 0), (2, 0)]) == 0.0
    # a draft cut short and fully accepted has no rejection: 3 successes, 1 failure
    assert acceptance_mle([(1, 1), (3, 2)]) == pytest.approx(3 / 4)


def _synthetic_steps(rates: list[float], n: int, seed: int) -> list[tuple[int, int]]:
    """llama-server's --spec-synth-rates: position i is accepted with probability
    rates[i] / rates[i-1] once every position before it was."""
    rng = np.random.default_rng(seed)
    prev = np.concatenate([[1.0], rates[:-1]])
    cond = np.divide(rates, prev, out=np.zeros(len(rates)), where=prev > 0)
    passed = rng.random((n, len(rates))) < cond
    k = np.where(passed.all(axis=1), len(rates), np.argmin(passed, axis=1))
    return [(len(rates), int(x)) for x in k]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=6), st.integers(0, 10_000))
def test_position_rates_recover_synthetic_rates(raw, seed):
    rates = sorted(raw, reverse=True)
    steps = _synthetic_steps(rates, 4000, seed)
    measured = per_position_rates(steps)
    assert len(measured) == len(rates)
    for got, rate in zip(measured, rates, strict=True):  # each a share of 4000: five standard errors
        assert got == pytest.approx(rate, abs=5 * np.sqrt(rate * (1 - rate) / len(steps))
                                    + 1 / len(steps))
    # the mean length is what the measured rates imply, exactly; and the true rates' within the
    # sampling error of a mean of 4000 steps: five standard errors of the accepted count, whose
    # variance the true rates give (P(k > i) = rates[i], so E[k^2] = sum (2i + 1) rates[i])
    assert mean_accepted_length(steps) == pytest.approx(implied_mean_length(measured), abs=1e-9)
    mean = sum(rates)
    variance = sum((2 * i + 1) * r for i, r in enumerate(rates)) - mean ** 2
    spread = 5 * np.sqrt(max(variance, 0.0) / len(steps)) + 1 / len(steps)
    assert mean_accepted_length(steps) == pytest.approx(implied_mean_length(rates), abs=spread)


@settings(deadline=None)
@given(st.floats(min_value=1.0, max_value=100.0), st.integers(1, 8), st.floats(min_value=0.0, max_value=1.0),
       st.integers(50, 5000), st.floats(min_value=0.0, max_value=0.95))
def test_draft_cost_is_recovered_from_timings_the_model_would_produce(ms, g, c, passes, accept):
    accepted = int(passes * g * accept)
    n = passes + accepted
    mtp_ms = passes * ms * (1 + g * c)
    got = draft_cost(mtp_predicted_n=n, mtp_predicted_ms=mtp_ms, draft_n=passes * g,
                     draft_n_accepted=accepted, plain_ms_per_token=ms)
    assert got == pytest.approx(c, abs=1e-9)
    assert draft_cost(mtp_predicted_n=5, mtp_predicted_ms=1, draft_n=0, draft_n_accepted=0,
                      plain_ms_per_token=1) is None


def test_predicted_speedup_is_the_model():
    assert predicted_speedup(0.0, 3, 0.0) == 1.0
    assert predicted_speedup(1.0, 3, 0.1) == pytest.approx(4 / 1.3)


@settings(deadline=None)
@given(st.floats(min_value=1.0, max_value=1000.0), st.integers(1, 50), st.integers(2, 40))
def test_window_rates_of_a_steady_stream(rate, window, windows):
    times = [i / rate for i in range(window * windows + 1)]
    got = window_rates(times, window)
    assert len(got) == windows
    assert got == pytest.approx([rate] * windows)


def _rates_with_drop(n: int, at: int, factor: float, base: float = 100.0) -> list[float]:
    return [base if i < at else base * factor for i in range(n)]


@settings(deadline=None)
@given(st.integers(6, 30), st.data())
def test_a_sustained_drop_is_a_collapse_from_where_it_began(n, data):
    at = data.draw(st.integers(2, n - 2))
    factor = data.draw(st.floats(min_value=0.05, max_value=0.45))
    c = detect_collapse(_rates_with_drop(n, at, factor))
    assert c.detected and c.window == at
    assert c.observed == pytest.approx(100 * factor)


@settings(deadline=None)
@given(st.integers(6, 30), st.data())
def test_noise_and_single_dips_are_not_collapses(n, data):
    rng = random.Random(data.draw(st.integers(0, 1000)))
    rates = [100 * rng.uniform(0.8, 1.2) for _ in range(n)]
    dip = data.draw(st.integers(2, n - 2))
    rates[dip] = 30.0  # one slow window: another process on the machine
    assert not detect_collapse(rates).detected


def test_collapse_against_the_baseline_from_the_first_window():
    # the seed's Vulkan case: a fifth of the baseline from early on, steady to the end
    mtp = [6.5] * 10
    plain = [29.3] * 10
    c = detect_collapse(mtp, plain)
    assert c.detected and c.window == 0 and "baseline" in c.reason
    assert not detect_collapse([20.0] * 10, plain).detected
    assert not detect_collapse([], plain).detected


@settings(deadline=None)
@given(st.text(max_size=50), st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_first_divergence(prefix, x, y):
    assert first_divergence(prefix, prefix) is None
    if x[0] != y[0]:
        assert first_divergence(prefix + x, prefix + y) == len(prefix)
    assert first_divergence(prefix, prefix + x) == len(prefix)


def test_a_slow_spell_that_recovers_is_not_a_collapse():
    rates = [100.0] * 4 + [20.0] * 3 + [100.0] * 8
    assert not detect_collapse(rates).detected
    # down for good, with one short recovery on the way: it began at the first drop
    mostly_low = [100.0] * 4 + [20.0] * 3 + [100.0] * 2 + [20.0] * 6
    c = detect_collapse(mostly_low)
    assert c.detected and c.window == 4
