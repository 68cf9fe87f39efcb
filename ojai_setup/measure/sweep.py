"""``ojai tune``'s backend x drafting x depth sweep, run on real servers.

For every backend tune measured (each installed build that passed the correctness gate), two
servers are started from the route's drafted launch script with that binary: plain
(``--spec-type none``, no draft model) and drafted at the backend's best setting from the
drafting sweep (when it has one and its long generation did not collapse). Each answers the
same requests at every depth asked: a prompt of ``depth`` tokens of context (fixed filler
text, as token ids) followed by a task, then ``tokens`` generated tokens; prompt processing
and generation speed come from the server's own ``timings``. A second plain server of the
route's own build, identical to the first, answers the same requests paired with it: their
gaps are the run's noise (:func:`ojai_setup.domain.sweep.noise_of`), which every comparison
must clear (:func:`ojai_setup.domain.sweep.choose`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ojai_setup.measure.client import ClientError, Endpoint
from ojai_setup.measure.servers import BenchError, LaunchScript, ServerPool, free_port
from ojai_setup.domain.sweep import Cell, median_or_none

#: the context a depth's prompt is built from (repeated as needed): fixed prose and code
FILLER_PARTS = 3


def backend_label(binary: str) -> str:
    """vulkan, hip, cpu, ... from the install record beside the binary; else the folder's
    name (``b7000-vulkan``), else the file's."""
    try:
        record = json.loads((Path(binary).parent / "ojai-install.json").read_text(encoding="utf-8"))
        if record.get("backend"):
            return str(record["backend"])
    except (OSError, ValueError, AttributeError):
        pass
    folder = Path(binary).parent.name
    for name in ("vulkan", "hip", "rocm", "cpu"):
        if name in folder.lower():
            return name
    return folder or Path(binary).name


def filler_text() -> str:
    from ojai_setup.measure.prompts import BUILTIN, LONG_PROMPT
    from ojai_setup.domain.gate import TEXT

    return "\n\n".join([TEXT, LONG_PROMPT.text, *(p.text for p in BUILTIN)])


@dataclass
class Requests:
    """The requests of every cell at one depth: token ids (context then task) or, at depth 0
    with no tokenizer needed, the task's text."""

    depth: int
    prompts: list[list[int] | str]


def build_requests(url: str, depths: tuple[int, ...], tasks: list[str], *,
                   api_key: str | None = None) -> list[Requests]:
    """The prompts for each depth, tokenized by the server at ``url`` (same model, same
    tokens for every backend)."""
    from ojai_setup.facts.distributions import DistributionError, tokenize

    out = []
    filler: list[int] | None = None
    for depth in depths:
        if depth == 0:
            out.append(Requests(0, list(tasks)))
            continue
        try:
            if filler is None:
                filler = tokenize(url, filler_text(), api_key=api_key)
            prompts: list[list[int] | str] = []
            for task in tasks:
                task_ids = tokenize(url, task, api_key=api_key)[1:]  # no second BOS
                context = []
                while len(context) < depth:
                    context += filler
                prompts.append(context[:depth] + task_ids)
        except DistributionError as exc:
            raise BenchError(f"cannot build a prompt of {depth} tokens: {exc}") from None
        out.append(Requests(depth, prompts))
    return out


def run_one(ep: Endpoint, prompt, *, tokens: int, seed: int) -> tuple[float | None, float | None]:
    """(prompt tokens/s, generated tokens/s) of one completion."""
    gen = ep.complete(prompt, n_predict=tokens, seed=seed, temperature=0.0, ignore_eos=True)
    t = gen.timings
    pp = (t.get("prompt_n") or 0) / t["prompt_ms"] * 1000.0 if t.get("prompt_ms") else None
    tg = t.get("predicted_per_second") or gen.server_tps
    return pp, tg


def measure(ep: Endpoint, twin: Endpoint | None, requests: list[Requests], cells: dict[int, Cell],
            twin_cells: dict[int, Cell] | None, *, tokens: int, budget=None) -> None:
    """Every request of every depth on ``ep`` (and, paired, on ``twin``: twin first on odd
    runs, so that drift favours neither), into ``cells[depth]``."""
    for req in requests:
        cell = cells[req.depth]
        for i, prompt in enumerate(req.prompts):
            if budget is not None:
                budget.check()
            order = [(ep, cell), (twin, twin_cells[req.depth])] if twin is not None else [(ep, cell)]
            if i % 2:
                order.reverse()
            for server, target in order:
                try:
                    pp, tg = run_one(server, prompt, tokens=tokens, seed=i + 1)
                except ClientError as exc:
                    target.error = str(exc)
                    continue
                target.runs += 1
                if pp:
                    target.prompt_runs.append(pp)
                if tg:
                    target.gen_runs.append(tg)
        for c in (cell, twin_cells[req.depth] if twin_cells else None):
            if c is not None:
                c.prompt_tps, c.gen_tps = median_or_none(c.prompt_runs), median_or_none(c.gen_runs)


def start(pool: ServerPool, script: LaunchScript, name: str) -> tuple[Endpoint, int]:
    """Start ``script`` on a free port of 127.0.0.1; (its endpoint, its process id)."""
    port = free_port()
    s = script.with_flag(("--host",), "127.0.0.1").with_flag(("--port",), str(port))
    return pool.start(s, f"http://127.0.0.1:{port}", name)


def stop(pool: ServerPool, pid: int) -> None:
    for s in list(pool.started):
        if s.process.pid == pid:
            pool.stop(s.process)
