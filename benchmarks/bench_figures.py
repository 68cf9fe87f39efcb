"""Figures of ojai bench and ojai tune, on the real CPU llama-server with tiny models.

    python benchmarks/bench_figures.py [--tokens 512] [--seeds 3] [--skip-tune]

1. Harness overhead: decode tokens/s measured by ojai bench from streamed arrival times vs
   the server's own ``timings.predicted_per_second``, over every arm of a paired campaign
   (target: < 2 % apart).
2. Synthetic acceptance: for several ``--spec-synth-rates`` vectors, the measured mean
   accepted length per verification step vs the ``1 + sum(rates)`` the rates imply
   (target: within 5 %).
3. Tuning: an exhaustive sweep of ``--spec-draft-n-max`` 1..8 at synthetic per-token
   acceptance 0.8; the early-stopping tuner's choice over the same runs vs the best length
   (target: within 5 % in speedup), and the model's predictions vs the measured speedups
   (target: within 15 %).

Uses the llama-server the tests build (``tests/support/llama.py``; built on first use).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from ojai_setup.measure.campaign import BenchConfig  # noqa: E402
from ojai_setup.measure.command import run_bench  # noqa: E402
from ojai_setup.measure.prompts import Prompt  # noqa: E402
from ojai_setup.core.root import Root  # noqa: E402
from ojai_setup.measure.tune import TuneConfig, replay_sweep, run_tune  # noqa: E402
from support.bench_machine import MODEL, write_bench_machine  # noqa: E402
from support.llama import ensure_llama_server  # noqa: E402

PROMPTS = (Prompt("a", "the tiny model"), Prompt("b", "speculative decoding with a small draft"),
           Prompt("c", "a fast server for llama and gemma"))
RATE_SETS = ([0.8, 0.6, 0.4], [0.9, 0.8, 0.7, 0.6], [0.5, 0.25], [0.95, 0.9, 0.85, 0.8, 0.75, 0.7])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--skip-tune", action="store_true")
    ap.add_argument("--tune-seeds", type=int, default=8,
                    help="seeds per prompt at each draft length of the sweep")
    ap.add_argument("--tune-tokens", type=int, default=512, help="tokens per run of the sweep")
    args = ap.parse_args()
    binary = ensure_llama_server()
    gaps: list[float] = []
    print(f"llama-server: {binary}")
    print(f"paired campaigns: {len(PROMPTS)} prompts x {args.seeds} seeds, {args.tokens} tokens per run\n")
    print("synthetic rates                      implied  measured  difference")
    for rates in RATE_SETS:
        with tempfile.TemporaryDirectory() as tmp:
            m = write_bench_machine(Path(tmp) / "m", binary, draft_n_max=len(rates), synth_rates=rates,
                                    threads=2)
            config = BenchConfig(prompts=PROMPTS, seeds=tuple(range(1, args.seeds + 1)), n_predict=args.tokens,
                                 template=False, ignore_eos=True, parts=("pairs",))
            result, _ = run_bench(Root(m.root), config, save=False)
        for p in result.pairs:
            for arm in (p.mtp, p.plain):
                gaps.append((arm.harness_tps - arm.server_tps) / arm.server_tps)
        implied, measured = result.model.implied_mean_length, result.model.mean_accepted_length
        print(f"{','.join(map(str, rates)):36} {implied:7.3f}  {measured:8.3f}  {(measured - implied) / implied:+9.2%}")
    abs_gaps = [abs(g) for g in gaps]
    print(f"\nharness vs server decode tokens/s over {len(gaps)} runs: mean {statistics.fmean(gaps):+.2%}, "
          f"mean |gap| {statistics.fmean(abs_gaps):.2%}, max |gap| {max(abs_gaps):.2%}")
    if args.skip_tune:
        return
    with tempfile.TemporaryDirectory() as tmp:
        m = write_bench_machine(Path(tmp) / "m", binary, draft_n_max=2, threads=2)
        bench = BenchConfig(prompts=PROMPTS, seeds=tuple(range(1, args.tune_seeds + 1)),
                            n_predict=args.tune_tokens, template=False, ignore_eos=True)
        t0 = time.monotonic()
        result = run_tune(Root(m.root), MODEL, TuneConfig(lengths=tuple(range(1, 9)), bench=bench, early_stop=False,
                                                         long_tokens=0, synthetic_acceptance=0.8,
                                                         confirm_seeds=(11, 12), confirm_tokens=256, write=False))
        elapsed = time.monotonic() - t0
    (b,) = result.backends
    print(f"\ntune sweep at synthetic a = 0.8 ({elapsed:.0f} s): fitted a = {b.acceptance:.3f}, c = {b.draft_cost:.3f}, "
          f"base cost of a pass {b.pass_base:.2f}")
    print(" g  measured  predicted  error")
    for lr in b.lengths:
        print(f"{lr.g:2}  {lr.measured.mean:8.3f}  {lr.predicted:9.3f}  {(lr.predicted - lr.measured.mean) / lr.measured.mean:+6.1%}")
    measured = {lr.g: lr.measured.mean for lr in b.lengths}
    best = max(measured.values())
    chosen, seen = replay_sweep(b.lengths, 0.03)
    print(f"best measured length {b.best_g} ({best:.3f}x); the early-stopping tuner would choose {chosen} "
          f"({measured[chosen]:.3f}x, {measured[chosen] / best - 1:+.1%}) after measuring {seen} lengths")
    print(f"max |predicted - measured| / measured: {b.max_prediction_error:.1%}")


if __name__ == "__main__":
    main()
