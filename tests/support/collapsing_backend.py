"""A llama-server build that collapses under MTP, for the tuner's per-backend safety check.

Written out as an executable (:func:`write_collapsing_backend`) that a launch script can run
in place of the real binary: ``--version`` prints an upstream version line on stderr; with
any other arguments it serves the streaming completion API on ``--port`` (see
:mod:`support.stream_stand_in`). When started with ``--spec-type`` other than ``none`` (the MTP route) its
throughput falls to a fifth after ``SLOW_AFTER`` tokens, the shape seen on one backend in
long generations; without it (the plain route) it stays steady.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

SLOW_AFTER = 150


def write_collapsing_backend(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "llama-server"
    tests = Path(__file__).resolve().parents[1]
    path.write_text(f"#!{sys.executable}\n"
                    f"import sys; sys.path.insert(0, {str(tests)!r})\n"
                    "from support.collapsing_backend import main\n"
                    "main(sys.argv[1:])\n")
    path.chmod(0o755)
    return path


def main(argv: list[str]) -> None:
    if argv[:1] == ["--version"]:
        print("version: 0.6.0-dev (build 11434, commit c011a95)", file=sys.stderr)
        return
    from support.stream_stand_in import Pace, serve_on

    port = int(argv[argv.index("--port") + 1])
    # the plain route turns drafting off explicitly (--spec-type none)
    speculative = "--spec-type" in argv and argv[argv.index("--spec-type") + 1:][:1] != ["none"]
    pace = Pace(delay=0.002, slow_after=SLOW_AFTER if speculative else None, slow_delay=0.010)
    with serve_on(port, pace):
        while True:
            time.sleep(3600)
