"""The ``ojai`` command's entry point: Python's cycle collector waits while a short command runs.

Starting ojai makes thousands of objects that live as long as the process (modules, typer's
parameters, pydantic's models and validators), and the cycle collector scans them again and
again as they appear: about 60 collections and a tenth of ``ojai doctor --json``'s time, with
nothing to collect. So it is off from the first import, and stays off for the commands that
only read and plan (``doctor``, ``models``, ``setup`` without ``--apply``), which end within a
second. Any other command turns it back on before it starts, with what exists by then frozen
out of its way (:func:`resume_collection`).

The interpreter still collects once when it exits, collector off or not: a scan of every object
the command made (about a twentieth of ``ojai doctor --json``'s time), to free memory the
process is about to give back. A short command freezes what it made when it ends, so that this
last collection passes over it (what it wrote is closed, its output flushed as before).
"""

from __future__ import annotations

import gc
import sys

#: the commands that only read the machine and print: no collection while they run
SHORT_COMMANDS = frozenset({"doctor", "models", "setup"})
#: options that make one of those do long work
LONG_OPTIONS = frozenset({"--apply"})


def is_short(argv: list[str]) -> bool:
    """Whether ``argv`` (without the program name) is a command that only reads and plans."""
    return bool(argv) and argv[0] in SHORT_COMMANDS and not LONG_OPTIONS & set(argv[1:])


def resume_collection() -> None:
    """Turn the cycle collector back on when :func:`main` turned it off (never elsewhere: a
    test process keeps its own settings), leaving the objects made so far out of its scans."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def main() -> None:
    gc.disable()
    short = is_short(sys.argv[1:])
    if not short:
        resume_collection()
    from ojai_setup.cli import main as run

    try:
        run()
    finally:
        if short and not gc.isenabled():
            gc.freeze()  # out of the collection the interpreter makes at exit
