"""The correctness gate at the end of an apply: no route is reported ready before its backend
computes what the CPU computes.

After ``ojai setup --apply`` has carried out its plan, each llama-server route whose launch script
this apply wrote, or whose build it installed, is started once from its script on a free port of
127.0.0.1 and compared with the same build's CPU backend on the same file
(:func:`ojai_setup.measure.gate.run_gate`, the gate ``ojai verify`` and ``ojai tune`` run), one
route per model (its plain route where it has one: drafting does not change what the model
computes). The CPU reference's reading is kept per model digest and build, so a later verify or
apply reads it instead of computing it again. A route whose program is a script that does not
serve (a captured machine's stand-in, which answers only ``--help``) is said to be not gated, not
failed; ``--no-gate`` leaves the gate to ``ojai verify``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path, PurePosixPath

from pydantic import BaseModel

from ojai_setup.core.root import Root
from ojai_setup.core.progress import Progress

#: how long a route started for the gate may take to load its model (a large model read from
#: disk into the GPU's memory)
READY_TIMEOUT = 900.0
#: every how many positions of the fixed text the gate reads (as ``ojai verify`` does)
STRIDE = 4


class RouteGate(BaseModel):
    """The gate of one route after an apply: its figures, or why it did not run."""

    route: str
    script: str
    #: :class:`ojai_setup.measure.gate.GateRun` as a document, with ``figures.passed``
    gate: dict | None = None
    #: why the gate did not run (the build cannot run here); not a failure
    not_run: str | None = None

    @property
    def passed(self) -> bool | None:
        """True: ready; False: do not serve it (wrong output, or it could not be compared);
        None: not gated."""
        if self.gate is None:
            return None
        return bool((self.gate.get("figures") or {}).get("passed"))

    def sentence(self) -> str:
        """One line for a person: ready with its figures, why not, or why it was not gated."""
        if self.gate is None:
            return f"{self.route}: not gated: {self.not_run}; check it with `ojai verify`"
        figures = self.gate.get("figures")
        if figures is None:
            return (f"{self.route}: NOT READY: the comparison with the CPU could not be made: "
                    f"{self.gate.get('error')}")
        from ojai_setup.domain.gate import GateFigures

        said = GateFigures.model_validate(
            {k: v for k, v in figures.items() if k != "passed"}).sentence(thresholds=False)
        took = self.gate.get("test_seconds")
        if self.passed:
            return (f"{self.route}: ready: computes what its build's CPU backend computes ({said}"
                    + (f", {took:.0f} s" if took else "") + ")")
        return f"{self.route}: NOT READY: {self.gate.get('finding') or said}"


def routes_to_gate(root: Root, written: set[str], build_changed: bool) -> dict[str, str]:
    """Route name -> launch script of the routes an apply gates: the llama-server routes of
    ojai's records whose script it wrote (all of them when it installed a build), one per model."""
    from ojai_setup.domain.upgrade import routes_to_compare
    from ojai_setup.facts.state import read_state

    records = read_state(root).records.get("routes") or {}
    touched = {name: rec for name, rec in records.items() if isinstance(rec, dict)
               and rec.get("script") and not rec.get("router")  # a router serves no one file
               and (build_changed or rec["script"] in written)}
    return routes_to_compare(touched)


def written_scripts(plan) -> set[str]:
    """The launch scripts the routes step of a plan writes."""
    return {p.action.path for p in plan.actions()
            if p.step == "routes" and p.action.kind == "write_file"
            and p.action.path.endswith(".sh")}


def _elf(path: Path) -> bool:
    """Whether ``path`` is a compiled program (ELF), as every llama-server build is; a script
    in its place is a wrapper, or a captured machine's stand-in that answers only ``--help``."""
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def gate_route(root: Root, name: str, script_path: str, cache: dict) -> RouteGate:
    """The gate of one route, started from its launch script (in a machine folder, its binary
    and model files found under the folder)."""
    from ojai_setup.measure.servers import BenchError, LaunchScript
    from ojai_setup.measure.gate import gate_script
    from ojai_setup.commands.upgrade import on_build

    out = RouteGate(route=name, script=script_path)
    try:
        script = LaunchScript.parse(root.read_text(script_path), script_path)
    except (OSError, BenchError) as exc:
        out.gate = {"error": f"its launch script cannot be read: {exc}", "figures": None}
        return out
    binary = root.resolve(script.argv[0]) if PurePosixPath(script.argv[0]).is_absolute() \
        else None
    if binary is None or not binary.is_file() or not os.access(binary, os.X_OK):
        out.not_run = f"{script.argv[0]} is not a program on this machine"
        return out
    program = script.argv[0]  # as the machine names it
    if not root.is_host:
        script = on_build(root, script, binary)
    with tempfile.TemporaryDirectory(prefix="ojai-gate-") as tmp:
        run = gate_script(script, name, Path(tmp), stride=STRIDE, root=root,
                          ready_timeout=READY_TIMEOUT, cache=cache)
    if run.figures is None and not _elf(binary):
        out.not_run = (f"{program} is a script, not a llama-server build, and it did not "
                       f"serve ({run.error})")
        return out
    out.gate = run.document()
    return out


def gate_applied(root: Root, plan, progress: Progress) -> tuple[list[RouteGate], bool]:
    """The gate of every route the applied ``plan`` wrote or moved to a new build, and
    whether Ctrl-C (or SIGTERM) stopped it: the servers it started are stopped, and the routes
    it did not finish are said to be not gated."""
    build_changed = any(r.step == "llama.cpp" and r.status == "change" for r in plan.steps)
    routes = routes_to_gate(root, written_scripts(plan), build_changed)
    if not routes:
        return [], False
    cache: dict = {}
    out: list[RouteGate] = []
    task = progress.task("check each route against the CPU (correctness gate)", total=len(routes))
    try:
        for name, path in routes.items():
            out.append(gate_route(root, name, path, cache))
            task.advance(1)
    except KeyboardInterrupt:
        done = {g.route for g in out}
        out += [RouteGate(route=name, script=path, not_run="the gate was stopped (Ctrl-C) "
                          "before it checked this route")
                for name, path in routes.items() if name not in done]
        return out, True
    finally:
        task.done()
    return out, False
