"""Figures of real drafting: Gemma 3 270M Q4_K_M on the real CPU llama-server (build 11434).

    python benchmarks/real_drafting.py [--tokens 64] [--seeds 2] [--temperature 0]
                                       [--lengths 1,2,3,4,6] [--ngram-lengths 4,8,16]

The model (from PyPI's chunk packages, ``tests/support/gemma.py``) drafts for itself
(``--spec-draft-model`` the same file, ``--spec-type draft-simple``) and with every n-gram
type of the build and a chain (draft-simple,ngram-mod), against the plain route of the same
file, on prompts whose continuations repeat their text and on free prose. One exhaustive sweep
(``ojai tune``'s machinery, early stopping off, nothing written) measures every kind at every
length; it prints, per cell:

- plain and drafted decode tokens/s (medians over the pairs, the server's timings),
- the accepted share of drafted tokens and the tokens per verification step (``/metrics``),
- the measured median speedup, and for the draft model the speedup predicted by the geometric
  acceptance model with its fitted pass cost (n-gram cells: not predictive, none printed);

then the choice the early-stopping tuner makes from the same measurements vs the sweep's best
(goal: within 5 %), and the draft model's predictions vs its measurements (goal: within 15 %).
Uses the llama-server the tests build (``tests/support/llama.py``).
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
from ojai_setup.measure.prompts import Prompt  # noqa: E402
from ojai_setup.measure.tune import (  # noqa: E402
    TuneConfig, TuneObserver, is_head, replay_sweep, run_tune)
from ojai_setup.core.root import Root  # noqa: E402
from support.gemma import ensure_gemma  # noqa: E402
from support.gemma_machine import PROMPTS, write_gemma_machine  # noqa: E402
from support.llama import ensure_llama_server  # noqa: E402
from support.server import serve  # noqa: E402

PROSE = Prompt("prose", "The old lighthouse keeper climbed the stairs one last time and")


class Cells(TuneObserver):
    """Each cell as it is measured, on stderr: a sweep takes tens of minutes."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def length(self, binary: str, lr) -> None:
        print(f"  [{time.monotonic() - self.started:5.0f} s] {lr.kind or 'own kind'} {lr.g}: "
              f"{lr.score:.3f}x over {len(lr.pairs)} pairs", file=sys.stderr, flush=True)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--lengths", default="1,2,3,4,6")
    ap.add_argument("--ngram-lengths", default="4,8,16")
    args = ap.parse_args()
    binary, model = ensure_llama_server(), ensure_gemma()
    prompts = tuple(Prompt(i, p) for i, p in PROMPTS) + (PROSE,)
    bench = BenchConfig(prompts=prompts, seeds=tuple(range(1, args.seeds + 1)), n_predict=args.tokens,
                        temperature=args.temperature, template=False)
    config = TuneConfig(lengths=_ints(args.lengths), ngram_lengths=_ints(args.ngram_lengths), bench=bench,
                        min_pairs=3, early_stop=False, long_tokens=0, confirm_seeds=(11, 12),
                        confirm_tokens=args.tokens, write=False)
    print(f"llama-server: {binary}\nmodel: {model}")
    print(f"{len(prompts)} prompts x {args.seeds} seeds, {args.tokens} tokens, temperature {args.temperature}\n")
    with tempfile.TemporaryDirectory() as tmp:
        m = write_gemma_machine(Path(tmp) / "m", binary, model, routes=("gemma-self",), threads=2)
        with serve([m.script("gemma")], m.ports["gemma"], Path(tmp) / "plain.log"):
            t0 = time.monotonic()
            result = run_tune(Root(m.root), "gemma-self", config, observer=Cells())
            elapsed = time.monotonic() - t0
    (b,) = result.backends
    print(f"sweep: {len(b.lengths)} cells in {elapsed:.0f} s" + (f" ({result.stopped})" if result.stopped else ""))
    if not b.lengths:
        return
    print(f"{'kind':24} {'len':>3} {'pairs':>5} {'plain t/s':>9} {'drafted t/s':>11} {'accepted':>8} "
          f"{'tok/step':>8} {'measured':>8} {'predicted':>9} {'error':>7}")
    head_errors = []
    for lr in b.lengths:
        plain = statistics.median(p.plain.server_tps for p in lr.pairs if p.plain.server_tps)
        drafted = statistics.median(p.mtp.server_tps for p in lr.pairs if p.mtp.server_tps)
        dn = sum(p.mtp.draft_n or 0 for p in lr.pairs)
        acc = sum(p.mtp.draft_n_accepted or 0 for p in lr.pairs)
        share = f"{acc / dn:8.1%}" if dn else "       -"
        step = f"{lr.mean_accepted_length:8.2f}" if lr.mean_accepted_length else "       -"
        if lr.predicted is not None:
            err = (lr.predicted - lr.score) / lr.score
            head_errors.append(abs(err))
            pred = f"{lr.predicted:8.3f}x {err:+7.1%}"
        else:
            pred = "not predictive" if not is_head(lr) else "        -        -"
        print(f"{(lr.kind or b.own_kind):24} {lr.g:3} {len(lr.pairs):5} {plain:9.1f} {drafted:11.1f} "
              f"{share} {step} {lr.score:7.3f}x {pred}")
        if lr.robust and lr.robust.outliers:
            print(f"{'':24} outliers: {', '.join(f'{x:.2f}x' for x in lr.robust.outliers)}")
    if b.acceptance is not None and b.draft_cost is not None:
        print(f"\ndraft model fit: a = {b.acceptance:.3f}, c = {b.draft_cost:.3f}, pass base {b.pass_base:.2f}")
    best = max(b.lengths, key=lambda lr: lr.score)
    heads = [lr for lr in b.lengths if is_head(lr)]
    others = [lr for lr in b.lengths if not is_head(lr)]
    chosen_g, seen = replay_sweep(heads, config.stop_margin) if heads else (None, 0)
    tuned_cells = [lr for lr in heads if lr.g == chosen_g] + others
    tuned = max(tuned_cells, key=lambda lr: lr.score)
    print(f"sweep's best: {best.label(b.own_kind)} at {best.score:.3f}x")
    print(f"early-stopping tuner: {tuned.label(b.own_kind)} at {tuned.score:.3f}x "
          f"({tuned.score / best.score - 1:+.1%} of the best; draft model lengths measured: {seen} of {len(heads)})")
    bar = 1 + config.threshold
    print(f"tune's rule: {'a drafted setting if confirmed above' if best.score > bar else 'no drafting: nothing reached'}"
          f" {bar:.2f}x; its run here: {result.choice}")
    if head_errors:
        print(f"draft model predictions: max |predicted - measured| / measured {max(head_errors):.1%}, "
              f"mean {statistics.fmean(head_errors):.1%}")


if __name__ == "__main__":
    main()
