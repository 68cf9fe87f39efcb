"""Run a benchmark campaign against two servers: the drafted arm (MTP heads, a draft model,
n-gram drafting; called ``mtp`` in the data, for the saved results' schema) and the plain arm.

1. paired runs: every prompt x seed on both arms, the order alternating (ABBA) to cancel
   drift, both arms given the same prompt, seed, sampling settings and token budget;
2. a long generation per arm, with tokens/s over position windows and collapse detection;
3. k parallel streams on each arm (the drafted route has one slot, the plain route several).

The runner talks to servers that already answer; starting and stopping them is the caller's
business (:mod:`ojai_setup.bench.command`). Caps on time and tokens end a run early, and so
does Ctrl-C: the pairs finished so far are kept and summarised.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ojai_setup.measure import kinds
from ojai_setup.measure.client import Endpoint, Generation, SpecCounters
from ojai_setup.measure.prompts import BUILTIN, LONG_PROMPT, Prompt
from ojai_setup.measure.results import (
    ArmRun,
    BenchResult,
    ConcurrencyPoint,
    ConcurrencyResult,
    LongArm,
    LongResult,
    ModelCheck,
    Pair,
    Scoring,
    Temperature0,
)
from ojai_setup.measure.servers import BenchError, ServerInfo
from ojai_setup.measure.stats import (
    acceptance_mle,
    detect_collapse,
    draft_cost,
    first_divergence,
    implied_mean_length,
    mean_accepted_length,
    per_position_rates,
    predicted_speedup,
    solve_acceptance,
    summarize,
    verdict,
    window_rates,
)

PARTS = ("pairs", "long", "concurrency")


@dataclass
class BenchConfig:
    prompts: tuple[Prompt, ...] = BUILTIN
    seeds: tuple[int, ...] = (1, 2, 3)
    n_predict: int = 512
    #: None leaves the server's own (the route's sampling)
    temperature: float | None = 0.0
    #: top-p / top-k sent with every request; None leaves the server's own (the route's)
    top_p: float | None = None
    top_k: int | None = None
    ignore_eos: bool = False
    template: bool = True
    threshold: float = 0.10
    long_tokens: int = 2000
    long_window: int = 200
    collapse_ratio: float = 0.5
    concurrency: tuple[int, ...] = (1, 2, 4)
    concurrency_tokens: int = 256
    parts: tuple[str, ...] = PARTS
    max_seconds: float = 3600.0
    max_tokens: int = 500_000
    score_command: str | None = None

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "prompts"}
        d["prompts"] = [p.id for p in self.prompts]
        return d


class Observer:
    """What a runner reports while it works; the command line draws it (see report.py)."""

    def arms(self, label: str) -> None:
        """What the drafted arm is called ("MTP", "ngram-simple", ...)."""

    def phase(self, name: str, total: int) -> None: ...
    def advance(self, n: int = 1) -> None: ...
    def pair(self, pair: Pair, done: int, total: int) -> None: ...
    def tokens(self, arm: str, n: int, total: int) -> None: ...
    def note(self, text: str) -> None: ...


class CapReached(Exception):
    pass


@dataclass
class Budget:
    max_seconds: float
    max_tokens: int
    start: float = field(default_factory=time.monotonic)
    tokens: int = 0

    def check(self, upcoming_tokens: int = 0) -> None:
        if time.monotonic() - self.start > self.max_seconds:
            raise CapReached(f"the time cap of {self.max_seconds:.0f} s was reached")
        if self.tokens + upcoming_tokens > self.max_tokens:
            raise CapReached(f"the token cap of {self.max_tokens} tokens would be passed")

    def spend(self, n: int) -> None:
        self.tokens += n


class PlainDrafts(BenchError):
    """The plain arm drafted: it is no baseline."""


def arm_run(arm: str, gen: Generation, counters: SpecCounters | None = None) -> ArmRun:
    """One arm's run; with ``counters`` (the server's ``/metrics`` over this one completion)
    the drafted and accepted counts, the steps and the per-position rates are the server's
    exact ones, else they are inferred from ``timings`` and its streamed counters."""
    dn, acc = gen.draft_n, gen.draft_n_accepted
    run = ArmRun(arm=arm, tokens=gen.n, server_tps=gen.server_tps, harness_tps=gen.harness_tps,
                 predicted_ms=gen.timings.get("predicted_ms"), draft_n=dn, draft_n_accepted=acc,
                 steps=len(gen.steps) or gen.timings.get("spec_verify_ct") or None,
                 rejections=sum(1 for d, k in gen.steps if k < d) if gen.steps else None,
                 accepted_fraction=(acc / dn) if dn else None,
                 # SGLang reports totals only: its accept length is tokens per verification step
                 mean_accepted_length=mean_accepted_length(gen.steps) if gen.steps
                 else gen.timings.get("spec_accept_length"),
                 acceptance=acceptance_mle(gen.steps), position_rates=per_position_rates(gen.steps),
                 counters="timings" if dn else None,
                 stop_type=gen.stop_type, wall_s=gen.wall_s, text=gen.text)
    # the counters are this completion's when they agree with its own timings (nothing else
    # ran on the server meanwhile)
    if counters is not None and counters.drafts > 0 and counters.draft_tokens == (dn or 0) \
            and counters.accepted == (acc or 0):
        steps = counters.drafts
        run.steps = steps
        run.mean_accepted_length = 1.0 + counters.accepted / steps
        run.position_rates = [n / steps for n in counters.per_position]
        width = len(counters.per_position)
        if width and counters.draft_tokens == steps * width:
            # every step drafted the same length: the steps that accepted it all are the last
            # position's count, every other step ended at a rejection
            run.rejections = steps - counters.per_position[-1]
        if run.rejections is not None and counters.accepted + run.rejections:
            run.acceptance = counters.accepted / (counters.accepted + run.rejections)
        run.counters = "metrics"
    return run


def _score(command: str, text: str, prompt_id: str, arm: str) -> tuple[float | None, str | None]:
    """Run the user's scoring command on one output: the text on stdin and in the file named
    by ``$OJAI_BENCH_OUTPUT``; the score is the last line of its standard output, a number or
    ``passed/total``."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(text)
        path = f.name
    try:
        env = {**os.environ, "OJAI_BENCH_OUTPUT": path, "OJAI_BENCH_PROMPT_ID": prompt_id,
               "OJAI_BENCH_ARM": arm}
        done = subprocess.run(["sh", "-c", command], input=text, capture_output=True, text=True,
                              env=env, timeout=600)
    except subprocess.TimeoutExpired:
        return None, "the scoring command ran for more than 600 s"
    finally:
        os.unlink(path)
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        return None, f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-200:]}"
    last = lines[-1]
    try:
        if "/" in last:
            a, b = last.split("/", 1)
            return float(a) / float(b), None
        return float(last), None
    except (ValueError, ZeroDivisionError):
        return None, f"the last line of its output is not a number or passed/total: {last!r}"


class Runner:
    def __init__(self, mtp: Endpoint, plain: Endpoint, config: BenchConfig, *,
                 observer: Observer | None = None, mtp_info: ServerInfo | None = None,
                 plain_info: ServerInfo | None = None) -> None:
        self.mtp, self.plain = mtp, plain
        self.config = config
        self.obs = observer or Observer()
        self.mtp_info, self.plain_info = mtp_info, plain_info
        self.budget = Budget(config.max_seconds, config.max_tokens)
        self._templated: dict[str, str] = {}
        self.label = kinds.label(mtp_info.spec_type if mtp_info else None)
        self._metrics = bool(mtp_info and mtp_info.metrics)
        self.obs.arms(self.label)

    def _prompt_text(self, prompt: Prompt) -> str:
        if not self.config.template:
            return prompt.text
        if prompt.id not in self._templated:
            self._templated[prompt.id] = self.mtp.apply_template(prompt.text) or prompt.text
        return self._templated[prompt.id]

    def sampling(self) -> dict:
        """top-p/top-k for every request, when set (else the server's own)."""
        out: dict = {}
        if self.config.top_p is not None:
            out["top_p"] = self.config.top_p
        if self.config.top_k is not None:
            out["top_k"] = self.config.top_k
        return out

    def _complete(self, endpoint: Endpoint, prompt: Prompt, seed: int, n_predict: int,
                  ignore_eos: bool, on_token=None) -> Generation:
        self.budget.check(n_predict)
        gen = endpoint.complete(self._prompt_text(prompt), n_predict=n_predict, seed=seed,
                                temperature=self.config.temperature, ignore_eos=ignore_eos,
                                extra=self.sampling(), on_token=on_token)
        self.budget.spend(gen.n)
        if endpoint is self.plain and gen.draft_n:
            self.refuse_plain(f"its completion drafted {gen.draft_n} tokens "
                              f"({gen.draft_n_accepted or 0} accepted)")
        return gen

    def refuse_plain(self, why: str) -> None:
        raise PlainDrafts(f"the plain arm ({self.plain.url}) is not plain: {why}. A baseline "
                          "must not draft: start it with --spec-type none (or without a draft "
                          "model and n-gram drafting), or give another server with --plain-url")

    # -- 1. paired runs ------------------------------------------------------------------------
    def run_pair(self, index: int, prompt: Prompt, seed: int) -> Pair:
        cfg = self.config
        order = ("mtp", "plain") if index % 2 == 0 else ("plain", "mtp")
        runs: dict[str, ArmRun] = {}
        for arm in order:
            endpoint = self.mtp if arm == "mtp" else self.plain
            before = endpoint.metrics() if arm == "mtp" and self._metrics else None
            gen = self._complete(endpoint, prompt, seed, cfg.n_predict, cfg.ignore_eos)
            after = endpoint.metrics() if before is not None else None
            runs[arm] = arm_run(arm, gen, after.minus(before) if after is not None else None)
        mtp, plain = runs["mtp"], runs["plain"]
        if cfg.score_command:
            for run in (mtp, plain):
                run.score, run.score_error = _score(cfg.score_command, run.text, prompt.id, run.arm)
        speedup = (mtp.server_tps / plain.server_tps) if mtp.server_tps and plain.server_tps else None
        pair = Pair(prompt_id=prompt.id, seed=seed, order=",".join(order), mtp=mtp, plain=plain,
                    speedup=speedup,
                    truncated=mtp.stop_type == "limit" and plain.stop_type == "limit")
        if cfg.temperature == 0:
            pair.first_divergence = first_divergence(mtp.text, plain.text)
            pair.identical = pair.first_divergence is None
        if mtp.draft_n and mtp.predicted_ms and plain.predicted_ms and plain.tokens:
            pair.draft_cost = draft_cost(mtp_predicted_n=mtp.tokens, mtp_predicted_ms=mtp.predicted_ms,
                                         draft_n=mtp.draft_n, draft_n_accepted=mtp.draft_n_accepted or 0,
                                         plain_ms_per_token=plain.predicted_ms / plain.tokens)
        return pair

    def run_pairs(self, result: BenchResult) -> None:
        cfg = self.config
        work = [(p, s) for s in cfg.seeds for p in cfg.prompts]
        self.obs.phase("paired runs", len(work))
        for i, (prompt, seed) in enumerate(work):
            pair = self.run_pair(i, prompt, seed)
            result.pairs.append(pair)
            self.obs.advance()
            self.obs.pair(pair, i + 1, len(work))

    # -- 2. long generation --------------------------------------------------------------------
    def run_long(self, result: BenchResult) -> None:
        cfg = self.config
        result.long = LongResult(prompt_id=LONG_PROMPT.id)
        self.obs.phase("long generation", 2 * cfg.long_tokens)
        gens: dict[str, Generation] = {}
        for arm in ("mtp", "plain"):
            endpoint = self.mtp if arm == "mtp" else self.plain
            seen = [0]

            def on_token(gen: Generation, arm=arm, seen=seen) -> None:
                n = len(gen.token_times)
                if n - seen[0] >= 50:
                    self.obs.advance(n - seen[0])
                    seen[0] = n
                    self.obs.tokens(arm, n, cfg.long_tokens)

            gens[arm] = self._complete(endpoint, LONG_PROMPT, 1, cfg.long_tokens, True, on_token)
            self.obs.advance(len(gens[arm].token_times) - seen[0])
        plain_rates = window_rates(gens["plain"].token_times, cfg.long_window)
        for arm, gen in gens.items():
            rates = window_rates(gen.token_times, cfg.long_window)
            collapse = detect_collapse(rates, plain_rates if arm == "mtp" else None,
                                       ratio=cfg.collapse_ratio)
            setattr(result.long, arm, LongArm(
                arm=arm, tokens=gen.n, window=cfg.long_window, rates=rates,
                server_tps=gen.server_tps, harness_tps=gen.harness_tps,
                mean_accepted_length=mean_accepted_length(gen.steps), collapse=collapse))

    # -- 3. concurrency ------------------------------------------------------------------------
    def _parallel(self, endpoint: Endpoint, k: int) -> list[Generation]:
        cfg = self.config
        self.budget.check(k * cfg.concurrency_tokens)
        out: list[Generation | BaseException] = [None] * k  # type: ignore[list-item]
        prompts = [cfg.prompts[i % len(cfg.prompts)] for i in range(k)]
        texts = [self._prompt_text(p) for p in prompts]

        def work(i: int) -> None:
            try:
                out[i] = endpoint.complete(texts[i], n_predict=cfg.concurrency_tokens, seed=i + 1,
                                           temperature=cfg.temperature, ignore_eos=True,
                                           extra=self.sampling())
            except BaseException as exc:  # reported below, in the calling thread
                out[i] = exc

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
        for o in out:
            if isinstance(o, BaseException):
                raise o
        gens: list[Generation] = out  # type: ignore[assignment]
        self.budget.spend(sum(g.n for g in gens))
        return gens

    def run_concurrency(self, result: BenchResult) -> None:
        cfg = self.config
        result.concurrency = conc = ConcurrencyResult()
        self.obs.phase("concurrency", 2 * len(cfg.concurrency))
        for j, k in enumerate(cfg.concurrency):
            order = ("mtp", "plain") if j % 2 == 0 else ("plain", "mtp")
            for arm in order:
                endpoint = self.mtp if arm == "mtp" else self.plain
                info = self.mtp_info if arm == "mtp" else self.plain_info
                gens = self._parallel(endpoint, k)
                start = min(g.started for g in gens)
                end = max(g.started + g.wall_s for g in gens)
                tokens = sum(g.n for g in gens)
                server = [g.server_tps for g in gens if g.server_tps]
                conc.points.append(ConcurrencyPoint(
                    arm=arm, k=k, slots=info.slots if info else None, tokens=tokens,
                    wall_s=end - start, aggregate_tps=tokens / (end - start),
                    per_stream_server_tps=statistics.fmean(server) if server else None,
                    per_stream_end_to_end_tps=statistics.fmean(g.n / g.wall_s for g in gens)))
                self.obs.advance()
        by = {(p.arm, p.k): p for p in conc.points}
        for k in cfg.concurrency:
            m, p = by.get(("mtp", k)), by.get(("plain", k))
            if m and p and p.aggregate_tps >= m.aggregate_tps:
                conc.inversion_k = k
                conc.note = (f"at k = {k} parallel streams the plain route ({p.aggregate_tps:.1f} tokens/s "
                             f"in all) matches or beats the {self.label} route ({m.aggregate_tps:.1f})")
                break
        else:
            conc.note = f"{self.label} stayed ahead at every tested concurrency"

    # -- the whole campaign --------------------------------------------------------------------
    def check_plain(self) -> None:
        """Refuse a plain arm whose slots draft (``/slots`` says so) before anything runs."""
        if self.plain.speculative_slots():
            self.refuse_plain("its /slots say its slots draft (\"speculative\": true)")

    def run(self, result: BenchResult) -> BenchResult:
        steps = {"pairs": self.run_pairs, "long": self.run_long, "concurrency": self.run_concurrency}
        self.check_plain()
        result.kind = self.mtp_info.spec_type if self.mtp_info else None
        try:
            for part in PARTS:
                if part in self.config.parts:
                    steps[part](result)
        except CapReached as exc:
            result.stopped = str(exc)
            self.obs.note(f"stopped early: {exc}; the finished work is kept")
        except KeyboardInterrupt:
            result.interrupted = True
            result.stopped = "interrupted (Ctrl-C)"
            self.obs.note("interrupted: the finished pairs are kept")
        finalize(result, self.config, self.mtp_info)
        return result


def finalize(result: BenchResult, config: BenchConfig, mtp_info: ServerInfo | None) -> None:
    """Summary, verdict, model check, temperature-0 and scoring figures from the pairs."""
    result.finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
    speedups = [p.speedup for p in result.pairs if p.speedup is not None]
    result.summary = summarize(speedups) if speedups else None
    collapse = None
    if result.long and result.long.mtp and result.long.mtp.collapse.detected:
        collapse = result.long.mtp.collapse.reason
    result.verdict = verdict(result.summary, config.threshold, collapse=collapse,
                             arm=kinds.label(mtp_info.spec_type if mtp_info else None))

    steps_mtp = [p.mtp for p in result.pairs if p.mtp.draft_n]
    g = mtp_info.draft_n_max if mtp_info and mtp_info.draft_n_max else None
    if steps_mtp:
        g = g or max((len(r.position_rates) for r in steps_mtp), default=None)
        succ = sum(r.draft_n_accepted or 0 for r in steps_mtp)
        n_steps = sum(r.steps or 0 for r in steps_mtp)
        drafted = sum(r.draft_n or 0 for r in steps_mtp)
        # pooled maximum-likelihood a over every step of every pair
        fails = sum(r.rejections or 0 for r in steps_mtp)
        a = succ / (succ + fails) if n_steps and succ + fails else None
        mean_len = 1 + succ / n_steps if n_steps else None
        if a is None and mean_len and g:
            a = solve_acceptance(mean_len, g)
        costs = [p.draft_cost for p in result.pairs if p.draft_cost is not None]
        c = statistics.median(costs) if costs else None
        rates: list[float] = []
        weights = [r.steps or 0 for r in steps_mtp]
        width = max(len(r.position_rates) for r in steps_mtp)
        for i in range(width):
            num = sum(r.position_rates[i] * w for r, w in zip(steps_mtp, weights, strict=True) if len(r.position_rates) > i)
            den = sum(w for r, w in zip(steps_mtp, weights, strict=True) if len(r.position_rates) > i)
            rates.append(num / den if den else 0.0)
        if c is not None and g:
            for p in result.pairs:
                a_pair = p.mtp.acceptance
                if a_pair is None and p.mtp.mean_accepted_length:
                    a_pair = solve_acceptance(p.mtp.mean_accepted_length, g)
                if a_pair is not None:
                    p.predicted_speedup = predicted_speedup(a_pair, g, c)
        synth = mtp_info.synthetic_rates if mtp_info else None
        sources = sorted({r.counters for r in steps_mtp if r.counters})
        spec_type = mtp_info.spec_type if mtp_info else None
        ngram = kinds.is_ngram(spec_type)
        if ngram:  # no geometric model: drafts come from matches in the text, not a head
            for p in result.pairs:
                p.predicted_speedup = None
        result.model = ModelCheck(
            kind="none" if ngram else "geometric", counters=" and ".join(sources) or None,
            note=("n-gram drafting: the acceptance model is not predictive (drafts come only where "
                  "the text repeats, at lengths the matches set), so no speedup is predicted")
            if ngram else "",
            draft_n_max=g, acceptance=a, accepted_fraction=succ / drafted if drafted else None,
            mean_accepted_length=mean_len, position_rates=rates,
            implied_mean_length=implied_mean_length(synth) if synth else None, draft_cost=c,
            predicted_speedup=predicted_speedup(a, g, c)
            if a is not None and c is not None and g and not ngram else None,
            measured_speedup=result.summary.mean if result.summary else None)

    if config.temperature == 0 and result.pairs:
        result.temperature0 = Temperature0(
            compared=len(result.pairs), identical=sum(1 for p in result.pairs if p.identical),
            truncated_both=sum(1 for p in result.pairs if p.truncated),
            divergences=[p.first_divergence for p in result.pairs])
    if config.score_command and result.pairs:
        scored = [p for p in result.pairs if p.mtp.score is not None and p.plain.score is not None]
        result.scoring = Scoring(
            command=config.score_command, scored_pairs=len(scored),
            differing_pairs=sum(1 for p in scored if p.mtp.score != p.plain.score),
            mtp_mean=statistics.fmean(p.mtp.score for p in scored) if scored else None,
            plain_mean=statistics.fmean(p.plain.score for p in scored) if scored else None)
