"""A test machine with the two routes ``ojai setup`` writes for one model, on tiny real models.

The launch scripts are rendered by ojai itself (``render_args`` in the real binary's dialect,
``render_llama_script``) into ``<root>/opt/ojai/routes/``; the models are a tiny Gemma 4 main
model and its ``gemma4-assistant`` MTP sidecar (``support.tiny_models``) in the machine's
models folder; ``state.json`` carries the route records the routes step keeps. The scripts
run the cached real llama-server of the test suite, on free ports of 127.0.0.1, with
``threads`` CPU threads (the tests' :data:`support.server.THREADS`; a benchmark passes its own).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from support.machine_state import record_state
from support.server import THREADS, free_port
from support.tiny_models import write_mtp_pair

from ojai_setup.domain.launch import render_llama_script
from ojai_setup.formats.llama_help import parse_help, parse_version
from ojai_setup.domain.render import Route, render_args
from ojai_setup.core.root import Root

MODEL = "tiny"
MODELS = "/var/lib/ojai/models/ojai-test/tiny"


@dataclass(frozen=True)
class BenchMachine:
    root: Path
    mtp_port: int
    plain_port: int
    main: Path
    draft: Path

    def script(self, route: str) -> Path:
        return self.root / f"opt/ojai/routes/{route}.sh"


def _dialect(binary: Path):
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    helped = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    return parse_help(helped.stdout, parse_version(version.stderr + version.stdout))


def write_bench_machine(root: Path, binary: Path, *, draft_n_max: int = 3,
                        synth_rates: list[float] | None = None, ctx: int = 4096,
                        plain_slots: int = 4, threads: int = THREADS) -> BenchMachine:
    models = root / MODELS.lstrip("/")
    pair = write_mtp_pair(models)
    draft_file = pair.draft
    assert draft_file is not None
    dialect = _dialect(binary)
    mtp_port, plain_port = free_port(), free_port()
    routes = [
        Route(name=f"{MODEL}-mtp", model=str(pair.main), draft_model=str(draft_file), spec_type="draft-mtp",
              draft_n_max=draft_n_max, ctx_size=ctx, parallel=1, port=mtp_port),
        Route(name=MODEL, model=str(pair.main), ctx_size=ctx * plain_slots, parallel=plain_slots,
              port=plain_port),
    ]
    records = {}
    for r in routes:
        args = render_args(r, dialect) + ["--threads", str(threads)]
        if r.spec_type != "none" and synth_rates:
            args += ["--spec-synth-rates", ",".join(str(x) for x in synth_rates)]
        path = root / f"opt/ojai/routes/{r.name}.sh"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_llama_script(str(binary), args, {}, r.name))
        path.chmod(0o755)
        records[r.name] = {"script": f"/opt/ojai/routes/{r.name}.sh", "host": r.host, "port": r.port,
                           "spec_type": r.spec_type, "draft_n_max": r.draft_n_max, "slots": r.parallel,
                           "model": MODEL, "main": f"{MODELS}/{pair.main.name}",
                           "draft": f"{MODELS}/{draft_file.name}" if r.spec_type != "none" else None,
                           "mtp": "sidecar"}
    # the plain route's record names the same pair, as the routes step writes it
    records[MODEL]["draft"] = records[f"{MODEL}-mtp"]["draft"]
    record_state(Root(root), "routes", records)
    return BenchMachine(root=root, mtp_port=mtp_port, plain_port=plain_port, main=pair.main, draft=draft_file)


def write_gemma_machine(root: Path, binary: Path, model: Path, *, ctx: int = 1024,
                        threads: int = THREADS) -> None:
    """A test machine with the two routes of the real Gemma 3 270M (no MTP head: its drafted
    route drafts with ``ngram-simple``), one slot each, rendered in ``binary``'s dialect."""
    dialect = _dialect(binary)
    records = {}
    for route in (Route(name="gemma-ngram", model=str(model), spec_type="ngram-simple",
                        ctx_size=ctx, parallel=1, port=free_port()),
                  Route(name="gemma", model=str(model), ctx_size=ctx, parallel=1, port=free_port())):
        args = render_args(route, dialect) + ["--threads", str(threads), "--no-warmup"]
        path = root / f"opt/ojai/routes/{route.name}.sh"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_llama_script(str(binary), args, {}, route.name))
        path.chmod(0o755)
        records[route.name] = {"script": f"/opt/ojai/routes/{route.name}.sh", "host": route.host,
                               "port": route.port, "spec_type": route.spec_type, "slots": 1,
                               "model": "gemma", "main": str(model)}
    record_state(Root(root), "routes", records)
