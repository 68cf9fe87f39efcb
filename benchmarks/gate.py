"""Figures of the correctness gate on the real model: agreement, KL and time.

    python benchmarks/gate.py [--stride 1] [--threads 2] [--only NAME,...]

Gemma 3 270M Q4_K_M (``tests/support/gemma.py``) on the real CPU llama-server the tests build
(build 11434, ``tests/support/llama.py``). Every case is one gate (``ojai_setup.measure.gate``):
the reference is the build's CPU backend on the original file (``--device none``), the backend
under test a server started from a launch script, teacher-forced over the gate's fixed text.
Printed per case: top-1 agreement, mean and largest KL (nats), the verdict, the seconds each
server took to read the text and the prompt tokens it evaluated.

Cases: the reference against itself (``cpu``); kernel and cache changes a real backend differs
by, all of which must pass (flash attention off: b11434 turns it on by default; a q8_0 KV cache;
one thread; a 16-token batch);
and wrong backends, which must fail: the same file with one layer's or every layer's
``ffn_down`` blocks in reverse order (``tests/support/corrupt_gguf.py``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from ojai_setup.measure.servers import LaunchScript, ServerPool  # noqa: E402
from ojai_setup.measure.gate import Backend, run_gate, scripts  # noqa: E402
from support.corrupt_gguf import corrupt_copy  # noqa: E402
from support.gemma import ensure_gemma  # noqa: E402
from support.llama import ensure_llama_server  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="")
    opts = parser.parse_args()
    # a SIGTERM unwinds like Ctrl-C, so that the servers started below are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    binary = str(ensure_llama_server())
    model = ensure_gemma()
    base = LaunchScript("set -euo pipefail\n", (binary, "-m", str(model), "-t", str(opts.threads),
                                                 "--no-warmup", "--port", "0"))
    test, reference = scripts(base)
    with tempfile.TemporaryDirectory(prefix="ojai-gate-") as tmp:
        folder = Path(tmp)
        one = folder / "one-layer.gguf"
        every = folder / "every-layer.gguf"
        corrupt_copy(model, one, r"^blk\.5\.ffn_down\.weight$")
        corrupt_copy(model, every)
        cases = {
            "cpu": test.argv,
            "no-flash-attn": (*test.argv, "-fa", "off"),
            "kv-q8_0": (*test.argv, "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"),
            "1-thread": tuple(a if a != str(opts.threads) else "1" for a in test.argv),
            "batch-16": (*test.argv, "-b", "16", "-ub", "16"),
            "corrupt-1-layer": tuple(str(one) if a == str(model) else a for a in test.argv),
            "corrupt-every-layer": tuple(str(every) if a == str(model) else a for a in test.argv),
        }
        wanted = [c for c in opts.only.split(",") if c] or list(cases)
        print(f"{'case':<22}{'agree':>8}{'mean KL':>10}{'max KL':>9}  verdict"
              f"{'test s':>8}{'ref s':>7}{'evals':>7}{'total s':>9}")
        with ServerPool(log_dir=folder / "logs", ready_timeout=300) as pool:
            for name in wanted:
                began = time.monotonic()
                run = run_gate(pool, name, Backend(script=LaunchScript(test.preamble, cases[name])),
                               reference, stride=opts.stride)
                total = time.monotonic() - began
                if run.figures is None:
                    print(f"{name:<22} error: {run.error}")
                    continue
                f = run.figures
                print(f"{name:<22}{f.agreement * 100:7.1f}%{f.mean_kl:10.2e}{f.max_kl:9.2e}  "
                      f"{f.verdict:<7}{run.test_seconds:8.1f}{run.reference_seconds:7.1f}"
                      f"{run.test_evaluated:7d}{total:9.1f}", flush=True)
        print(f"{run.tokens} tokens of text, stride {opts.stride}: {f.positions} positions per gate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
