"""ojai's own code, run on a machine whose root is ``/``: the commands the HIP tests run in the sid
chroot (see ``tests/support/hip.py``). Each prints one JSON object on stdout; progress goes to
stderr as plain lines.

``apply PLAN.json STEP``
    Apply the actions of one step of a saved plan to this machine (``Root("/")``) with ojai's
    executor (:func:`ojai_setup.apply.executor.apply`: privileges, journal, the action's executor,
    verification). The plan was made for a test machine that describes the box; this
    machine's filesystem stands in for it at apply time, so its ``root`` is set to ``/``.
``build ACTION.json``
    Run the ``build_from_source`` executor alone on one action (the error tests).
``probe BINARY``
    ojai's dialect probe (``--version`` and ``--help``) of a llama-server.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


class LineProgress:
    """Progress as plain lines on stderr; a percentage is printed every 5 points."""

    class Task:
        def __init__(self, description: str) -> None:
            self.description = description
            self.shown = -5

        def advance(self, n: int = 1) -> None:
            pass

        def update(self, *, completed: int | None = None, total: int | None = None,
                   description: str | None = None) -> None:
            if completed is not None and (completed >= self.shown + 5 or
                                          (completed == 100 and self.shown < 100)):
                self.shown = completed
                print(f"progress: {self.description}: {completed}%", file=sys.stderr,
                      flush=True)

        def done(self) -> None:
            print(f"progress: {self.description}: done", file=sys.stderr, flush=True)

    def task(self, description: str, total: int | None = None) -> LineProgress.Task:
        print(f"progress: {description} ...", file=sys.stderr, flush=True)
        return self.Task(description)


def _apply(plan_file: str, step: str) -> dict[str, object]:
    from ojai_setup.apply.executor import apply
    from ojai_setup.planning.plan import Plan
    from ojai_setup.core.root import Root

    plan = Plan.model_validate_json(Path(plan_file).read_text(encoding="utf-8"))
    steps = tuple(s for s in plan.steps if s.step == step)
    if not steps:
        raise SystemExit(f"the plan has no step {step!r}")
    plan = plan.model_copy(update={"root": "/", "steps": steps, "handlers": {}})
    result = apply(plan, Root("/"), LineProgress())
    return {"changed": result.changed, "message": result.message,
            "actions": [{"description": a.description, "changed": a.changed,
                         "message": a.message} for a in result.actions],
            "journal": str(result.journal) if result.journal else None}


def _build(action_file: str) -> dict[str, object]:
    from ojai_setup.model.actions import BuildFromSource
    from ojai_setup.apply.executor import executor_for
    from ojai_setup.core.errors import ApplyError
    from ojai_setup.core.root import Root

    action = BuildFromSource.model_validate_json(Path(action_file).read_text(encoding="utf-8"))
    try:
        outcome = executor_for(action.kind)(Root("/"), action, LineProgress())
    except ApplyError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"changed": outcome.changed, "message": outcome.message}


def _probe(binary: str) -> dict[str, object]:
    from ojai_setup.facts.probe import probe
    from ojai_setup.core.root import Root

    result = probe(Root("/"), binary)
    return {"kind": type(result).__name__, **result.model_dump(mode="json")}


def main(argv: list[str]) -> int:
    commands = {"apply": (_apply, 2), "build": (_build, 1), "probe": (_probe, 1)}
    if not argv or argv[0] not in commands or len(argv) - 1 != commands[argv[0]][1]:
        print(__doc__, file=sys.stderr)
        return 64
    fn, _ = commands[argv[0]]
    print(json.dumps(fn(*argv[1:]), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
