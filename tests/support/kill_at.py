"""Run the ojai command line and kill this very process with SIGKILL at a chosen point.

    python tests/support/kill_at.py STAGE N setup --root DIR --apply --yes ...

``STAGE`` is a fault point name (``journal-opened``, ``action-start``, ``before-rename``,
``action-done``, ``handler-start``, ``restore-start``, ...); the process is killed, as
``kill -9`` would, the ``N``-th time it reaches that point. Nothing is cleaned up and no
``finally`` runs: what is left on the machine is what a real kill leaves.
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    stage, nth, *args = sys.argv[1:]
    wanted = int(nth)
    seen = 0

    def hook(name: str) -> None:
        nonlocal seen
        if name == stage:
            seen += 1
            if seen == wanted:
                os.kill(os.getpid(), signal.SIGKILL)

    from ojai_setup.apply.faults import set_fault_hook
    from ojai_setup.cli import app

    set_fault_hook(hook)
    sys.argv = ["ojai", *args]
    app()


if __name__ == "__main__":
    main()
