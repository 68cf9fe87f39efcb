"""Median wall time of ojai's read-only commands on the test machines.

    python benchmarks/cli_speed.py [--runs 10]

Prints the median (and min/max) of N runs of each command, each in a fresh process, as a
user would run them: with Python's bytecode cache (pip compiles it when it installs ojai; one
warm-up run fills it for a source checkout). Each median is also given as a ratio of the
import floor, `python -c "import typer, rich, pydantic, jinja2, sh, distro"` timed in the same
run, so the figures compare across machines. Targets: `ojai doctor --json` on the OJAI box
<= 1.15x the floor; `ojai setup` with nothing to do (every step planned) <= 1.6x. A third line
times the least any command of this stack costs (a typer app set up as ojai's whose command
validates one pydantic model and prints it): what ojai itself adds is the distance from it.
(PYTHONDONTWRITEBYTECODE, if set, is dropped for the measured runs.)

The commands run in rounds (floor, doctor, setup, floor, doctor, ...), so a load that comes and
goes on a shared machine falls on all of them alike. Each line also gives the median CPU time
(user + system, of the process and its children), which a busy machine disturbs less than the
wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
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


def run_once(argv: list[str], ok_codes: tuple[int, ...]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv`` (CPU: the process and the children it waited
    for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, env=ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in ok_codes:
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def timed(commands: dict[str, tuple[list[str], tuple[int, ...]]], runs: int
          ) -> dict[str, tuple[list[float], list[float]]]:
    """``runs`` rounds of every command, one after the other; wall and CPU times per command."""
    for argv, _ in commands.values():
        subprocess.run(argv, capture_output=True, env=ENV)  # warm-up: fills the bytecode cache
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in commands}
    for _ in range(runs):
        for name, (argv, ok_codes) in commands.items():
            wall, cpu = run_once(argv, ok_codes)
            times[name][0].append(wall)
            times[name][1].append(cpu)
    return times


FLOOR = [sys.executable, "-c", "import typer, rich, pydantic, jinja2, sh, distro"]

#: the least a command of this stack does: a typer app set up as ojai's (a group of commands,
#: completion, no pretty exceptions) whose command validates one small pydantic model and
#: prints it as JSON. ojai's own work is what a command costs beyond this line.
STACK = [sys.executable, "-c", """
import os, sys
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
from pathlib import Path
from typing import Annotated
import typer
from pydantic import BaseModel
app = typer.Typer(name="x", add_completion=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, no_args_is_help=True)
class Report(BaseModel):
    root: str
    ok: bool
@app.command()
def doctor(root: Annotated[Path, typer.Option("--root")] = Path("/"),
           json: Annotated[bool, typer.Option("--json")] = False):
    print(Report(root=str(root), ok=True).model_dump_json())
@app.command()
def setup(root: Annotated[Path, typer.Option("--root")] = Path("/")):
    pass
sys.argv = ["x", "doctor", "--json", "--root", "/"]
app()
"""]


def report(name: str, times: tuple[list[float], list[float]], floor: tuple[float, float] | None = None,
           target: float | None = None) -> tuple[float, float]:
    wall, cpu = times
    med, cpu_med = statistics.median(wall), statistics.median(cpu)
    line = f"{name:<58} median {med:.3f} s (min {min(wall):.3f}, max {max(wall):.3f}), cpu {cpu_med:.3f} s"
    if floor:
        ratio = med / floor[0]
        verdict = "ok" if ratio <= target else "OVER TARGET"
        line += (f"  {ratio:.2f}x floor (target {target:.2f}x: {verdict}); "
                 f"cpu {cpu_med / floor[1]:.2f}x")
    print(line)
    return med, cpu_med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    base = ojai()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "m"
        shutil.copytree(MACHINES / "ojai-fresh", root, symlinks=True)
        subprocess.run(base + ["setup", "--apply", "--yes", "--root", str(root), "--llamacpp", "none"],
                       check=True, capture_output=True)
        times = timed({
            "floor": (FLOOR, (0,)),
            "stack": (STACK, (0,)),
            "doctor": (base + ["doctor", "--json", "--root", str(MACHINES / "ojai-fresh")], (0, 1)),
            "setup": (base + ["setup", "--root", str(root), "--llamacpp", "none"], (0,)),
        }, args.runs)
    floor = report("import floor (typer, rich, pydantic, jinja2, sh, distro)", times["floor"])
    report("typer app + one pydantic model (the stack's least command)", times["stack"], floor, 1.15)
    report("ojai doctor --json --root <ojai-fresh>", times["doctor"], floor, 1.15)
    report("ojai setup --root <provisioned ojai box> (nothing to do)", times["setup"], floor, 1.6)


if __name__ == "__main__":
    main()
