"""``ojai tune ROUTE``: choose the draft length from measurement, and write it through the plan.

For each llama-server build (backend) asked for, the tuner

1. sweeps ``--spec-draft-n-max`` over the lengths (1..8 by default): for each, it starts the
   route's MTP server from its launch script with that length (on a free port of 127.0.0.1)
   and runs short paired runs against the plain route with ``ojai bench``'s machinery;
2. estimates the per-token acceptance ``a`` (pooled over every step of every length) and the
   draft cost ``c`` (least squares over every pair), and predicts the speedup of each length
   with ``S = (1 - a**(g+1)) / ((1 - a)(g*c + 1))``; it stops early once two lengths past the
   best measured one are clearly worse and the model agrees that longer drafts only lose;
3. runs the long generation at the best length: a backend whose MTP arm collapses is marked
   unsafe for MTP and never chosen; then confirms the best length with a longer paired run.

The choice (the safe backend with the best confirmed speedup) is written to
``/etc/ojai/tuned.toml`` (:mod:`ojai_setup.tuning`), which ``ojai setup`` lays over the
catalog. Progress is saved after every length (``/var/lib/ojai/tune/<route>.json``): a run cut
short by Ctrl-C or the time cap resumes where it stopped when started again with the same
settings.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from ojai_setup.core.atomic import write_text
from ojai_setup.commands.bench.campaign import BenchConfig, Budget, CapReached, Observer, Runner, finalize
from ojai_setup.commands.bench.client import Endpoint
from ojai_setup.commands.bench.command import RouteArm, _bring_up, check_route_pair, find_routes, new_result
from ojai_setup.commands.bench.results import BenchResult, Pair
from ojai_setup.commands.bench.servers import BenchError, LaunchScript, ServerPool, describe_server, free_port
from ojai_setup.commands.bench.stats import Summary, predicted_speedup
from ojai_setup.core.root import Root

TUNE_DIR = "tune"


@dataclass
class TuneConfig:
    #: the ``--spec-draft-n-max`` values swept. ``--spec-draft-n-min`` is not: with
    #: ``--spec-draft-p-min`` 0 (the routes' value) every MTP draft is ``n_max`` long (llama.cpp
    #: b11434, common/speculative.cpp, draft-mtp: a draft ends early only below ``p_min``, and
    #: ``n_min`` only drops drafts shorter than itself), so it would change nothing
    lengths: tuple[int, ...] = tuple(range(1, 9))
    binaries: tuple[str, ...] = ()  # empty: the route's own binary
    bench: BenchConfig = field(default_factory=lambda: BenchConfig(seeds=(1, 2), n_predict=128))
    confirm_seeds: tuple[int, ...] = (11, 12, 13, 14)
    confirm_tokens: int = 256
    long_tokens: int = 2000
    early_stop: bool = True
    stop_margin: float = 0.03
    max_seconds: float = 3600.0
    #: benchmark-only: per-token acceptance forced with --spec-synth-rates a, a^2, ..., a^g
    synthetic_acceptance: float | None = None
    write: bool = True

    def fingerprint(self, route: str, binary: str) -> str:
        b = self.bench
        data = {"route": route, "binary": binary, "prompts": [p.text for p in b.prompts],
                "seeds": b.seeds, "tokens": b.n_predict, "temperature": b.temperature,
                "template": b.template, "synthetic": self.synthetic_acceptance}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


class LengthResult(BaseModel):
    g: int
    pairs: list[Pair]
    measured: Summary | None = None
    acceptance: float | None = None
    mean_accepted_length: float | None = None
    draft_cost: float | None = None
    predicted: float | None = None  # from the fit over every length


class BackendResult(BaseModel):
    binary: str
    version: str | None = None
    fingerprint: str
    lengths: list[LengthResult] = []
    acceptance: float | None = None
    draft_cost: float | None = None
    #: what a drafting pass costs besides ``g * draft_cost``, in plain tokens (see fit_model)
    pass_base: float = 1.0
    best_g: int | None = None
    stopped_early: str | None = None
    long_collapse: str | None = None
    long_checked: bool = False
    safe: bool | None = None
    confirmed: Summary | None = None
    max_prediction_error: float | None = None  # max |predicted - measured| / measured


class TuneResult(BaseModel):
    schema_: str = "ojai.tune/1"
    route: str
    started: str
    finished: str | None = None
    backends: list[BackendResult] = []
    chosen_binary: str | None = None
    chosen_g: int | None = None
    chosen_speedup: float | None = None
    written: str | None = None
    stopped: str | None = None
    interrupted: bool = False

    def dump(self) -> dict:
        d = self.model_dump(mode="json")
        d["schema"] = d.pop("schema_")
        return d


# -- the fit ---------------------------------------------------------------------------------

def fit_model(lengths: list[LengthResult]) -> tuple[float | None, float | None, float]:
    """Pooled per-token acceptance ``a``, draft cost ``c`` and the base cost of a pass.

    Each pair gives the cost of one main pass of its MTP arm in plain tokens, ``y``, at the
    mean draft length ``x`` of that arm (see :func:`~ojai_setup.commands.bench.stats.draft_cost`:
    ``y = 1 + c_pair * x``). The classic model prices a pass at ``1 + c*x``; measured over
    several lengths, a pass also has a fixed cost of its own (running the draft head and
    sampling it once per pass: with llama.cpp's CPU build and tiny models, a line through the
    sweep's pairs meets ``x = 0`` at 1.2-1.7, not 1), which the classic model puts into ``c`` and
    so overrates short drafts. So, once the pairs span two draft lengths or more, ``y = base +
    c*x`` is fitted by least squares (``base`` kept at 1 or above, ``c`` at 0 or above); with
    one length only, ``base`` is 1 and ``c`` the least-squares slope through it, as before.
    """
    succ = fails = 0
    xs: list[float] = []
    ys: list[float] = []
    for lr in lengths:
        for p in lr.pairs:
            m = p.mtp
            if not m.draft_n:
                continue
            succ += m.draft_n_accepted or 0
            fails += m.rejections or 0
            passes = m.tokens - (m.draft_n_accepted or 0)
            if p.draft_cost is not None and passes > 0:
                x = m.draft_n / passes
                xs.append(x)
                ys.append(1.0 + p.draft_cost * x)
    a = succ / (succ + fails) if succ + fails else None
    if not xs:
        return a, None, 1.0
    base, c = 1.0, None
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if len({round(x) for x in xs}) >= 2 and sxx > 0:
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        intercept = my - slope * mx
        if intercept >= 1.0 and slope >= 0.0:
            base, c = intercept, slope
    if c is None:  # through (0, 1): the classic model
        den = sum(x * x for x in xs)
        c = sum((y - 1.0) * x for x, y in zip(xs, ys)) / den if den else None
    return a, c, base


def refresh_predictions(backend: BackendResult) -> None:
    a, c, base = fit_model(backend.lengths)
    backend.acceptance, backend.draft_cost, backend.pass_base = a, c, base
    errors = []
    for lr in backend.lengths:
        lr.predicted = (predicted_speedup(a, lr.g, c, base)
                        if a is not None and c is not None else None)
        if lr.predicted is not None and lr.measured is not None:
            errors.append(abs(lr.predicted - lr.measured.mean) / lr.measured.mean)
    backend.max_prediction_error = max(errors) if errors else None
    measured = [lr for lr in backend.lengths if lr.measured is not None]
    backend.best_g = max(measured, key=lambda lr: lr.measured.mean).g if measured else None


def trend_is_clear(backend: BackendResult, margin: float) -> str | None:
    """Why the sweep can stop: the two lengths after the best measured one are both worse by
    more than ``margin``, and the model predicts that no longer draft gains."""
    done = sorted((lr for lr in backend.lengths if lr.measured), key=lambda lr: lr.g)
    if len(done) < 3 or backend.best_g is None:
        return None
    best = next(lr for lr in done if lr.g == backend.best_g)
    after = [lr for lr in done if lr.g > best.g]
    if len(after) < 2:
        return None
    if not all(lr.measured.mean < best.measured.mean * (1 - margin) for lr in after[:2]):
        return None
    a, c, base = backend.acceptance, backend.draft_cost, backend.pass_base
    if a is None or c is None:
        return None
    g = after[1].g
    if any(predicted_speedup(a, h + 1, c, base) > predicted_speedup(a, h, c, base)
           for h in range(g, g + 8)):
        return None
    return (f"lengths {after[0].g} and {after[1].g} measured more than {margin:.0%} below length "
            f"{best.g}, and the model (a = {a:.2f}, c = {c:.3f}, base {base:.2f}) predicts only "
            "losses beyond")


def replay_sweep(lengths: list[LengthResult], margin: float) -> tuple[int | None, int]:
    """The length the early-stopping sweep would choose from these measurements, seeing them
    in order, and how many lengths it would have measured."""
    seen = BackendResult(binary="", fingerprint="")
    for i, lr in enumerate(sorted(lengths, key=lambda x: x.g)):
        seen.lengths.append(lr.model_copy(deep=True))
        refresh_predictions(seen)
        if trend_is_clear(seen, margin):
            return seen.best_g, i + 1
    return seen.best_g, len(seen.lengths)


# -- running ---------------------------------------------------------------------------------

def _progress_path(root: Root, route: str) -> Path:
    from ojai_setup.facts.state import state_dir

    return state_dir(root) / TUNE_DIR / f"{route}.json"


def _load_progress(path: Path) -> dict[str, BackendResult]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {b["fingerprint"]: BackendResult.model_validate(b) for b in data.get("backends", [])}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _save_progress(path: Path, result: TuneResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(result.dump(), indent=2) + "\n", mode=0o644)


def synthetic_rates(a: float, g: int) -> str:
    return ",".join(f"{a ** (i + 1):.6g}" for i in range(g))


class TuneObserver(Observer):
    def length(self, binary: str, lr: LengthResult) -> None: ...


def _script_for(arm: RouteArm, binary: str | None) -> LaunchScript:
    if arm.script is None:
        raise BenchError(f"route {arm.name} has no launch script to start it from")
    if binary is None:
        return arm.script
    return LaunchScript(arm.script.preamble, (binary, *arm.script.argv[1:]))


def _on_free_port(script: LaunchScript) -> tuple[LaunchScript, str]:
    port = free_port()
    s = script.with_flag(("--host",), "127.0.0.1").with_flag(("--port",), str(port))
    return s, f"http://127.0.0.1:{port}"


def run_tune(root: Root, route: str, config: TuneConfig, *, observer: TuneObserver | None = None,
             ready_timeout: float = 600.0) -> TuneResult:
    obs = observer or TuneObserver()
    arms = find_routes(root, route)
    check_route_pair(root, arms.mtp.record)
    model = arms.model or route
    result = TuneResult(route=model, started=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    progress_path = _progress_path(root, model)
    previous = _load_progress(progress_path)
    budget = Budget(config.max_seconds, 10**12)
    binaries = config.binaries or (arms.mtp.script.argv[0] if arms.mtp.script else None,)
    if binaries == (None,):
        raise BenchError(f"route {arms.mtp.name} has no launch script to start it from")
    try:
        with ServerPool(log_dir=progress_path.parent / "logs", ready_timeout=ready_timeout) as pool:
            for binary in binaries:
                _tune_backend(pool, root, arms, binary, config, budget, obs, previous, result,
                              progress_path)
                _save_progress(progress_path, result)
    except CapReached as exc:
        result.stopped = str(exc)
    except KeyboardInterrupt:
        result.interrupted = True
        result.stopped = "interrupted (Ctrl-C); run the same command again to resume"
    result.finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
    _choose_and_write(root, arms, config, result, progress_path)
    _save_progress(progress_path, result)
    return result


def _tune_backend(pool: ServerPool, root: Root, arms, binary: str, config: TuneConfig, budget: Budget,
                  obs: TuneObserver, previous: dict[str, BackendResult], result: TuneResult,
                  progress_path: Path) -> BackendResult:
    from ojai_setup.commands.bench.servers import binary_version

    fp = config.fingerprint(arms.model or "", binary)
    backend = previous.get(fp) or BackendResult(binary=binary, fingerprint=fp)
    backend.version = backend.version or binary_version(binary)
    result.backends.append(backend)
    own_binary = arms.mtp.script is not None and arms.mtp.script.argv[0] == binary

    # the plain arm: the running route when it is this binary's, else started here
    if own_binary:
        plain_info, plain_ep = _bring_up(pool, arms.plain, "plain", pool.ready_timeout)
    else:
        script, url = _on_free_port(_script_for(arms.plain, binary))
        plain_ep, pid = pool.start(script, url, f"{arms.plain.name}-plain")
        plain_info = describe_server("plain", plain_ep, argv=script.argv, started_by_bench=True, pid=pid)

    def mtp_server(g: int):
        script = _script_for(arms.mtp, binary).with_flag(("--spec-draft-n-max",), str(g))
        if config.synthetic_acceptance is not None:
            script = script.with_flag(("--spec-synth-rates",), synthetic_rates(config.synthetic_acceptance, g))
        script, url = _on_free_port(script)
        ep, pid = pool.start(script, url, f"{arms.mtp.name}-g{g}")
        info = describe_server("mtp", ep, argv=script.argv, started_by_bench=True, pid=pid, draft_n_max=g)
        return ep, pid, info

    def run(ep: Endpoint, info, bench: BenchConfig, res: BenchResult) -> BenchResult:
        runner = Runner(ep, plain_ep, bench, observer=obs, mtp_info=info, plain_info=plain_info)
        runner.budget = budget
        for part in bench.parts:
            {"pairs": runner.run_pairs, "long": runner.run_long}[part](res)
        finalize(res, bench, info)
        return res

    done = {lr.g for lr in backend.lengths if lr.measured}
    for g in config.lengths:
        if g in done:
            continue
        budget.check()
        ep, pid, info = mtp_server(g)
        try:
            res = run(ep, info, replace(config.bench, parts=("pairs",)), new_result(arms.model, config.bench))
        finally:
            pool.stop(next(s.process for s in pool.started if s.process.pid == pid))
        lr = LengthResult(g=g, pairs=res.pairs, measured=res.summary,
                          acceptance=res.model.acceptance if res.model else None,
                          mean_accepted_length=res.model.mean_accepted_length if res.model else None,
                          draft_cost=res.model.draft_cost if res.model else None)
        backend.lengths = [x for x in backend.lengths if x.g != g] + [lr]
        backend.lengths.sort(key=lambda x: x.g)
        refresh_predictions(backend)
        _save_progress(progress_path, result)
        obs.length(binary, lr)
        if config.early_stop:
            why = trend_is_clear(backend, config.stop_margin)
            if why:
                backend.stopped_early = why
                break
    refresh_predictions(backend)
    if backend.best_g is None:
        return backend

    # long generation and confirmation at the best length
    g = backend.best_g
    if not backend.long_checked or backend.confirmed is None:
        budget.check()
        ep, pid, info = mtp_server(g)
        try:
            if config.long_tokens and not backend.long_checked:
                res = run(ep, info, replace(config.bench, parts=("long",), long_tokens=config.long_tokens),
                          new_result(arms.model, config.bench))
                if res.long and res.long.mtp:
                    backend.long_checked = True
                    backend.long_collapse = res.long.mtp.collapse.reason if res.long.mtp.collapse.detected else None
                    backend.safe = backend.long_collapse is None
                _save_progress(progress_path, result)
            elif not config.long_tokens:
                backend.safe = True
            if backend.safe and backend.confirmed is None:
                confirm = replace(config.bench, parts=("pairs",), seeds=config.confirm_seeds,
                                  n_predict=config.confirm_tokens)
                res = run(ep, info, confirm, new_result(arms.model, confirm))
                backend.confirmed = res.summary
        finally:
            pool.stop(next(s.process for s in pool.started if s.process.pid == pid))
    return backend


def _choose_and_write(root: Root, arms, config: TuneConfig, result: TuneResult, progress_path: Path) -> None:
    from ojai_setup.apply.tuning import save_route_tuning
    from ojai_setup.formats.tuning import BackendTuning, RouteTuning

    safe = [b for b in result.backends if b.safe and b.confirmed is not None and b.best_g is not None]
    if not safe:
        return
    best = max(safe, key=lambda b: b.confirmed.mean)
    result.chosen_binary, result.chosen_g, result.chosen_speedup = best.binary, best.best_g, best.confirmed.mean
    if not config.write:
        return
    backends = {b.binary: BackendTuning(safe=bool(b.safe), reason=b.long_collapse or "",
                                        draft_n_max=b.best_g, speedup=b.confirmed.mean if b.confirmed else None)
                for b in result.backends if b.safe is not None}
    tuning = RouteTuning(draft_n_max=best.best_g, date=result.finished or result.started,
                         speedup=best.confirmed.mean, binary=best.binary,
                         results=root.machine_path(progress_path) if root.path != Path("/") else str(progress_path),
                         backends=backends)
    try:
        path = save_route_tuning(root, result.route, tuning)
    except PermissionError as exc:
        result.stopped = ((result.stopped + "; ") if result.stopped else "") + (
            f"cannot write {exc.filename}: permission denied; run the same command with sudo "
            "to write the choice (the measurements are kept and reused)")
        return
    result.written = str(path)


class TuneReport:
    """What ``ojai tune`` measured and chose (:class:`TuneResult`): a table per backend."""

    schema = "ojai.tune/1"

    def __init__(self, result: TuneResult) -> None:
        self.result = result

    def to_json(self) -> dict:
        return self.result.dump()

    def render(self, term) -> None:
        from rich.table import Table

        result = self.result
        if result.stopped:
            term.print(f"[yellow]stopped:[/] {result.stopped}")
        for b in result.backends:
            table = Table(title=f"{b.binary} ({b.version or 'version unknown'})")
            for col in ("g", "pairs", "measured", "interval", "predicted", "tokens/step", "a"):
                table.add_column(col, justify="right")
            for lr in b.lengths:
                m = lr.measured
                table.add_row(str(lr.g) + (" *" if lr.g == b.best_g else ""), str(len(lr.pairs)),
                              f"{m.mean:.3f}x" if m else "-",
                              f"{m.ci_low:.2f}-{m.ci_high:.2f}" if m and m.ci_low is not None else "-",
                              f"{lr.predicted:.3f}x" if lr.predicted is not None else "-",
                              f"{lr.mean_accepted_length:.2f}" if lr.mean_accepted_length else "-",
                              f"{lr.acceptance:.2f}" if lr.acceptance is not None else "-")
            term.print(table)
            if b.acceptance is not None and b.draft_cost is not None:
                err = f"; predictions within {b.max_prediction_error:.0%} of measured" if b.max_prediction_error is not None else ""
                term.print(f"fit: a = {b.acceptance:.3f}, c = {b.draft_cost:.3f}, a pass's base cost "
                           f"{b.pass_base:.2f} plain tokens{err}")
            if b.stopped_early:
                term.print(f"stopped early: {b.stopped_early}")
            if b.long_checked:
                term.print("long generation: " + (f"[bold red]unsafe for MTP[/]: {b.long_collapse}" if b.long_collapse
                                                  else "no collapse"))
            if b.confirmed:
                term.print(f"confirmed at g = {b.best_g}: {(b.confirmed.mean - 1) * 100:+.1f}% over {b.confirmed.n} pairs"
                           + (f" ({b.confirmed.ci_level:.0%} interval {(b.confirmed.ci_low - 1) * 100:+.1f}% to "
                              f"{(b.confirmed.ci_high - 1) * 100:+.1f}%)" if b.confirmed.ci_low is not None else ""))
        if result.chosen_g is not None:
            term.print(f"choice: --spec-draft-n-max {result.chosen_g} with {result.chosen_binary} "
                       f"(measured {(result.chosen_speedup - 1) * 100:+.1f}%)")
            if result.written:
                term.print(f"written to {result.written}; `ojai setup` shows the change to the launch scripts "
                           "and Lemonade's options, `ojai setup --apply` makes it")
        else:
            term.print("no choice made: no backend finished its sweep, long-generation check and confirmation")

