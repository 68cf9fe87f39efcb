"""The statistics of a benchmark campaign: pure functions of numbers, no I/O.

- speedups of paired runs: mean, range, standard deviation and a percentile bootstrap
  confidence interval of the mean; a verdict against a threshold;
- acceptance from per-step draft counts: the per-token acceptance ``a`` (maximum likelihood,
  see :func:`acceptance_mle`), the mean accepted length per verification step, per-position
  acceptance rates, and the mean length a set of synthetic rates implies;
- the draft cost ``c`` of the speculative-decoding model from the timings of a pair, and the
  speedup the model predicts (Leviathan et al., 2023): ``S = E / (g*c + 1)`` with
  ``E = (1 - a**(g+1)) / (1 - a)`` (:func:`expected_tokens`);
- throughput over position windows of a long generation and collapse detection;
- the first position where two outputs differ.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict


__all__ = [
    "Collapse",
    "Robust",
    "Summary",
    "Verdict",
    "acceptance_mle",
    "bootstrap_ci",
    "detect_collapse",
    "draft_cost",
    "expected_tokens",
    "first_divergence",
    "implied_mean_length",
    "mean_accepted_length",
    "per_position_rates",
    "predicted_speedup",
    "robust",
    "solve_acceptance",
    "summarize",
    "verdict",
    "window_rates",
]


def expected_tokens(a: float, g: int) -> float:
    if a >= 1.0:
        return g + 1.0
    return (1 - a ** (g + 1)) / (1 - a)


def solve_acceptance(e: float, g: int) -> float:
    """The per-token acceptance ``a`` for which ``expected_tokens(a, g) == e`` (bisection)."""
    if e <= 1.0:
        return 0.0
    if e >= g + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_tokens(mid, g) < e:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Summary(_Frozen):
    """Speedups (MTP tokens/s over plain tokens/s) of the pairs of a campaign."""

    n: int
    mean: float
    sd: float | None  # sample standard deviation; None for fewer than two pairs
    low: float
    high: float
    ci_low: float | None
    ci_high: float | None
    ci_level: float


class Verdict(_Frozen):
    decision: str  # "adopt" | "do not adopt" | "inconclusive"
    reason: str


def bootstrap_ci(values: Sequence[float], *, level: float = 0.95, resamples: int = 4000,
                 seed: int = 0, statistic: str = "mean") -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean (or, with ``statistic="median"``, of the
    median); None for fewer than two values.

    Deterministic for a given ``seed``: the same campaign always reports the same interval.
    """
    n = len(values)
    if n < 2:
        return None
    import numpy as np

    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    samples = data[rng.integers(0, n, size=(resamples, n))]
    means = np.sort(np.median(samples, axis=1) if statistic == "median" else samples.mean(axis=1))
    tail = (1.0 - level) / 2.0
    lo = float(means[max(0, math.floor(tail * resamples))])
    hi = float(means[min(resamples - 1, math.ceil((1.0 - tail) * resamples) - 1)])
    # the resampled means lie within the data; keep float rounding from leaving it
    mn, mx = float(data.min()), float(data.max())
    return min(max(lo, mn), mx), max(min(hi, mx), mn)


def summarize(speedups: Sequence[float], *, level: float = 0.95, seed: int = 0) -> Summary:
    if not speedups:
        raise ValueError("no finished pairs to summarize")
    ci = bootstrap_ci(speedups, level=level, seed=seed)
    return Summary(n=len(speedups), mean=math.fsum(speedups) / len(speedups),
                   sd=statistics.stdev(speedups) if len(speedups) > 1 else None,
                   low=min(speedups), high=max(speedups),
                   ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None, ci_level=level)


def verdict(summary: Summary | None, threshold: float, *, min_pairs: int = 3,
            collapse: str | None = None, arm: str = "MTP") -> Verdict:
    """Adopt when the whole confidence interval of the mean speedup lies above
    ``1 + threshold``; do not adopt when it lies wholly below, or when the long generation
    collapsed; otherwise inconclusive. Fewer than ``min_pairs`` pairs adopt nothing."""
    bar = 1.0 + threshold
    if collapse:
        return Verdict(decision="do not adopt", reason=f"the {arm} arm collapsed in the long generation: {collapse}")
    if summary is None or summary.n < min_pairs:
        n = 0 if summary is None else summary.n
        return Verdict(decision="inconclusive",
                       reason=f"{n} finished pair(s); at least {min_pairs} are needed (a single prompt adopts nothing)")
    assert summary.ci_low is not None and summary.ci_high is not None
    ci = f"{summary.ci_level:.0%} interval {summary.ci_low:.3f}x to {summary.ci_high:.3f}x"
    if summary.ci_low > bar:
        return Verdict(decision="adopt", reason=f"{ci} lies above the threshold {bar:.2f}x")
    if summary.ci_high < bar:
        return Verdict(decision="do not adopt", reason=f"{ci} lies below the threshold {bar:.2f}x")
    return Verdict(decision="inconclusive", reason=f"{ci} contains the threshold {bar:.2f}x; run more pairs")


class Robust(_Frozen):
    """The median speedup of a cell, the pairs far from it (outliers, shown), and the
    bootstrap interval of the mean of the others: a pair spoilt by load (another process took
    the processor for one arm) neither moves the median nor widens the interval."""

    n: int
    median: float
    ci_low: float | None
    ci_high: float | None
    ci_level: float
    #: speedups more than ``OUTLIER_FACTOR`` times off the median (a pair spoilt by load)
    outliers: tuple[float, ...] = ()


#: a pair whose speedup is more than this factor above or below its cell's median is shown as
#: an outlier (it does not move the median)
OUTLIER_FACTOR = 1.5


def robust(speedups: Sequence[float], *, level: float = 0.95, seed: int = 0) -> Robust:
    if not speedups:
        raise ValueError("no finished pairs to summarize")
    med = statistics.median(speedups)
    out = tuple(s for s in speedups if med > 0 and (s > med * OUTLIER_FACTOR or s < med / OUTLIER_FACTOR))
    kept = [s for s in speedups if s not in out]
    ci = bootstrap_ci(kept if len(kept) >= 2 else speedups, level=level, seed=seed)
    return Robust(n=len(speedups), median=med, ci_low=ci[0] if ci else None,
                  ci_high=ci[1] if ci else None, ci_level=level, outliers=out)


# -- acceptance ------------------------------------------------------------------------------

Step = tuple[int, int]  # (tokens drafted, tokens accepted) of one verification step


def acceptance_mle(steps: Sequence[Step]) -> float | None:
    """Per-token acceptance ``a`` of a geometric acceptance model, by maximum likelihood.

    A step that drafted ``d`` tokens and accepted ``k`` contributes ``k`` successes and, when
    ``k < d``, one failure (the first rejection; later drafts are discarded unseen). The
    estimate is successes / (successes + failures); it handles drafts of any length.
    """
    succ = sum(k for _, k in steps)
    fail = sum(1 for d, k in steps if k < d)
    if succ + fail == 0:
        return None
    return succ / (succ + fail)


def mean_accepted_length(steps: Sequence[Step]) -> float | None:
    """Tokens per verification step, the target's own token included (llama-server's
    ``mean len``)."""
    if not steps:
        return None
    return 1.0 + sum(k for _, k in steps) / len(steps)


def per_position_rates(steps: Sequence[Step]) -> list[float]:
    """For draft position ``i`` (0-based): the share of steps that drafted it and accepted it
    (and hence every position before it), the quantity ``--spec-synth-rates`` sets."""
    if not steps:
        return []
    longest = max(d for d, _ in steps)
    rates = []
    for i in range(longest):
        drafted = [k for d, k in steps if d > i]
        rates.append(sum(1 for k in drafted if k > i) / len(drafted))
    return rates


def implied_mean_length(rates: Sequence[float]) -> float:
    """The mean accepted length per step that unconditional per-position acceptance rates
    imply (llama.cpp's ``1 + sum(rates)``)."""
    return 1.0 + math.fsum(rates)


def draft_cost(*, mtp_predicted_n: int, mtp_predicted_ms: float, draft_n: int, draft_n_accepted: int,
               plain_ms_per_token: float) -> float | None:
    """The draft cost ``c`` relative to one main pass, from one pair's timings.

    Every main-model pass of the MTP arm emits one token of its own, so the arm made
    ``passes = predicted_n - draft_n_accepted`` passes, drafting ``draft_n / passes`` tokens
    each on average. The model prices a pass at ``(g*c + 1)`` plain tokens:
    ``c = (ms_per_pass / plain_ms_per_token - 1) / g``.
    """
    passes = mtp_predicted_n - draft_n_accepted
    if passes <= 0 or draft_n <= 0 or plain_ms_per_token <= 0:
        return None
    g = draft_n / passes
    return (mtp_predicted_ms / passes / plain_ms_per_token - 1.0) / g


def predicted_speedup(a: float, g: int, c: float, base: float = 1.0) -> float:
    """``E(a, g) / (base + g*c)``: a drafting pass priced at ``base`` plain tokens plus ``c`` per
    drafted token; ``base`` is 1 in the classic model, more where each pass has a fixed cost of
    its own (see :func:`ojai_setup.measure.tune.fit_model`)."""
    return expected_tokens(a, g) / (g * c + base)


# -- long generations ------------------------------------------------------------------------

def window_rates(times: Sequence[float], window: int) -> list[float]:
    """Tokens/s in consecutive windows of ``window`` tokens.

    ``times[i]`` is when token ``i`` arrived (seconds, non-decreasing). Window ``j`` spans the
    arrivals of tokens ``j*window`` to ``(j+1)*window``; a last partial window is left out.
    """
    if window < 1:
        raise ValueError("window must be at least one token")
    rates = []
    j = 0
    while (j + 1) * window < len(times):
        dt = times[(j + 1) * window] - times[j * window]
        rates.append(window / dt if dt > 0 else math.inf)
        j += 1
    return rates


class Collapse(_Frozen):
    detected: bool
    #: index of the window where the low throughput began
    window: int | None = None
    reference: float | None = None  # tokens/s the collapsed window is compared with
    observed: float | None = None  # tokens/s in that window
    reason: str = ""


def detect_collapse(rates: Sequence[float], baseline: Sequence[float] | None = None, *,
                    ratio: float = 0.5, early: int = 2, persist: int = 2) -> Collapse:
    """Flag throughput that falls far below the arm's own early windows, or below the
    baseline arm at the same position.

    A window is low when its rate is under ``ratio`` times the median of the arm's first
    ``early`` windows (checked from window ``early`` on), or under ``ratio`` times the
    baseline's rate in the same window. A collapse is ``persist`` low windows in a row (or a
    low run that lasts to the end) after which the arm stays down: the median of every window
    from the run's start to the end is also under ``ratio`` times the reference. Its start is
    the first window of that run. A slow spell that recovers (another process on the machine)
    is not a collapse.
    """
    if not rates:
        return Collapse(detected=False, reason="no full window")
    ref = statistics.median(rates[:early]) if len(rates) > early else None
    run_start, run_len = None, 0
    for j, r in enumerate(rates):
        why = None
        if ref is not None and j >= early and r < ratio * ref:
            why = ("own", ref)
        elif baseline is not None and j < len(baseline) and r < ratio * baseline[j]:
            why = ("baseline", baseline[j])
        if why is None:
            run_start, run_len = None, 0
            continue
        if run_start is None:
            run_start, first_why = j, why
        run_len += 1
        if run_len >= persist or j == len(rates) - 1:
            kind, reference = first_why
            if kind == "own":
                refs = [reference] * (len(rates) - run_start)
            else:
                refs = [baseline[i] for i in range(run_start, min(len(rates), len(baseline)))]
            rest = rates[run_start:run_start + len(refs)]
            if statistics.median(r / f for r, f in zip(rest, refs, strict=True)) >= ratio:
                run_start, run_len = None, 0  # it recovered: a slow spell, not a collapse
                continue
            against = "the arm's early windows" if kind == "own" else "the baseline arm"
            observed = rates[run_start]
            return Collapse(detected=True, window=run_start, reference=reference, observed=observed,
                            reason=f"from window {run_start} on, {observed:.1f} tokens/s is under "
                                   f"{ratio:.0%} of {against} ({reference:.1f} tokens/s)")
    return Collapse(detected=False, reason="no window fell below "
                    f"{ratio:.0%} of the early windows or of the baseline")


def first_divergence(a: str | Sequence[int], b: str | Sequence[int]) -> int | None:
    """Index of the first element where ``a`` and ``b`` differ (the shorter length when one is
    a prefix of the other); None when they are identical."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
