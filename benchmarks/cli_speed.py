"""Median wall time of ojai's read-only commands on the test machines.

    python benchmarks/cli_speed.py [--runs 10]

Prints the median (and min/max) of N runs of each command, each in a fresh process, as a
user would run them: with Python's bytecode cache (pip compiles it when it installs ojai; one
warm-up run fills it for a source checkout). Each median is also given as a ratio of the
import floor, `python -c "import typer, rich, pydantic, jinja2, sh, distro"` timed in the same
run, so the figures compare across machines. Targets: `ojai doctor --json` on the OJAI box
<= 1.15x the floor; `ojai setup` with nothing to do (every step planned) <= 1.6x.
(PYTHONDONTWRITEBYTECODE, if set, is dropped for the measured runs.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MACHINES = REPO / "tests" / "machines"


def ojai() -> list[str]:
    exe = Path(sys.executable).parent / "ojai"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ojai_setup.cli"]


ENV = dict(os.environ)


def timed(argv: list[str], runs: int, ok_codes: tuple[int, ...]) -> list[float]:
    subprocess.run(argv, capture_output=True, env=ENV)  # warm-up: fills the bytecode cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, env=ENV)
        times.append(time.perf_counter() - start)
        if proc.returncode not in ok_codes:
            sys.exit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr}")
    return times


FLOOR = [sys.executable, "-c", "import typer, rich, pydantic, jinja2, sh, distro"]


def report(name: str, times: list[float], floor: float | None = None,
           target: float | None = None) -> float:
    med = statistics.median(times)
    line = f"{name:<58} median {med:.3f} s (min {min(times):.3f}, max {max(times):.3f})"
    if floor:
        ratio = med / floor
        verdict = "ok" if ratio <= target else "OVER TARGET"
        line += f"  {ratio:.2f}x floor (target {target:.2f}x: {verdict})"
    print(line)
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    base = ojai()
    floor = report("import floor (typer, rich, pydantic, jinja2, sh, distro)",
                   timed(FLOOR, args.runs, (0,)))
    times = timed(base + ["doctor", "--json", "--root", str(MACHINES / "ojai-fresh")], args.runs, (0, 1))
    report("ojai doctor --json --root <ojai-fresh>", times, floor, 1.15)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "m"
        shutil.copytree(MACHINES / "ojai-fresh", root, symlinks=True)
        subprocess.run(base + ["setup", "--apply", "--yes", "--root", str(root), "--llamacpp", "none"],
                       check=True, capture_output=True)
        times = timed(base + ["setup", "--root", str(root), "--llamacpp", "none"], args.runs, (0,))
        report("ojai setup --root <provisioned ojai box> (nothing to do)", times, floor, 1.6)


if __name__ == "__main__":
    main()
