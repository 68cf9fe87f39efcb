"""An upgrade of llama.cpp proves the new build before ``current`` switches to it.

When a build is already ``current`` and routes run it, installing another build (a newer
nightly, ``--llamacpp-tag NEW``, another source ref) puts it in its own versioned folder beside
the current one and leaves the link alone; then, at apply time, for one route of each model:

1. the correctness gate (:mod:`ojai_setup.domain.gate`): the route on the NEW build against
   the CURRENT build's CPU backend on the same file (the build in use is the proven one, and
   a new build whose own CPU backend went wrong would pass against itself);
2. a paired speed check: the route on the new build and on the current build, started side by
   side, given the same prompts in alternating order (the bench runner's pairs), the new
   build's tokens per second over the current's; and in the same run the current build
   against itself (the same prompts twice), whose spread is the noise of the measurement.

``current`` switches only when every route passes the gate and none is slower than
``1 - max(max_loss, noise)`` with the 95 % interval of its pairs wholly below 1 (:data:`MAX_LOSS`;
a loss the run cannot tell from its own noise is no loss), unless the owner accepted a loss (``--accept-slower``). A refused build stays in its
folder for inspection (the next plan proposes it again, and its install is then a no-op);
the old build stays for ``ojai rollback`` either way.

This module holds the figures and the decision; it runs nothing (the run is
:mod:`ojai_setup.commands.upgrade`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from ojai_setup.domain.gate import GateFigures

#: a new build may be at most this much slower (tokens per second, median of the pairs) than
#: the current one before the upgrade is refused, unless the run's own noise is larger
MAX_LOSS = 0.05

#: tokens each speed request generates (the end of the text ignored, so every request makes
#: as many tokens on both builds)
SPEED_TOKENS = 128

#: the bench's built-in prompts the speed check uses (their ids), one request per build each
SPEED_PROMPTS = ("lru-cache", "sql-report", "bash-backup", "explain-tcp")


class SpeedFigures(BaseModel):
    """New against current on one route, and current against itself in the same run."""

    model_config = ConfigDict(frozen=True)

    pairs: int
    #: the median of the pairs' new/current tokens per second
    ratio: float
    #: the 95 % bootstrap interval of that (None with fewer than two pairs)
    ci_low: float | None = None
    ci_high: float | None = None
    #: the median of |1 - a/b| over the current build's pairs against itself
    noise: float
    max_loss: float = MAX_LOSS
    current_tps: float | None = None
    new_tps: float | None = None

    @property
    def bar(self) -> float:
        """The lowest ratio that is not a loss: the threshold, or the noise when larger."""
        return 1.0 - max(self.max_loss, self.noise)

    @property
    def slower(self) -> bool:
        """A loss: the median ratio below :attr:`bar`, and the interval of the ratios wholly
        below 1 (a run whose own pairs straddle parity has not shown a loss)."""
        return self.ratio < self.bar and (self.ci_high is None or self.ci_high < 1.0)

    def sentence(self) -> str:
        ci = (f" (95 % interval {self.ci_low:.3f}x to {self.ci_high:.3f}x)"
              if self.ci_low is not None and self.ci_high is not None else "")
        tps = (f", {self.new_tps:.1f} against {self.current_tps:.1f} tokens/s"
               if self.new_tps and self.current_tps else "")
        return (f"speed {self.ratio:.3f}x the current build's over {self.pairs} paired "
                f"requests{ci}{tps}; noise {self.noise * 100:.1f} % (the current build against "
                f"itself in the same run); a loss counts below {self.bar:.3f}x "
                f"(threshold {self.max_loss * 100:.0f} %, or the noise when larger) with the "
                "interval wholly below 1x")


def speed_figures(ratios: Sequence[float], noise_ratios: Sequence[float], *,
                  ci: tuple[float, float] | None = None, max_loss: float = MAX_LOSS,
                  current_tps: float | None = None, new_tps: float | None = None) -> SpeedFigures:
    """The figures from the pairs' new/current ratios and the current/current ones (``ci``:
    the interval of the ratios, as the bench's statistics give it)."""
    if not ratios or not noise_ratios:
        raise ValueError("the speed check needs at least one pair of each kind")
    return SpeedFigures(pairs=len(ratios), ratio=statistics.median(ratios),
                        ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None,
                        noise=statistics.median(abs(1.0 - r) for r in noise_ratios),
                        max_loss=max_loss, current_tps=current_tps, new_tps=new_tps)


class RouteProof(BaseModel):
    """One route's figures on the new build (or why there are none)."""

    route: str
    gate: GateFigures | None = None
    gate_error: str | None = None
    gate_finding: str | None = None
    speed: SpeedFigures | None = None
    speed_error: str | None = None
    #: why the route was not compared (it runs another binary than the current build)
    skipped: str | None = None

    def problem(self, accept_slower: bool) -> str | None:
        """Why this route refuses the new build, or None."""
        if self.skipped:
            return None
        if self.gate is None:
            return f"route {self.route}: the correctness gate could not run: {self.gate_error}"
        if not self.gate.passed:
            return (f"route {self.route}: the new build does not compute what the current "
                    f"build's CPU backend computes ({self.gate.sentence()})")
        if self.speed is None:
            return f"route {self.route}: the speed check could not run: {self.speed_error}"
        if self.speed.slower and not accept_slower:
            return f"route {self.route}: the new build is slower: {self.speed.sentence()}"
        return None

    def lines(self) -> list[str]:
        if self.skipped:
            return [f"{self.route}: not compared ({self.skipped})"]
        out = [f"{self.route}: gate " + (self.gate.sentence() + f": {self.gate.verdict}"
                                         if self.gate else f"not run: {self.gate_error}")]
        if self.speed is not None:
            out.append(f"{self.route}: {self.speed.sentence()}")
        elif self.speed_error:
            out.append(f"{self.route}: speed not measured: {self.speed_error}")
        return out


class Proof(BaseModel):
    """What an upgrade's check found, and whether ``current`` switches."""

    candidate: str  # the new build's folder (machine path)
    current: str  # the folder current names now (machine path)
    build: str | None = None  # the new binary's version line
    backend: str | None = None  # its backend (install record), when known
    routes: list[RouteProof] = []
    accept_slower: bool = False

    def problems(self) -> list[str]:
        return [p for r in self.routes if (p := r.problem(self.accept_slower))]

    @property
    def compared(self) -> list[RouteProof]:
        return [r for r in self.routes if not r.skipped]

    @property
    def adopted(self) -> bool:
        return not self.problems()

    def accepted_losses(self) -> list[RouteProof]:
        return [r for r in self.compared if r.speed is not None and r.speed.slower]

    def finding(self) -> str:
        """The refusal: build, backend, the figures, where each build is and what to do."""
        what = (f"the new llama.cpp build in {self.candidate} (build {self.build or 'unknown'}, "
                f"backend {self.backend or 'unknown'})")
        return (f"{what} was not adopted: " + "; ".join(self.problems()) + ". current still "
                f"points to {self.current}; the new build is kept in {self.candidate} for "
                "inspection (the next `ojai setup` proposes it again). To serve a build that is "
                "correct but slower, apply with --accept-slower; to stay on this build, pin it "
                "(--llamacpp-tag or --llamacpp-ref).")

    def summary(self) -> str:
        figures = "; ".join(line for r in self.routes for line in r.lines())
        if not self.compared:
            return (f"no route runs the current build, so nothing was compared: current now "
                    f"points to {self.candidate}" + (f" ({figures})" if figures else ""))
        accepted = self.accepted_losses()
        note = (f" (a loss accepted with --accept-slower on "
                f"{', '.join(r.route for r in accepted)})" if accepted else "")
        return (f"the new build passed the gate and the speed check{note}: {figures}; current "
                f"now points to {self.candidate}, the old build stays in {self.current} for "
                "`ojai rollback`")


def routes_to_compare(records: Mapping[str, object]) -> dict[str, str]:
    """One llama-server route of each model from the routes' records (``state.json``): route
    name -> its launch script. The plain route of a model where it has one (drafting does not
    change what the model computes, and the gate turns it off), else its first; SGLang and
    embedding routes are left out (no llama-server build, no next-token distributions)."""
    by_model: dict[str, list[tuple[str, dict[str, object]]]] = {}
    for name, rec in sorted(records.items()):
        if not isinstance(rec, dict) or not rec.get("script") or rec.get("server") == "sglang" \
                or rec.get("embedding") or "flm_tag" in rec:
            continue
        by_model.setdefault(str(rec.get("model") or name), []).append((name, rec))
    chosen: dict[str, str] = {}
    for routes in by_model.values():
        plain = [r for r in routes if (r[1].get("spec_type") or "none") == "none"]
        name, rec = (plain or routes)[0]
        chosen[name] = str(rec["script"])
    return chosen


def plan_sentence(routes: Sequence[str], *, max_loss: float, accept_slower: bool) -> str:
    """What the plan says an upgrade will compare before ``current`` switches."""
    speed = ("a loss of speed is accepted (--accept-slower)" if accept_slower else
             f"refused if it is more than {max_loss * 100:.0f} % slower (or than the run's own "
             "noise, when larger)")
    return (f"before current switches, routes {', '.join(routes)} run on the new build: the "
            "correctness gate against the current build's CPU backend, then a paired speed "
            f"check against the current build; {speed}; a refused build is kept in its folder "
            "and current stays")
