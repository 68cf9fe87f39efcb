"""A test machine serving the real Gemma 3 270M (``support.gemma``) with real drafting.

The routes are rendered by ojai itself (``render_args`` in the real binary's dialect,
``render_llama_script``) into ``<root>/opt/ojai/routes/``, with ``state.json`` carrying the
route records the routes step keeps; the model file is linked into the machine's models
folder from the test cache (253 MB, never copied). Routes of one model, ``gemma``:

- ``gemma``: plain, one slot (drafting turned off explicitly, ``--spec-type none``);
- ``gemma-self``: the model as its own draft model (``--spec-draft-model`` the same file,
  ``--spec-type draft-simple``): a real draft model whose drafts are accepted at temperature 0;
- ``gemma-ngram``: n-gram drafting (``--spec-type ngram-simple``, lookup 3, draft 8), no
  draft file.

The scripts run the cached real llama-server CPU build on free ports of 127.0.0.1, with
``threads`` CPU threads (the tests' :data:`support.server.THREADS`; a benchmark on an idle
machine passes its own) and a small context so that a run takes seconds.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from support.machine_state import record_state
from support.server import THREADS, free_port

from ojai_setup.core.root import Root
from ojai_setup.domain.launch import render_llama_script
from ojai_setup.domain.render import Route, render_args
from ojai_setup.formats.llama_help import parse_help, parse_version

MODEL = "gemma"
MODELS = "/var/lib/ojai/models/gemma3-270m"
FILE = "gemma-3-270m-q4_k_m.gguf"
#: prompts on which a base model's continuation repeats its input (n-gram drafting's case) and
#: free prose; raw (the file has no chat template)
PROMPTS = (
    ("code", "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
             "def mul(a, b):\n    return a * b\n\n\ndef"),
    ("list", "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. Monday, Tuesday,"),
)


@dataclass(frozen=True)
class GemmaMachine:
    root: Path
    ports: dict[str, int]
    model: Path

    def script(self, route: str) -> Path:
        return self.root / f"opt/ojai/routes/{route}.sh"

    def url(self, route: str) -> str:
        return f"http://127.0.0.1:{self.ports[route]}"


def dialect_of(binary: Path):
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    helped = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    return parse_help(helped.stdout, parse_version(version.stderr + version.stdout))


def write_gemma_machine(root: Path, binary: Path, model: Path, *, draft_n_max: int = 4,
                        ctx: int = 1024, routes: tuple[str, ...] = ("gemma-self",),
                        threads: int = THREADS) -> GemmaMachine:
    models = root / MODELS.lstrip("/")
    models.mkdir(parents=True, exist_ok=True)
    link = models / FILE
    if not link.exists():
        link.symlink_to(model)
    main = f"{MODELS}/{FILE}"
    dialect = dialect_of(binary)
    ports = {name: free_port() for name in (MODEL, *routes)}
    spec = {
        MODEL: dict(),
        "gemma-self": dict(draft_model=str(link), spec_type="draft-simple", draft_n_max=draft_n_max),
        "gemma-ngram": dict(spec_type="ngram-simple", ngram={"size-n": 3, "size-m": 8}),
    }
    pairing = {MODEL: "draft_model", "gemma-self": "draft_model", "gemma-ngram": "ngram"}
    records = {}
    for name in (MODEL, *routes):
        r = Route(name=name, model=str(link), ctx_size=ctx, parallel=1, port=ports[name], **spec[name])
        args = render_args(r, dialect) + ["--threads", str(threads)]
        path = root / f"opt/ojai/routes/{name}.sh"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_llama_script(str(binary), args, {}, name))
        path.chmod(0o755)
        records[name] = {"script": f"/opt/ojai/routes/{name}.sh", "host": r.host, "port": r.port,
                         "spec_type": r.spec_type, "draft_n_max": r.draft_n_max, "slots": r.parallel,
                         "model": MODEL, "main": main, "pairing": pairing[name],
                         "ngram": dict(r.ngram), "draft": main if r.draft_model else None}
    record_state(Root(root), "routes", records)
    return GemmaMachine(root=root, ports=ports, model=model)
