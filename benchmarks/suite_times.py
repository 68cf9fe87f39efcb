"""How long the test suite takes: the fast loop, timed here, and what a `.ci/run` printed.

    python benchmarks/suite_times.py [--runs 3] [--ci-log FILE [--cold]]

Runs the README's fast loop (every test not marked slow, vm or hip_build, on two workers)
``--runs`` times from this checkout's ``.venv`` and prints each wall time, the median and the
target (2 minutes). With ``--ci-log``, also prints the times a ``bash .ci/run`` wrote at its
end (each part of the preparation, pytest, the total) against its target: 25 minutes for a
warm run, 45 minutes with ``--cold`` (empty caches, Debian's packages missing).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAST_LOOP = ["-m", "pytest", "-q", "-n", "2", "-m", "not slow and not vm and not hip_build",
             "-p", "no:cacheprovider"]
#: issue 44's targets
FAST_TARGET_S = 120
WARM_TARGET_S = 1500
COLD_TARGET_S = 2700


def fast_loop(runs: int) -> None:
    python = REPO / ".venv" / "bin" / "python"
    took = []
    for n in range(runs):
        started = time.monotonic()
        proc = subprocess.run([str(python), *FAST_LOOP], cwd=REPO, capture_output=True,
                              text=True)
        took.append(time.monotonic() - started)
        summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"fast loop {n + 1}: {took[-1]:6.1f} s  {summary}", flush=True)
        if proc.returncode != 0:
            print(proc.stdout[-3000:], file=sys.stderr)
            raise SystemExit(1)
    median = statistics.median(took)
    verdict = "ok" if median <= FAST_TARGET_S else "OVER TARGET"
    print(f"fast loop median {median:.1f} s (target {FAST_TARGET_S} s): {verdict}")


def ci_log(path: Path, cold: bool) -> None:
    text = path.read_text(errors="replace")
    block = text[text.rindex("times (s):"):] if "times (s):" in text else ""
    if not block:
        raise SystemExit(f"{path}: no 'times (s):' block; is it the output of bash .ci/run?")
    print(block.split("\ntotal ")[0].rstrip())
    total = int(re.search(r"total (\d+)", block).group(1))
    target = COLD_TARGET_S if cold else WARM_TARGET_S
    kind = "cold" if cold else "warm"
    verdict = "ok" if total <= target else "OVER TARGET"
    print(f"{kind}: total {total} s (target {target} s): {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fast-loop runs (0: none)")
    parser.add_argument("--ci-log", type=Path, help="the output of a `bash .ci/run`")
    parser.add_argument("--cold", action="store_true", help="that run started from empty caches")
    args = parser.parse_args()
    if args.ci_log:
        ci_log(args.ci_log, args.cold)
    if args.runs:
        fast_loop(args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
