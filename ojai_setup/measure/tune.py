"""``ojai tune ROUTE``: choose the kind of drafting and its length from measurement (or no
drafting), and write the choice to ``/etc/ojai/tuned.toml`` (the next ``ojai setup`` plans it).

For each llama-server build (backend) asked for, the tuner

1. sweeps the kinds that apply (the route's draft head or draft model at ``--spec-draft-n-max``
   over the lengths, 1..8 by default; each n-gram type the build lists at the knob it reads;
   the head chained with the best n-gram type when the build takes a list): for each cell it
   starts the route's drafted server from its launch script with that setting (on a free port
   of 127.0.0.1, with ``--metrics``) and runs short paired runs against the plain route with
   ``ojai bench``'s machinery, at least ``min_pairs`` of them; a cell's figure is its median;
2. for draft heads, estimates the per-token acceptance ``a`` (pooled over every step of every
   length) and the cost of a pass, ``base + g*c`` (least squares over every pair), and predicts
   the speedup of each length with ``S = (1 - a**(g+1)) / ((1 - a)(g*c + base))``; it stops
   early once two lengths past the best measured one are clearly worse and the model agrees
   that longer drafts only lose. n-gram drafting gets no prediction: it is not predictive;
3. runs the long generation at the best cell: a backend that collapses is marked unsafe and
   never chosen; then confirms the best cell with a longer paired run.

The choice (the safe backend's best cell, when its confirmed interval lies above the
threshold; else no drafting) is written to ``/etc/ojai/tuned.toml`` (:mod:`ojai_setup.formats.tuning`),
which ``ojai setup`` lays over the catalog. Progress is saved after every cell
(``/var/lib/ojai/tune/<route>.json``): a run cut short by Ctrl-C or the time cap resumes where
it stopped when started again with the same settings.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from ojai_setup.core.atomic import write_text
from ojai_setup.measure.campaign import BenchConfig, Budget, CapReached, Observer, Runner, finalize
from ojai_setup.measure.client import Endpoint
from ojai_setup.measure.command import RouteArm, _bring_up, check_route_pair, find_routes, new_result
from ojai_setup.measure.results import BenchResult, Pair
from ojai_setup.measure import kinds
from ojai_setup.domain.drafting import is_model_type, is_ngram_type
from ojai_setup.measure.servers import (
    DRAFT_FLAGS,
    BenchError,
    LaunchScript,
    ServerPool,
    describe_server,
    free_port,
)
from ojai_setup.measure.stats import Robust, Summary, predicted_speedup, robust
from ojai_setup.core.root import Root
from ojai_setup.domain.sweep import Cell, Choice, Limit, Noise

TUNE_DIR = "tune"


@dataclass
class TuneConfig:
    #: the ``--spec-draft-n-max`` values swept for draft heads and draft models.
    #: ``--spec-draft-n-min`` is not: with ``--spec-draft-p-min`` 0 (the routes' value) every
    #: MTP draft is ``n_max`` long (llama.cpp b11434, common/speculative.cpp, draft-mtp: a
    #: draft ends early only below ``p_min``, and ``n_min`` only drops drafts shorter than
    #: itself), so it would change nothing
    lengths: tuple[int, ...] = tuple(range(1, 9))
    #: the drafted lengths swept for n-gram drafting (``--spec-ngram-<type>-size-m``,
    #: ``--spec-ngram-mod-n-max``; ngram-cache has no knob and is measured once)
    ngram_lengths: tuple[int, ...] = (4, 8, 16)
    #: the lookup length held for ngram-simple/-map-k/-map-k4v (``-size-n``; b11434's default
    #: 12 rarely matches in short texts) and ngram-mod's ``n-match`` (16: b11434 warns below)
    ngram_n: int = 3
    mod_n_match: int = 16
    #: the kinds swept (``--spec-type`` values, chains with a comma); empty: every kind that
    #: applies to the route and the binary (its draft kind, each n-gram type, chains)
    kinds: tuple[str, ...] = ()
    binaries: tuple[str, ...] = ()  # empty: the route's own binary
    bench: BenchConfig = field(default_factory=lambda: BenchConfig(seeds=(1, 2), n_predict=128))
    #: at least this many pairs per cell (seeds are added when prompts x seeds is fewer)
    min_pairs: int = 3
    confirm_seeds: tuple[int, ...] = (11, 12, 13, 14)
    confirm_tokens: int = 256
    long_tokens: int = 2000
    early_stop: bool = True
    stop_margin: float = 0.03
    #: a setting is chosen only when its confirmed interval lies above 1 + threshold;
    #: else the choice is no drafting
    threshold: float = 0.05
    max_seconds: float = 3600.0
    #: benchmark-only: per-token acceptance forced with --spec-synth-rates a, a^2, ..., a^g
    #: (draft heads only: the sweep keeps to the route's own kind)
    synthetic_acceptance: float | None = None
    write: bool = True
    #: the correctness gate before a binary is measured: a binary whose output differs from
    #: its own CPU backend's on the route's file is not adopted (``ojai_setup.measure.gate``)
    gate: bool = True
    gate_stride: int = 4
    #: the depths (tokens of context before the task) of the backend x drafting sweep; None:
    #: the route's context (less room for the task and the generation); (): no depth sweep
    depths: tuple[int, ...] | None = None
    #: tokens generated per run of the depth sweep, and runs per cell (tasks cycled)
    depth_tokens: int = 64
    depth_runs: int = 3
    #: memory bandwidth in bytes/s for the plain decoding limit; None: measured
    bandwidth: float | None = None

    def fingerprint(self, route: str, binary: str) -> str:
        b = self.bench
        data = {"route": route, "binary": binary, "prompts": [p.text for p in b.prompts],
                "seeds": b.seeds, "tokens": b.n_predict, "temperature": b.temperature,
                "top_p": b.top_p, "top_k": b.top_k, "template": b.template,
                "synthetic": self.synthetic_acceptance, "min_pairs": self.min_pairs,
                "ngram": [self.ngram_n, self.mod_n_match]}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


class LengthResult(BaseModel):
    """One cell of the sweep: a kind of drafting at one length."""

    g: int  # the length knob's value (draft heads: --spec-draft-n-max)
    #: the ``--spec-type`` value; "" is the route's own kind (a draft head or draft model)
    kind: str = ""
    #: every flag this cell sets besides --spec-type, with its value
    knobs: dict[str, int] = {}
    pairs: list[Pair]
    measured: Summary | None = None
    robust: Robust | None = None
    drafted: int | None = None  # tokens drafted over the cell's pairs
    acceptance: float | None = None
    mean_accepted_length: float | None = None
    draft_cost: float | None = None
    predicted: float | None = None  # from the fit over every length (draft heads only)

    @property
    def score(self) -> float | None:
        """The cell's figure of merit: the median speedup (the mean when no median is kept)."""
        if self.robust is not None:
            return self.robust.median
        return self.measured.mean if self.measured is not None else None

    def label(self, own: str = "") -> str:
        kind = self.kind or own or "draft"
        if not self.knobs:
            return kind
        def short(flag: str) -> str:  # --spec-ngram-simple-size-m -> size-m
            name = flag.removeprefix("--spec-")
            for part in kinds.parts(kind):
                name = name.removeprefix(part + "-")
            return name

        return kind + " " + ", ".join(f"{short(k)} {v}" for k, v in self.knobs.items())


class BackendResult(BaseModel):
    binary: str
    version: str | None = None
    fingerprint: str
    own_kind: str = ""  # the route's own ``--spec-type``
    lengths: list[LengthResult] = []
    acceptance: float | None = None
    draft_cost: float | None = None
    #: what a drafting pass costs besides ``g * draft_cost``, in plain tokens (see fit_model)
    pass_base: float = 1.0
    best_g: int | None = None
    best_kind: str | None = None
    notes: list[str] = []
    stopped_early: str | None = None
    long_collapse: str | None = None
    long_checked: bool = False
    safe: bool | None = None
    confirmed: Summary | None = None
    confirmed_robust: Robust | None = None
    max_prediction_error: float | None = None  # max |predicted - measured| / measured
    #: the correctness gate's run (``GateRun`` as a document); None: not run
    gate: dict | None = None
    #: why the binary is not adopted: its gate failed (the finding), or could not be run
    gate_failed: str | None = None

    def best(self) -> LengthResult | None:
        return next((lr for lr in self.lengths if lr.g == self.best_g and lr.kind == self.best_kind), None)


class TuneResult(BaseModel):
    schema_: str = "ojai.tune/1"
    route: str
    started: str
    finished: str | None = None
    backends: list[BackendResult] = []
    chosen_binary: str | None = None
    chosen_kind: str | None = None  # "none": no drafting beat plain
    chosen_g: int | None = None
    chosen_knobs: dict[str, int] = {}
    chosen_speedup: float | None = None
    choice: str | None = None  # the sentence
    written: str | None = None
    stopped: str | None = None
    interrupted: bool = False
    #: the backend x drafting x depth sweep (:mod:`ojai_setup.measure.sweep`)
    depths: list[int] = []
    cells: list[Cell] = []
    noise: Noise | None = None
    limit: Limit | None = None
    #: the choice at the deepest depth asked, with its sentence
    depth_choice: Choice | None = None
    #: which depth sweep ``cells`` belong to (:func:`_depth_key`): an interrupted sweep run
    #: again with the same key takes up the cells measured so far
    depth_key: str | None = None
    sweep_error: str | None = None
    plot: str | None = None
    no_plot: str | None = None

    def dump(self) -> dict:
        d = self.model_dump(mode="json")
        d["schema"] = d.pop("schema_")
        return d


def is_head(lr: LengthResult) -> bool:
    return not lr.kind or (kinds.has_head(lr.kind) and "," not in lr.kind)


# -- the fit ---------------------------------------------------------------------------------

def fit_model(lengths: list[LengthResult]) -> tuple[float | None, float | None, float]:
    """Pooled per-token acceptance ``a``, draft cost ``c`` and the base cost of a pass.

    Each pair gives the cost of one main pass of its MTP arm in plain tokens, ``y``, at the
    mean draft length ``x`` of that arm (see :func:`~ojai_setup.measure.stats.draft_cost`:
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
        if not is_head(lr):
            continue
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
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        intercept = my - slope * mx
        if intercept >= 1.0 and slope >= 0.0:
            base, c = intercept, slope
    if c is None:  # through (0, 1): the classic model
        den = sum(x * x for x in xs)
        c = sum((y - 1.0) * x for x, y in zip(xs, ys, strict=True)) / den if den else None
    return a, c, base


def refresh_predictions(backend: BackendResult) -> None:
    """The fit over the draft-head cells, each head cell's prediction, and the best cell (by
    its median speedup) over every kind. n-gram cells get no prediction: their drafts come
    where the text repeats, so no per-token acceptance model predicts them."""
    heads = [lr for lr in backend.lengths if is_head(lr)]
    a, c, base = fit_model(heads)
    backend.acceptance, backend.draft_cost, backend.pass_base = a, c, base
    errors = []
    for lr in backend.lengths:
        lr.predicted = (predicted_speedup(a, lr.g, c, base)
                        if is_head(lr) and a is not None and c is not None else None)
        if lr.predicted is not None and lr.score is not None:
            errors.append(abs(lr.predicted - lr.score) / lr.score)
    backend.max_prediction_error = max(errors) if errors else None
    measured = [lr for lr in backend.lengths if lr.score is not None]
    best = max(measured, key=lambda lr: lr.score) if measured else None
    backend.best_g = best.g if best else None
    backend.best_kind = best.kind if best else None


def trend_is_clear(backend: BackendResult, margin: float) -> str | None:
    """Why the sweep can stop: the two lengths after the best measured one are both worse by
    more than ``margin``, and the model predicts that no longer draft gains."""
    done = sorted((lr for lr in backend.lengths if lr.score is not None and is_head(lr)),
                  key=lambda lr: lr.g)
    if len(done) < 3:
        return None
    best = max(done, key=lambda lr: lr.score)
    after = [lr for lr in done if lr.g > best.g]
    if len(after) < 2:
        return None
    if not all(lr.score < best.score * (1 - margin) for lr in after[:2]):
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


class KeptDepths(BaseModel):
    """The depth sweep an earlier run saved: which sweep (:func:`_depth_key`), its cells
    measured without error, and its noise."""

    key: str | None = None
    cells: list[Cell] = []
    noise: Noise | None = None


def _load_depth_progress(path: Path) -> KeptDepths:
    """The depth sweep the progress file holds, read before this run overwrites the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return KeptDepths(key=data.get("depth_key"),
                          cells=[c for c in data.get("cells", []) if not c.get("error")],
                          noise=data.get("noise"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return KeptDepths()


def _depth_key(config: TuneConfig, result: TuneResult, backends: list[BackendResult]) -> str:
    """What makes two depth sweeps the same: the depths, runs and tokens, and each backend's
    fingerprint (its binary and the drafting setting its own sweep found)."""
    def setting(b: BackendResult) -> tuple | None:
        best = b.best()
        return None if best is None else (best.kind or b.own_kind, best.g, best.knobs)

    data = {"depths": result.depths, "runs": config.depth_runs, "tokens": config.depth_tokens,
            "backends": [(b.binary, b.fingerprint, b.long_collapse is None, setting(b))
                         for b in backends]}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


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


#: flags that belong to a draft model or head; dropped for n-gram drafting alone
_DRAFT_ONLY = (DRAFT_FLAGS, ("--spec-draft-n-max",), ("--spec-draft-n-min",),
               ("-ngld", "--spec-draft-ngl", "--gpu-layers-draft", "--n-gpu-layers-draft"),
               ("-ctkd", "--spec-draft-type-k", "--cache-type-k-draft"),
               ("-ctvd", "--spec-draft-type-v", "--cache-type-v-draft"),
               ("--spec-draft-p-min", "--draft-p-min"), ("--spec-synth-rates",))


def probe_kinds(binary: str) -> tuple[tuple[str, ...], bool]:
    """The ``--spec-type`` values ``binary`` accepts and whether it takes a comma list (its
    ``--help``); nothing when it cannot be read."""
    import subprocess

    from ojai_setup.formats.llama_help import DialectParseError, parse_help

    try:
        done = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        dialect = parse_help(done.stdout + done.stderr)
    except (OSError, subprocess.TimeoutExpired, DialectParseError):
        return (), False
    option = next((o for o in dialect.options if "--spec-type" in o.names), None)
    listed = option is not None and "comma-separated list" in option.help
    return tuple(dialect.spec_types or ()), listed


def cell_knobs(kind: str, g: int, config: TuneConfig, *, head_g: int | None = None,
               ngram_g: int | None = None) -> dict[str, int]:
    """The flags one cell sets for ``kind`` (a chain sets each part's) at length ``g``."""
    out: dict[str, int] = {}
    for part in kinds.parts(kind):
        value = g
        if "," in kind:
            value = (head_g if is_model_type(part) else ngram_g) or g
        if is_model_type(part):
            out["--spec-draft-n-max"] = value
        elif part in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
            out[f"--spec-{part}-size-n"] = config.ngram_n
            out[f"--spec-{part}-size-m"] = value
        elif part == "ngram-mod":
            out["--spec-ngram-mod-n-match"] = config.mod_n_match
            out["--spec-ngram-mod-n-max"] = value
            out["--spec-ngram-mod-n-min"] = 1
    return out


def cell_script(base: LaunchScript, kind: str, knobs: dict[str, int],
                synthetic: float | None = None) -> LaunchScript:
    """The drafted route's launch script set to one cell: its kind, its knobs, ``--metrics``."""
    from ojai_setup.measure.command import with_metrics

    script = base.with_flag(kinds.SPEC_TYPE_FLAGS, kind)
    if not kinds.has_head(kind):
        for flags in _DRAFT_ONLY:
            script = script.with_flag(flags, None)
    for flag, value in knobs.items():
        script = script.with_flag((flag,), str(value))
    if synthetic is not None and kinds.has_head(kind) and "--spec-draft-n-max" in knobs:
        script = script.with_flag(("--spec-synth-rates",), synthetic_rates(synthetic, knobs["--spec-draft-n-max"]))
    return with_metrics(script)


def plan_cells(own: str, available: tuple[str, ...], listed: bool, config: TuneConfig) -> list[tuple[str, list[int]]]:
    """The kinds to sweep, each with its lengths: the route's own head kind at ``lengths``,
    each n-gram type the binary has at ``ngram_lengths`` (ngram-cache once); chains come after
    (they need the best of each part)."""
    heads = [p for p in kinds.parts(own) if is_model_type(p)]
    wanted = list(config.kinds)
    if config.synthetic_acceptance is not None or not available:
        wanted = wanted or heads
    if not wanted:
        wanted = heads + [t for t in kinds.NGRAM_TYPES if t in available]
    out = []
    for kind in wanted:
        if "," in kind:
            continue
        if is_model_type(kind):
            if kind not in heads:
                continue  # a head kind needs the route's own draft file or heads
            out.append((kind, list(config.lengths)))
        elif kind == "ngram-cache":
            out.append((kind, [8]))
        elif is_ngram_type(kind):
            out.append((kind, list(config.ngram_lengths)))
    return out


def chain_kinds(own: str, available: tuple[str, ...], listed: bool, config: TuneConfig,
                ngram_best: str | None) -> list[str]:
    heads = [p for p in kinds.parts(own) if is_model_type(p)]
    asked = [k for k in config.kinds if "," in k]
    if asked:
        return asked
    if not listed or not heads or ngram_best is None or config.synthetic_acceptance is not None \
            or config.kinds:
        return []
    return [f"{heads[0]},{ngram_best}"]


def bench_sweep_config(root: Root, route: str | None, config: TuneConfig) -> tuple[str, TuneConfig]:
    """``ojai bench --depth/--binary``: tune's backend x drafting x depth sweep with the
    route's own drafting setting only (its kind at its length), nothing written."""
    arms = find_routes(root, route, command="bench")
    own = arms.mtp.record.get("spec_type") or \
        (arms.mtp.script.value("--spec-type") if arms.mtp.script else None) or ""
    script = arms.mtp.script
    g = arms.mtp.record.get("draft_n_max") or (int(script.value("--spec-draft-n-max") or 0) if script else 0) or 3
    size = next((int(v) for flag in ("--spec-ngram-simple-size-m", "--spec-ngram-map-k-size-m",
                                     "--spec-ngram-map-k4v-size-m", "--spec-ngram-mod-n-max")
                 if script and (v := script.value(flag))), 8)
    return arms.model or route or "", replace(config, kinds=(own,) if own else (), lengths=(g,),
                                              ngram_lengths=(size,), early_stop=False, write=False)


def run_tune(root: Root, route: str, config: TuneConfig, *, observer: TuneObserver | None = None,
             ready_timeout: float = 600.0, command: str = "tune") -> TuneResult:
    obs = observer or TuneObserver()
    arms = find_routes(root, route, command="tune" if command == "tune" else "bench")
    check_route_pair(root, arms.mtp.record)
    model = arms.model or route
    result = TuneResult(route=model, started=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    progress_path = _progress_path(root, model)
    if command != "tune":  # bench's sweep keeps its own progress, apart from tune's
        progress_path = progress_path.parent.parent / "bench" / f"{model}-sweep.json"
    previous = _load_progress(progress_path)
    kept = _load_depth_progress(progress_path)
    budget = Budget(config.max_seconds, 10**12)
    if arms.mtp.script is None:
        raise BenchError(f"route {arms.mtp.name} has no launch script to start it from")
    binaries = config.binaries or installed_backends(root, arms.mtp.script.argv[0])
    result.depths = list(depths_of(arms.mtp.script, config))
    try:
        with ServerPool(log_dir=progress_path.parent / "logs", ready_timeout=ready_timeout) as pool:
            for binary in binaries:
                _tune_backend(pool, root, arms, binary, config, budget, obs, previous, result,
                              progress_path)
                _save_progress(progress_path, result)
            if result.depths:
                _sweep_depths(pool, arms, config, result, budget, progress_path, kept)
                _save_progress(progress_path, result)
    except CapReached as exc:
        result.stopped = str(exc)
    except KeyboardInterrupt:
        result.interrupted = True
        result.stopped = "interrupted (Ctrl-C); run the same command again to resume"
    result.finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
    _choose_and_write(root, arms, config, result, progress_path)
    if result.cells:
        from ojai_setup.measure.plot import PlotsMissing, render_sweep_plot

        plot = progress_path.with_name(f"{progress_path.stem}-sweep.png")
        try:
            result.plot = str(render_sweep_plot(result, plot))
        except PlotsMissing as exc:
            result.no_plot = str(exc)
        except Exception as exc:  # a plot is a convenience; never lose the measurements to it
            result.no_plot = f"{plot.name} could not be drawn: {exc}"
    _save_progress(progress_path, result)
    return result


#: prompt room a depth leaves in the route's context besides the generated tokens
TASK_ROOM = 256


def route_context(script: LaunchScript) -> int | None:
    value = script.value("--ctx-size", "-c")
    try:
        return int(value) if value else None
    except ValueError:
        return None


def depths_of(script: LaunchScript, config: TuneConfig) -> tuple[int, ...]:
    """The depths to sweep: the asked ones (each checked against the route's context), or the
    route's context less room for the task and the generation."""
    ctx = route_context(script)
    room = TASK_ROOM + config.depth_tokens
    if config.depths is None:
        if ctx is None:
            return (0,)
        return (max(0, ctx - room),)
    for d in config.depths:
        if d < 0:
            raise BenchError(f"--depth {d}: a depth is a number of tokens, 0 or more")
        if ctx is not None and d + room > ctx:
            raise BenchError(f"--depth {d} needs a context of at least {d + room} tokens (the "
                             f"depth, {TASK_ROOM} for the task, {config.depth_tokens} generated); "
                             f"the route's is {ctx}: ask for at most {max(0, ctx - room)}")
    return tuple(sorted(set(config.depths)))


def installed_backends(root: Root, own: str) -> tuple[str, ...]:
    """The route's own binary, then each other backend ojai installed under
    /opt/ojai/llama.cpp (one per backend, by its install record; the newest folder name)."""
    from ojai_setup.measure.sweep import backend_label
    from ojai_setup.core.paths import LLAMACPP_DIR

    base = root.resolve(LLAMACPP_DIR)
    found: dict[str, str] = {}
    try:
        folders = sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        folders = []
    for folder in folders:
        binary = folder / "llama-server"
        if (folder / "ojai-install.json").is_file() and binary.is_file():
            path = str(binary) if not root.is_host else f"{LLAMACPP_DIR}/{folder.name}/llama-server"
            found[backend_label(str(binary))] = path
    mine = backend_label(own)
    own_real = Path(own).resolve() if Path(own).exists() else None
    others = [b for k, b in found.items() if k != mine
              and (own_real is None or Path(b).resolve() != own_real)]
    return (own, *others)


def _sweep_depths(pool: ServerPool, arms, config: TuneConfig, result: TuneResult, budget: Budget,
                  progress_path: Path, kept: KeptDepths) -> None:
    """Plain and drafted servers of every backend that passed the gate, measured at every depth;
    two identical plain servers of the route's own build give the noise; then the choice. Each
    server's cells are saved as they are measured; a run of the same sweep after an
    interruption takes them up instead of measuring them again."""
    from ojai_setup.measure.sweep import backend_label, build_requests, measure, start, stop
    from ojai_setup.domain.sweep import choose, noise_of

    own = arms.mtp.script.argv[0]
    backends = [b for b in result.backends if not b.gate_failed]
    if not backends:
        result.sweep_error = "no backend passed the correctness gate: nothing to measure at depth"
        return
    tasks = [config.bench.prompts[i % len(config.bench.prompts)].text
             for i in range(max(1, config.depth_runs))]
    result.cells, requests, twin_cells = [], None, None
    result.depth_key = _depth_key(config, result, backends)
    same = kept.key == result.depth_key
    kept_cells, kept_noise = (kept.cells, kept.noise) if same else ([], None)
    _limit(arms, config, result)
    for b in sorted(backends, key=lambda b: b.binary != own):
        label = backend_label(b.binary)
        base = _script_for(arms.mtp, b.binary)
        options = [("plain", cell_script(base, kinds.NONE, {}))]
        best = b.best()
        if best is not None and b.long_collapse is None:
            kind = best.kind or b.own_kind
            options.append((f"{kind} {best.g}",
                            cell_script(base, kind, best.knobs, config.synthetic_acceptance)))
        for drafting, script in options:
            twin_wanted = drafting == "plain" and b.binary == own and result.noise is None
            done = [c for c in kept_cells if c.binary == b.binary and c.drafting == drafting]
            if {c.depth for c in done} == set(result.depths) and (
                    not twin_wanted or kept_noise is not None):
                result.cells += sorted(done, key=lambda c: c.depth)  # measured before
                if twin_wanted:
                    result.noise = kept_noise
                continue
            budget.check()
            pids = []
            try:
                ep, pid = start(pool, script, f"depth-{label}-{drafting.split()[0]}")
                pids.append(pid)
                twin = None
                if twin_wanted:
                    twin, tpid = start(pool, script, f"depth-{label}-plain-twin")
                    pids.append(tpid)
                if requests is None:
                    requests = build_requests(ep.url, tuple(result.depths), tasks)
                cells = {d: Cell(binary=b.binary, backend=label, drafting=drafting, depth=d)
                         for d in result.depths}
                twin_cells = ({d: Cell(binary=b.binary, backend=label, drafting="plain twin", depth=d)
                               for d in result.depths} if twin is not None else None)
                measure(ep, twin, requests, cells, twin_cells, tokens=config.depth_tokens, budget=budget)
            except BenchError as exc:
                result.cells.append(Cell(binary=b.binary, backend=label, drafting=drafting,
                                         depth=result.depths[0], error=str(exc)))
                continue
            finally:
                for pid in pids:
                    stop(pool, pid)
            result.cells += list(cells.values())
            if twin_cells is not None:
                a = [x for c in cells.values() for x in c.gen_runs]
                t = [x for c in twin_cells.values() for x in c.gen_runs]
                result.noise = noise_of(a, t)
            _save_progress(progress_path, result)
    depth = max(result.depths)
    allowed = {b.binary: True for b in backends}
    drafting_ok = {b.binary: b.long_collapse is None for b in backends}
    result.depth_choice = choose(result.cells, depth, own=own, allowed=allowed,
                                 drafting_ok=drafting_ok, noise=result.noise)


def _limit(arms, config: TuneConfig, result: TuneResult) -> None:
    """The plain decoding limit: the route's model's bytes a token over the bandwidth."""
    from ojai_setup.measure.servers import MODEL_FLAGS
    from ojai_setup.facts.gguf import weights_read_per_token
    from ojai_setup.formats.gguf import GGUFError

    model = arms.mtp.script.value(*MODEL_FLAGS)
    if not model:
        return
    try:
        per_token = weights_read_per_token(model)
    except GGUFError:
        return
    if config.bandwidth:
        bandwidth, source = config.bandwidth, "given with --bandwidth"
    else:
        from ojai_setup.facts.bandwidth import measure_bandwidth

        bandwidth, source = measure_bandwidth()
    result.limit = Limit(bytes_per_token=per_token, bandwidth=bandwidth, source=source,
                         kv_bytes=_kv_read(model, arms.mtp.script, result.depths))


def _kv_read(model: str, script, depths: list[int]) -> dict[int, int]:
    """The KV cache bytes a plain token reads at each depth: the cache of that many positions
    (sliding-window layers only their window), of the route's cache type; empty when the
    model's metadata does not give its KV layout."""
    from typing import get_args

    from ojai_setup.domain.catalog import CacheType
    from ojai_setup.domain.deployment import kv_layout
    from ojai_setup.facts.gguf import read_model_info
    from ojai_setup.formats.gguf import GGUFError

    try:
        layout = kv_layout(read_model_info(model))
    except (GGUFError, OSError):
        return {}
    if layout is None:
        return {}
    kind = script.value("--cache-type-k", "-ctk") or "f16"
    cache = kind if kind in get_args(CacheType) else "f16"
    return {d: layout.bytes_for(d, cache) if d > 0 else 0 for d in depths}


def _cell_seeds(bench: BenchConfig, minimum: int) -> tuple[int, ...]:
    """The seeds of a cell: the configured ones, and more when prompts x seeds is below the
    minimum number of pairs per cell."""
    seeds = list(bench.seeds)
    nxt = max(seeds, default=0) + 1
    while len(seeds) * len(bench.prompts) < minimum:
        seeds.append(nxt)
        nxt += 1
    return tuple(seeds)


def _tune_backend(pool: ServerPool, root: Root, arms, binary: str, config: TuneConfig, budget: Budget,
                  obs: TuneObserver, previous: dict[str, BackendResult], result: TuneResult,
                  progress_path: Path) -> BackendResult:
    """One backend's gate and drafting sweep; the servers it started are stopped after it (the
    next backend's, and the depth sweep's, get the memory)."""
    before = {s.process.pid for s in pool.started}
    try:
        return _tune_one_backend(pool, root, arms, binary, config, budget, obs, previous, result,
                                 progress_path)
    finally:
        for s in [s for s in pool.started if s.process.pid not in before]:
            pool.stop(s.process)


def _tune_one_backend(pool: ServerPool, root: Root, arms, binary: str, config: TuneConfig, budget: Budget,  # noqa: C901
                      obs: TuneObserver, previous: dict[str, BackendResult], result: TuneResult,
                      progress_path: Path) -> BackendResult:
    from ojai_setup.measure.servers import binary_version

    fp = config.fingerprint(arms.model or "", binary)
    backend = previous.get(fp) or BackendResult(binary=binary, fingerprint=fp)
    backend.version = backend.version or binary_version(binary)
    own = arms.mtp.record.get("spec_type") or (arms.mtp.script.value("--spec-type") if arms.mtp.script else "") or ""
    backend.own_kind = own
    result.backends.append(backend)
    own_binary = arms.mtp.script is not None and arms.mtp.script.argv[0] == binary
    available, listed = probe_kinds(binary)

    # the plain arm: the running route when it is this binary's, else started here
    if own_binary:
        plain_info, plain_ep = _bring_up(pool, arms.plain, "plain", pool.ready_timeout)
    else:
        script, url = _on_free_port(_script_for(arms.plain, binary))
        plain_ep, pid = pool.start(script, url, f"{arms.plain.name}-plain")
        plain_info = describe_server("plain", plain_ep, argv=script.argv, started_by_bench=True, pid=pid)

    if config.gate and backend.gate is None:
        _gate_backend(pool, root, arms, binary, plain_ep, backend, config.gate_stride)
        _save_progress(progress_path, result)
    if backend.gate_failed:
        backend.safe = False
        return backend

    def server(kind: str, knobs: dict[str, int]):
        script = cell_script(_script_for(arms.mtp, binary), kind, knobs, config.synthetic_acceptance)
        script, url = _on_free_port(script)
        tag = kind.replace(",", "+") + "-" + "-".join(str(v) for v in knobs.values())
        ep, pid = pool.start(script, url, f"{arms.mtp.name}-{tag}")
        info = describe_server("mtp", ep, argv=script.argv, started_by_bench=True, pid=pid,
                               draft_n_max=knobs.get("--spec-draft-n-max"))
        return ep, pid, info

    def run(ep: Endpoint, info, bench: BenchConfig, res: BenchResult) -> BenchResult:
        runner = Runner(ep, plain_ep, bench, observer=obs, mtp_info=info, plain_info=plain_info)
        runner.budget = budget
        if "pairs" in bench.parts:
            runner.check_plain()
        for part in bench.parts:
            {"pairs": runner.run_pairs, "long": runner.run_long}[part](res)
        finalize(res, bench, info)
        return res

    def stop(pid: int) -> None:
        pool.stop(next(s.process for s in pool.started if s.process.pid == pid))

    def measure(kind: str, g: int, knobs: dict[str, int]) -> LengthResult:
        budget.check()
        ep, pid, info = server(kind, knobs)
        bench = replace(config.bench, parts=("pairs",), seeds=_cell_seeds(config.bench, config.min_pairs))
        try:
            res = run(ep, info, bench, new_result(arms.model, bench))
        finally:
            stop(pid)
        speedups = [p.speedup for p in res.pairs if p.speedup is not None]
        lr = LengthResult(g=g, kind="" if kind == own else kind, knobs=knobs, pairs=res.pairs,
                          measured=res.summary, robust=robust(speedups) if speedups else None,
                          drafted=sum(p.mtp.draft_n or 0 for p in res.pairs),
                          acceptance=res.model.acceptance if res.model else None,
                          mean_accepted_length=res.model.mean_accepted_length if res.model else None,
                          draft_cost=res.model.draft_cost if res.model else None)
        backend.lengths = [x for x in backend.lengths if (x.kind, x.g) != (lr.kind, g)] + [lr]
        refresh_predictions(backend)
        _save_progress(progress_path, result)
        obs.length(binary, lr)
        return lr

    def done(kind: str, g: int) -> LengthResult | None:
        key = "" if kind == own else kind
        return next((x for x in backend.lengths if (x.kind, x.g) == (key, g) and x.score is not None), None)

    best_of: dict[str, LengthResult] = {}
    for kind, lengths in plan_cells(own, available, listed, config):
        for g in lengths:
            lr = done(kind, g) or measure(kind, g, cell_knobs(kind, g, config))
            if is_ngram_type(kind) and not lr.drafted and g == lengths[0]:
                backend.notes.append(f"{kind} drafted nothing on these prompts at {g}; its longer "
                                     "lengths were not measured")
                break
            if config.early_stop and is_model_type(kind):
                why = trend_is_clear(backend, config.stop_margin)
                if why:
                    backend.stopped_early = why
                    break
        cells = [x for x in backend.lengths if (x.kind or own) == kind and x.score is not None]
        if cells:
            best_of[kind] = max(cells, key=lambda x: x.score)
    ngram_best = max((k for k in best_of if is_ngram_type(k)), key=lambda k: best_of[k].score, default=None)
    for chain in chain_kinds(own, available, listed, config, ngram_best):
        head = next((p for p in kinds.parts(chain) if is_model_type(p)), None)
        ngram = next((p for p in kinds.parts(chain) if is_ngram_type(p)), None)
        hg = best_of[head].g if head in best_of else (config.lengths[0] if config.lengths else 3)
        ng = best_of[ngram].g if ngram in best_of else (config.ngram_lengths[0] if config.ngram_lengths else 8)
        g = hg
        if not done(chain, g):
            measure(chain, g, cell_knobs(chain, g, config, head_g=hg, ngram_g=ng))
    if not any(kinds.has_head(lr.kind or own) for lr in backend.lengths) and backend.lengths:
        backend.notes.append("n-gram drafting only: no acceptance model is fitted (its drafts "
                             "come where the text repeats; measured, not predicted)")
    refresh_predictions(backend)
    best = backend.best()
    if best is None:
        return backend
    # nothing to confirm when no drafted setting reached the bar (the choice is then no
    # drafting); the long generation still says whether the build is safe to draft on
    reached = best.score is not None and best.score > 1.0 + config.threshold

    # long generation and confirmation at the best cell
    kind = best.kind or own
    if not backend.long_checked or (backend.confirmed is None and reached):
        budget.check()
        ep, pid, info = server(kind, best.knobs)
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
            if backend.safe and backend.confirmed is None and reached:
                confirm = replace(config.bench, parts=("pairs",), seeds=config.confirm_seeds,
                                  n_predict=config.confirm_tokens)
                res = run(ep, info, confirm, new_result(arms.model, confirm))
                backend.confirmed = res.summary
                speedups = [p.speedup for p in res.pairs if p.speedup is not None]
                backend.confirmed_robust = robust(speedups) if speedups else None
        finally:
            stop(pid)
    return backend


def _gate_backend(pool: ServerPool, root: Root, arms, binary: str, plain_ep: Endpoint,
                  backend: BackendResult, stride: int) -> None:
    """The gate before ``binary`` is measured: its plain server (running or started above)
    against the same binary's CPU backend on the route's file."""
    from ojai_setup.measure.gate import Backend, run_gate, scripts

    try:
        _, reference = scripts(_script_for(arms.plain, binary))
    except BenchError as exc:
        backend.gate_failed = f"the correctness gate could not start: {exc}"
        return
    run = run_gate(pool, arms.plain.name, Backend(url=plain_ep.url, api_key=plain_ep.api_key),
                   reference, stride=stride, root=root)
    backend.gate = run.model_dump(mode="json")
    if run.figures is None:
        backend.gate_failed = f"the correctness gate could not be run: {run.error}"
    elif not run.figures.passed:
        backend.gate_failed = run.finding
    else:
        backend.gate["passed"] = True


def _save(root: Root, result: TuneResult, tuning) -> None:
    """Write the route's tuning through the plan's file (``result.written``), or say in
    ``result.stopped`` that it could not be written and how to write it."""
    from ojai_setup.apply.tuning import save_route_tuning

    try:
        path = save_route_tuning(root, result.route, tuning)
    except PermissionError as exc:
        result.stopped = ((result.stopped + "; ") if result.stopped else "") + (
            f"cannot write {exc.filename}: permission denied; run the same command with sudo "
            "to write the choice (the measurements are kept and reused)")
        return
    result.written = str(path)


def _choose_and_write(root: Root, arms, config: TuneConfig, result: TuneResult, progress_path: Path) -> None:
    """The choice: the safe backend's best setting when its confirmed median's interval lies
    above ``1 + threshold``; else, once the sweep finished, no drafting (a loss, or a gain
    within noise, is never written as a drafted setting)."""
    from ojai_setup.formats.tuning import BackendTuning, RouteTuning

    if result.depth_choice is not None:
        if result.depth_choice.binary is not None and not result.interrupted:
            _write_depth_choice(root, config, result, progress_path)
        return
    bar = 1.0 + config.threshold
    finished = [b for b in result.backends if b.best() is not None and b.safe]
    if not finished or result.interrupted:
        return  # nothing measured to the end on a safe backend: no choice
    winners = [b for b in finished if b.safe and b.confirmed_robust is not None
               and b.confirmed_robust.ci_low is not None and b.confirmed_robust.ci_low > bar]
    date = result.finished or result.started
    results = root.machine_path(progress_path) if root.path != Path("/") else str(progress_path)
    backends = {b.binary: BackendTuning(safe=bool(b.safe), reason=b.gate_failed or b.long_collapse or "",
                                        draft_n_max=b.best_g if kinds.has_head(b.best_kind or b.own_kind) else None,
                                        speedup=b.confirmed_robust.median if b.confirmed_robust else None)
                for b in result.backends if b.safe is not None}
    if winners:
        best = max(winners, key=lambda b: b.confirmed_robust.median)
        cell = best.best()
        kind = cell.kind or best.own_kind
        result.chosen_binary, result.chosen_kind = best.binary, kind
        result.chosen_g, result.chosen_knobs = cell.g, dict(cell.knobs)
        result.chosen_speedup = best.confirmed_robust.median
        r = best.confirmed_robust
        result.choice = (f"{cell.label(best.own_kind)} with {best.binary}: confirmed median "
                         f"{(r.median - 1) * 100:+.1f}% over {r.n} pairs ({r.ci_level:.0%} interval "
                         f"{(r.ci_low - 1) * 100:+.1f}% to {(r.ci_high - 1) * 100:+.1f}%, above the "
                         f"threshold {config.threshold:+.0%})")
        head_n = cell.knobs.get("--spec-draft-n-max")
        tuning = RouteTuning(spec_type=kind, draft_n_max=head_n,
                             knobs={k: v for k, v in cell.knobs.items() if k != "--spec-draft-n-max"},
                             date=date, speedup=result.chosen_speedup, binary=best.binary,
                             results=results, backends=backends)
    else:
        cands = [(b, b.best()) for b in finished]
        b, cell = max(cands, key=lambda bc: (bc[0].confirmed_robust.median if bc[0].confirmed_robust
                                             else bc[1].score or 0.0))
        r = b.confirmed_robust
        figure = (f"confirmed median {(r.median - 1) * 100:+.1f}% over {r.n} pairs"
                  + (f" ({r.ci_level:.0%} interval {(r.ci_low - 1) * 100:+.1f}% to "
                     f"{(r.ci_high - 1) * 100:+.1f}%)" if r.ci_low is not None else "")) if r else \
            f"median {((cell.score or 0) - 1) * 100:+.1f}% in the sweep"
        result.chosen_kind, result.chosen_binary = "none", None
        result.chosen_speedup = r.median if r else cell.score
        reason = (f"no setting beat plain by {config.threshold:.0%} with its interval: best "
                  f"{cell.label(b.own_kind)}, {figure}")
        result.choice = f"no drafting (the plain route): {reason}"
        tuning = RouteTuning(drafting=False, reason=reason, date=date, speedup=result.chosen_speedup,
                             binary=b.binary, results=results, backends=backends)
    if config.write:
        _save(root, result, tuning)


def _write_depth_choice(root: Root, config: TuneConfig, result: TuneResult, progress_path: Path) -> None:
    """The depth sweep's choice (:func:`ojai_setup.domain.sweep.choose`) written through the
    plan: the winning binary, and its drafted setting or no drafting."""
    from ojai_setup.formats.tuning import BackendTuning, RouteTuning

    choice = result.depth_choice
    b = next(x for x in result.backends if x.binary == choice.binary)
    at = {c.drafting: c for c in result.cells if c.binary == b.binary and c.depth == choice.depth}
    plain = at.get("plain")
    drafted = next((c for c in at.values() if not c.plain), None)
    speedup = (drafted.gen_tps / plain.gen_tps if drafted and plain and drafted.gen_tps
               and plain.gen_tps else None)
    date = result.finished or result.started
    results = root.machine_path(progress_path) if root.path != Path("/") else str(progress_path)
    backends = {x.binary: BackendTuning(safe=x.gate_failed is None and x.long_collapse is None,
                                        reason=x.gate_failed or x.long_collapse or "",
                                        draft_n_max=x.best_g if kinds.has_head(x.best_kind or x.own_kind) else None,
                                        speedup=x.confirmed_robust.median if x.confirmed_robust else None)
                for x in result.backends}
    result.chosen_binary, result.chosen_speedup = b.binary, speedup
    if choice.drafted:
        cell = b.best()
        kind = cell.kind or b.own_kind
        result.chosen_kind, result.chosen_g, result.chosen_knobs = kind, cell.g, dict(cell.knobs)
        result.choice = choice.reason
        tuning = RouteTuning(spec_type=kind, draft_n_max=cell.knobs.get("--spec-draft-n-max"),
                             knobs={k: v for k, v in cell.knobs.items() if k != "--spec-draft-n-max"},
                             date=date, speedup=speedup, binary=b.binary, results=results,
                             backends=backends)
    else:
        result.chosen_kind = "none"
        result.choice = f"no drafting (the plain route): {choice.reason}"
        tuning = RouteTuning(drafting=False, reason=choice.reason, date=date, speedup=speedup,
                             binary=b.binary, results=results, backends=backends)
    if config.write:
        _save(root, result, tuning)


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
            for col in ("kind", "length", "pairs", "median", "interval", "outliers", "predicted",
                        "tokens/step", "a"):
                table.add_column(col, justify="left" if col == "kind" else "right")
            for lr in b.lengths:
                r = lr.robust
                best = lr.g == b.best_g and lr.kind == b.best_kind
                table.add_row((lr.kind or b.own_kind or "draft") + (" *" if best else ""), str(lr.g),
                              str(len(lr.pairs)),
                              f"{lr.score:.3f}x" if lr.score is not None else "-",
                              f"{r.ci_low:.2f}-{r.ci_high:.2f}" if r and r.ci_low is not None else "-",
                              ", ".join(f"{x:.2f}x" for x in r.outliers) if r and r.outliers else "-",
                              f"{lr.predicted:.3f}x" if lr.predicted is not None else
                              ("not predictive" if not is_head(lr) else "-"),
                              f"{lr.mean_accepted_length:.2f}" if lr.mean_accepted_length else "-",
                              f"{lr.acceptance:.2f}" if lr.acceptance is not None and is_head(lr) else "-")
            term.print(table)
            if b.acceptance is not None and b.draft_cost is not None:
                err = f"; predictions within {b.max_prediction_error:.0%} of measured" if b.max_prediction_error is not None else ""
                term.print(f"fit (draft heads, geometric acceptance): a = {b.acceptance:.3f}, c = "
                           f"{b.draft_cost:.3f}, a pass's fitted base cost {b.pass_base:.2f} plain tokens{err}")
            g = (b.gate or {}).get("figures")
            if g:
                term.print(f"gate against its CPU backend: top-1 agreement {g['agreement'] * 100:.1f} %, "
                           f"mean KL {g['mean_kl']:.4f} nats over {g['positions']} positions: "
                           + ("pass" if not b.gate_failed else "[bold red]FAIL[/]"))
            if b.gate_failed:
                term.print(f"[bold red]not adopted:[/] {b.gate_failed}")
            for note in b.notes:
                term.print(note)
            if b.stopped_early:
                term.print(f"stopped early: {b.stopped_early}")
            if b.long_checked:
                term.print("long generation: " + (f"[bold red]unsafe for drafting[/]: {b.long_collapse}"
                                                  if b.long_collapse else "no collapse"))
            r = b.confirmed_robust
            if r:
                term.print(f"confirmed {b.best().label(b.own_kind) if b.best() else ''}: median "
                           f"{(r.median - 1) * 100:+.1f}% over {r.n} pairs"
                           + (f" ({r.ci_level:.0%} interval {(r.ci_low - 1) * 100:+.1f}% to "
                              f"{(r.ci_high - 1) * 100:+.1f}%)" if r.ci_low is not None else "")
                           + (f"; outliers {', '.join(f'{x:.2f}x' for x in r.outliers)}" if r.outliers else ""))
        if result.cells or result.sweep_error:
            for line in sweep_lines(result):
                term.print(line)
        if result.choice:
            term.print(f"choice: {result.choice}")
            if result.written:
                term.print(f"written to {result.written}; `ojai setup` shows the change to the launch scripts "
                           "and Lemonade's options, `ojai setup --apply` makes it")
        else:
            term.print("no choice made: no backend finished its sweep, long-generation check and confirmation")


def sweep_table(result: TuneResult):
    """The backend x drafting x depth table: one row a cell, read in one pass at 80 columns.
    ``gen`` against the plain decoding limit at its depth (``limit``), drafted against the same backend's
    plain at the same depth (``vs plain``); ``*`` marks the choice."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, title="backend x drafting x depth (tokens/s)",
                  title_justify="left", pad_edge=False)
    for col, justify in (("", "left"), ("backend", "left"), ("drafting", "left"),
                         ("depth", "right"), ("prompt", "right"), ("gen", "right"),
                         ("limit", "right"), ("vs plain", "right")):
        table.add_column(col, justify=justify, overflow="fold")
    choice = result.depth_choice
    order = {b.binary: i for i, b in enumerate(result.backends)}
    cells = sorted(result.cells, key=lambda c: (c.depth, order.get(c.binary, 99), not c.plain))
    for c in cells:
        plain = next((x for x in result.cells if x.binary == c.binary and x.depth == c.depth
                      and x.plain), None)
        chosen = (choice is not None and choice.binary == c.binary and choice.depth == c.depth
                  and choice.drafted == (not c.plain))
        limit = result.limit.tokens_per_second_at(c.depth) if result.limit else None
        vs = (f"{(c.gen_tps / plain.gen_tps - 1) * 100:+.0f} %" if not c.plain and plain
              and plain.gen_tps and c.gen_tps else "")
        table.add_row("*" if chosen else "", c.backend, c.drafting if not c.error else
                      f"{c.drafting}: failed", str(c.depth),
                      f"{c.prompt_tps:.0f}" if c.prompt_tps else "-",
                      f"{c.gen_tps:.1f}" if c.gen_tps else "-",
                      f"{c.gen_tps / limit * 100:.0f} %" if c.gen_tps and limit else "-", vs)
    return table


def sweep_lines(result: TuneResult) -> list:
    out: list = []
    if result.cells:
        out.append(sweep_table(result))
    for c in result.cells:
        if c.error:
            out.append(f"{c.backend} {c.drafting}: {c.error}")
    if result.noise:
        out.append(f"noise: {result.noise.sentence()}; a comparison counts above it")
    else:
        out.append("noise: not measured (no second plain server answered)")
    if result.limit:
        out.append(f"limit: {result.limit.sentence()}; drafting can pass it (several tokens "
                   "a pass), plain decoding cannot")
    if result.sweep_error:
        out.append(f"depth sweep: {result.sweep_error}")
    if result.plot:
        out.append(f"plot: {result.plot}")
    elif result.no_plot:
        out.append(f"no plot: {result.no_plot}")
    return out
