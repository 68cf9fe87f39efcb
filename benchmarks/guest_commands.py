"""Where the guests' time goes: the commands the VM tests ran in their guests, and the boots.

    python benchmarks/guest_commands.py [DIR ...]   (default: the last pytest run's temp folder)

Every guest the tests drive writes ``commands.log`` in its work folder
(``tests/support/vm.py``: each command, then its exit code and seconds; each boot's seconds).
This reads every such log under the folders given, groups the commands by what they run (the
program and, for ``ojai``, its subcommand) and prints, per group, how many ran, their total
and their longest, then the boots, so that a cut in the scenarios' time can aim where it pays.
"""

from __future__ import annotations

import getpass
import re
import shlex
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

DONE = re.compile(r"^\(exit code (-?\d+), ([\d.]+) s\)$")
BOOTED = re.compile(r"^\(booted in ([\d.]+) s\)$")


def group(command: str) -> str:
    """``ojai setup`` for an ojai run, else the first program of the line."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = [w for w in words if "=" not in w.split("/")[0]] or ["?"]
    program = Path(words[0]).name
    if program == "ojai" and len(words) > 1:
        return f"ojai {words[1]}"
    return program


def read(log: Path) -> tuple[list[tuple[str, float]], list[float]]:
    commands, boots, pending = [], [], None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("$ ") and not line.endswith("(not waiting for an answer)"):
            pending = line[2:]
        elif (m := DONE.match(line)) and pending is not None:
            commands.append((pending, float(m.group(2))))
            pending = None
        elif m := BOOTED.match(line):
            boots.append(float(m.group(1)))
    return commands, boots


def main(argv: list[str]) -> int:
    tops = [Path(a) for a in argv] or [
        Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}" / "pytest-current"]
    logs = sorted(p for top in tops for p in top.rglob("commands.log"))
    if not logs:
        print(f"no commands.log under {', '.join(map(str, tops))}: run the VM tests first")
        return 1
    groups: dict[str, list[float]] = defaultdict(list)
    boots: list[float] = []
    for log in logs:
        commands, booted = read(log)
        boots += booted
        for command, seconds in commands:
            groups[group(command)].append(seconds)
    total = sum(map(sum, groups.values())) + sum(boots)
    print(f"{len(logs)} guests; {total:.0f} s in commands and boots\n")
    print(f"{'what':28} {'count':>5} {'total s':>8} {'share':>6} {'longest s':>9}")
    rows = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    if boots:
        rows.insert(0, ("(boots)", boots))
        rows.sort(key=lambda kv: -sum(kv[1]))
    for name, times in rows[:25]:
        print(f"{name[:28]:28} {len(times):5} {sum(times):8.0f} {sum(times) / total:6.1%} "
              f"{max(times):9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
