"""Carrying out a :class:`~ojai_setup.model.actions.ProveBuild`: the new llama.cpp build runs the
owner's routes beside the current build, through the gate's and the bench's own pieces, and
``current`` switches only when :mod:`ojai_setup.domain.upgrade` says so.

For each route the action names (one of each model) whose launch script runs the current
build: the correctness gate (:func:`ojai_setup.measure.gate.run_gate`) with the route on the
new build under test and the current build's CPU backend as the reference; then, when it
passed, the paired speed check: both builds serve the route as the gate runs it (drafting off,
one slot, the gate's small context: the two copies of the weights side by side take no more
memory than needed), and the bench's :class:`~ojai_setup.measure.campaign.Runner` sends
the same prompts to both in alternating order, then to the current build against itself for
the run's noise. Every server is started here on a free port of 127.0.0.1 and stopped at the
end; their logs go to ``/var/lib/ojai/upgrade/<build>/``.

This executor needs the gate and the bench, which live above the executor's layer, so it is
registered from here (``ojai setup`` imports this module before it applies); an apply that
meets the action without it refuses before the first change.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path, PurePosixPath

from ojai_setup.apply.executor import register_executor
from ojai_setup.apply.links import switch_link
from ojai_setup.apply.outcome import ActionOutcome
from ojai_setup.measure.campaign import BenchConfig, Runner
from ojai_setup.measure.client import ClientError
from ojai_setup.measure.command import new_result
from ojai_setup.measure.prompts import BUILTIN
from ojai_setup.measure.servers import (
    DRAFT_FLAGS,
    MODEL_FLAGS,
    BenchError,
    LaunchScript,
    ServerPool,
    binary_version,
    free_port,
)
from ojai_setup.measure.stats import bootstrap_ci
from ojai_setup.measure.gate import Backend, install_record, run_gate, scripts
from ojai_setup.core.errors import ApplyError
from ojai_setup.core.progress import Progress
from ojai_setup.core.root import Root
from ojai_setup.domain.upgrade import SPEED_PROMPTS, SPEED_TOKENS, Proof, RouteProof, speed_figures
from ojai_setup.model.actions import ProveBuild

SERVER = "llama-server"

#: how long a server of the check may take to answer /health (a large model loads for minutes)
READY_TIMEOUT = 900.0


class BuildRefused(ApplyError):
    """The new build failed the gate or the speed check: ``current`` was left where it was."""

    def __init__(self, proof: Proof) -> None:
        super().__init__(proof.finding())
        self.proof = proof


def _folder(root: Root, action: ProveBuild) -> str:
    """The machine path of the folder ``current`` names now."""
    before = PurePosixPath(action.before)
    if not before.is_absolute():
        before = PurePosixPath(action.link).parent / before
    return os.path.normpath(str(before))


def _runs_current(root: Root, argv0: str, link: str, folder: str) -> bool:
    """Whether a route's binary is the build ``link`` names (through the link or its folder,
    as a machine path or, in a machine folder, as the host path of one)."""
    names = {f"{link}/{SERVER}", f"{folder}/{SERVER}"}
    names |= {str(root.resolve(n)) for n in names}
    return os.path.normpath(argv0) in {os.path.normpath(n) for n in names}


def on_build(root: Root, script: LaunchScript, binary: Path) -> LaunchScript:
    """``script`` running ``binary`` (a host path) instead of its own: the binary's folder in
    the preamble (a bundled runtime's library path) moved with it, and in a machine folder the
    model files the route names found under the machine's root."""
    old_dir = str(PurePosixPath(script.argv[0]).parent)
    preamble = script.preamble.replace(old_dir, str(binary.parent))
    argv = [str(binary)]
    rest = list(script.argv[1:])
    for i, arg in enumerate(rest):
        if not root.is_host and i > 0 and rest[i - 1] in (*MODEL_FLAGS, *DRAFT_FLAGS) \
                and arg.startswith("/") and root.resolve(arg).exists():
            arg = str(root.resolve(arg))
        argv.append(arg)
    return LaunchScript(preamble, tuple(argv))


def _median_tps(runs: list) -> float | None:
    values = [r.server_tps for r in runs if r.server_tps]
    return statistics.median(values) if values else None


def _speed(pool: ServerPool, name: str, current: LaunchScript, new: LaunchScript,
           action: ProveBuild, route: RouteProof) -> None:
    """The paired speed check of one route: new against current, current against itself."""
    started = []
    try:
        eps = {}
        for label, script in (("current", current), ("new", new)):
            script = script.with_flag(("--port",), str(free_port()))
            ep, pid = pool.start(script, f"http://127.0.0.1:{script.value('--port')}",
                                 f"upgrade-{name}-{label}")
            started.append(pid)
            eps[label] = ep
        config = BenchConfig(prompts=tuple(p for p in BUILTIN if p.id in SPEED_PROMPTS),
                             seeds=(1,), n_predict=SPEED_TOKENS, temperature=0.0,
                             ignore_eos=True, template=False, parts=("pairs",))
        paired = new_result(name, config)
        Runner(eps["new"], eps["current"], config).run_pairs(paired)
        noise = new_result(name, config)
        Runner(eps["current"], eps["current"], config).run_pairs(noise)
    except (BenchError, ClientError) as exc:
        route.speed_error = str(exc)
        return
    finally:
        for s in [s for s in pool.started if s.process.pid in started]:
            pool.stop(s.process)
    ratios = [p.speedup for p in paired.pairs if p.speedup is not None]
    noise_ratios = [p.speedup for p in noise.pairs if p.speedup is not None]
    if not ratios or not noise_ratios:
        route.speed_error = "no request gave a speed (no timings in the servers' answers)"
        return
    route.speed = speed_figures(ratios, noise_ratios, ci=bootstrap_ci(ratios),
                                max_loss=action.max_loss,
                                current_tps=_median_tps([p.plain for p in paired.pairs]),
                                new_tps=_median_tps([p.mtp for p in paired.pairs]))


def prove(root: Root, action: ProveBuild, progress: Progress) -> Proof:
    """Run the gate and the speed check of every route of ``action`` on the new build."""
    from ojai_setup.facts.state import state_dir

    folder = _folder(root, action)
    old_bin, new_bin = root.resolve(f"{folder}/{SERVER}"), root.resolve(f"{action.candidate}/{SERVER}")
    record = install_record(str(new_bin))
    family = record.get("family")  # a nightly's: vulkan, or the ROCm build's GPU family
    backend = record.get("backend") or (
        family if family in (None, "vulkan") else f"rocm ({family})")
    proof = Proof(candidate=action.candidate, current=folder, build=binary_version(str(new_bin)),
                  backend=backend, accept_slower=action.accept_slower)
    logs = state_dir(root) / "upgrade" / PurePosixPath(action.candidate).name
    task = progress.task(f"prove {action.candidate} against {folder}", total=len(action.routes))
    try:
        with ServerPool(log_dir=logs, ready_timeout=READY_TIMEOUT) as pool:
            for name, path in action.routes.items():
                route = RouteProof(route=name)
                proof.routes.append(route)
                try:
                    script = LaunchScript.parse(root.read_text(path), path)
                except (OSError, BenchError) as exc:
                    route.gate_error = f"its launch script cannot be read: {exc}"
                    task.advance(1)
                    continue
                if not _runs_current(root, script.argv[0], action.link, folder):
                    route.skipped = (f"it runs {script.argv[0]}, not the build "
                                     f"{PurePosixPath(action.link).name} names")
                    task.advance(1)
                    continue
                current, new = on_build(root, script, old_bin), on_build(root, script, new_bin)
                try:
                    test, _ = scripts(new)
                    current_gate, reference = scripts(current)
                except BenchError as exc:
                    route.gate_error = str(exc)
                    task.advance(1)
                    continue
                run = run_gate(pool, name, Backend(script=test), reference,
                               stride=action.gate_stride, root=root)
                route.gate, route.gate_error, route.gate_finding = run.figures, run.error, run.finding
                if run.figures is not None and run.figures.passed:
                    _speed(pool, name, current_gate, test, action, route)
                task.advance(1)
    finally:
        task.done()
    return proof


@register_executor("prove_build")
def execute_prove_build(root: Root, action: ProveBuild, progress: Progress) -> ActionOutcome:
    """Prove the new build, then switch the link; raise :class:`BuildRefused` (the link left
    where it was, the new build in its folder) when it is wrong or slower."""
    link = root.resolve(action.link)
    target = root.resolve(action.candidate)
    if link.is_symlink() and os.path.normpath(link.parent / os.readlink(link)) == \
            os.path.normpath(target):
        return ActionOutcome(False, f"{action.link} already points to {action.candidate}")
    if not (target / SERVER).is_file():
        raise ApplyError(f"{action.candidate}/{SERVER} is missing: the new build was not "
                         "installed, so there is nothing to prove; current was left alone")
    proof = prove(root, action, progress)
    if not proof.adopted:
        raise BuildRefused(proof)
    switch_link(link, target)
    return ActionOutcome(True, proof.summary())
