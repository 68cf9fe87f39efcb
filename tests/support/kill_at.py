"""Run the ojai command line and kill this very process with SIGKILL at a chosen point.

    python tests/support/kill_at.py STAGE N setup --root DIR --apply --yes ...

``STAGE`` is a fault point name (``journal-opened``, ``action-start``, ``before-rename``,
``action-done``, ``handler-start``, ``restore-start``, ...); the process is killed, as
``kill -9`` would, the ``N``-th time it reaches that point. ``STAGE,LATER`` fires at ``STAGE``
as said, then again the first time it reaches ``LATER`` after that (a second Ctrl-C). Nothing is cleaned up and no
``finally`` runs: what is left on the machine is what a real kill leaves.

``OJAI_TEST_AT`` does something else at that point instead:

- ``SIGINT`` or ``SIGTERM``: the process sends itself that signal (Ctrl-C, ``kill``), which
  ojai handles as it would from a terminal or a service manager;
- ``pause:FILE``: the process writes its pid to ``FILE.ready`` (whole, by a rename) and waits
  (holding the machine's lock and whatever it holds) until ``FILE`` exists, then goes on;
  another ojai can be started meanwhile.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def main() -> None:
    stages, nth, *args = sys.argv[1:]
    stage, *later = stages.split(",")
    wanted = int(nth)
    seen = 0
    what = os.environ.get("OJAI_TEST_AT", "kill")

    def hook(name: str) -> None:
        nonlocal seen, stage, wanted
        if name != stage:
            return
        seen += 1
        if seen != wanted:
            return
        if later:  # then the next stage, the first time it comes
            stage, seen, wanted = later.pop(0), 0, 1
        if what == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif what in ("SIGINT", "SIGTERM"):
            os.kill(os.getpid(), getattr(signal, what))
            time.sleep(5)  # the handler raises before this ends
        elif what.startswith("pause:"):
            go = Path(what.removeprefix("pause:"))
            # whole or not at all: a waiter reads the pid as soon as the name exists
            ready = go.with_name(go.name + ".ready")
            ready.with_name(ready.name + ".tmp").write_text(str(os.getpid()))
            os.replace(ready.with_name(ready.name + ".tmp"), ready)
            deadline = time.monotonic() + 120
            while not go.exists() and time.monotonic() < deadline:
                time.sleep(0.05)

    from ojai_setup.apply.faults import set_fault_hook
    from ojai_setup.cli import app

    set_fault_hook(hook)
    sys.argv = ["ojai", *args]
    app()


if __name__ == "__main__":
    main()
