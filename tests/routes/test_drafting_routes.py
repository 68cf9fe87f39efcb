"""A route of every drafting kind, from a catalog entry through the routes step's drafted route
and the renderer, started on the real upstream llama-server (build 11434, CPU) with the tiny
generated models: each one really drafts (no ``--spec-synth-rates``), and the plain route,
rendered with ``--spec-type none``, does not.

The prompt is given as token ids: a stretch of the tiny models' successor cycle, then its first
tokens again, so that what the model generates next is already in the history and the n-gram
types find it at once.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.server import free_port, serve
from support.tiny_models import tiny_vocab, write_draft_pair, write_mtp_pair, write_qwen35_mtp_pair

from ojai_setup.domain.catalog import Route as CatalogRoute
from ojai_setup.domain.render import Route, render_args
from ojai_setup.domain.routes import route_names
from ojai_setup.facts.gguf import read_model_info
from ojai_setup.formats.gguf import check_pair
from ojai_setup.formats.llama_help import Dialect, parse_help, parse_version
from ojai_setup.steps.routes import drafted_route

KV = {"full_layers": 1, "full_kv_heads": 1, "full_head_dim": 64}

#: catalog fields of each kind, over the tiny files ("main", "draft") of one pair writer
KINDS: dict[str, tuple[str, dict]] = {
    "mtp-in-file": ("qwen35", {"mtp": "in_file", "draft_n_max": 3}),
    "mtp-sidecar": ("gemma4", {"mtp": "sidecar", "draft": "draft", "draft_n_max": 3}),
    # (bf16: the tiny draft's 16-wide heads take no 32-block quantised cache)
    "draft-model": ("llama", {"draft": "draft", "spec_type": "draft-simple", "draft_n_max": 3,
                              "draft_gpu_layers": 0, "draft_cache_type": "bf16"}),
    "self-draft": ("llama", {"draft": "main", "spec_type": "draft-simple", "draft_n_max": 4}),
    "ngram-simple": ("llama", {"spec_type": "ngram-simple", "ngram": {"size_n": 3, "size_m": 8}}),
    "ngram-map-k": ("llama", {"spec_type": "ngram-map-k", "ngram": {"size_n": 3, "size_m": 8,
                                                                  "min_hits": 1}}),
    "ngram-map-k4v": ("llama", {"spec_type": "ngram-map-k4v",
                                "ngram": {"size_n": 3, "size_m": 8, "min_hits": 1}}),
    "ngram-mod": ("llama", {"spec_type": "ngram-mod", "ngram": {"n_match": 2, "n_min": 1,
                                                              "n_max": 8}}),
    "ngram-cache": ("llama", {"spec_type": "ngram-cache"}),
    "chained mtp + ngram-mod": ("qwen35", {"mtp": "in_file", "spec_type": "draft-mtp,ngram-mod",
                                           "draft_n_max": 3,
                                           "ngram": {"n_match": 2, "n_min": 1, "n_max": 8}}),
}
WRITERS = {"qwen35": write_qwen35_mtp_pair, "gemma4": write_mtp_pair, "llama": write_draft_pair}
#: the drafted route's name suffix and the pairing proof's kind, per drafting kind
EXPECTED = {
    "mtp-in-file": ("mtp", "in_file"), "mtp-sidecar": ("mtp", "sidecar"),
    "draft-model": ("draft", "draft_model"), "self-draft": ("draft", "draft_model"),
    "ngram-simple": ("ngram", "ngram"), "ngram-map-k": ("ngram", "ngram"),
    "ngram-map-k4v": ("ngram", "ngram"), "ngram-mod": ("ngram", "ngram"),
    "ngram-cache": ("ngram", "ngram"), "chained mtp + ngram-mod": ("mtp", "in_file"),
}


def catalog_route(kind: str, folder: Path) -> tuple[CatalogRoute, Path, Path | None]:
    """The catalog route of ``kind`` over freshly written tiny files in ``folder``."""
    writer, fields = KINDS[kind]
    pair = WRITERS[writer](folder)
    files = {"main": pair.main, "draft": pair.draft}
    fields = dict(fields)
    draft = files[fields.pop("draft")] if "draft" in fields else None
    route = CatalogRoute.model_validate({
        "name": "tiny", "title": kind, "repo": "ojai-test/tiny-GGUF",
        "main": [{"file": pair.main.name, "size": pair.main.stat().st_size}],
        **({"draft": {"file": draft.name, "size": draft.stat().st_size},
            "lemonade_draft_checkpoint": f"ojai-test/tiny-GGUF:{draft.name}"} if draft else {}),
        "lemonade_checkpoint": f"ojai-test/tiny-GGUF:{pair.main.name}",
        "context_size": 1024, "max_context": 2048, "kv": KV, **fields})
    return route, pair.main, draft


@pytest.fixture(scope="module")
def real_dialect(llama_server_bin: Path) -> Dialect:
    """The dialect of the real binary, probed as ojai probes it."""
    def run(flag: str) -> str:
        proc = subprocess.run([os.fspath(llama_server_bin), flag], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
        return proc.stdout + proc.stderr

    return parse_help(run("--help"), version=parse_version(run("--version")))


@pytest.mark.parametrize("kind", list(KINDS))
def test_catalog_kinds_name_their_routes_and_pairing(kind: str, tmp_path: Path) -> None:
    route, main, draft = catalog_route(kind, tmp_path)
    suffix, pairing = EXPECTED[kind]
    assert (route.drafted_suffix, route.pair_kind) == (suffix, pairing)
    assert route_names(route.name, route.drafted_suffix) == (f"tiny-{suffix}", "tiny")
    verdict = check_pair(read_model_info(main), read_model_info(draft) if draft else None,
                         route.pair_kind)
    assert verdict.ok, verdict.reasons
    assert verdict.applicable == (pairing != "ngram")


def _complete(binary: Path, route: Route, dialect: Dialect, log: Path) -> dict:
    args = render_args(route, dialect)
    prompt = [int(t) for t in tiny_vocab().pieces[:40]]
    with serve([os.fspath(binary), *args, "-np", "1", "-t", "2"], route.port, log) as server:
        answer = server.post_json("/completion", {
            "prompt": prompt + prompt[:4], "n_predict": 32, "ignore_eos": True,
            "temperature": 0.0, "seed": 1})
    print(route.name, " ".join(args))
    print("timings:", json.dumps(answer["timings"], sort_keys=True))
    return answer["timings"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_route_of_each_kind_drafts_on_the_real_server(kind: str, tmp_path: Path,
                                                      llama_server_bin: Path,
                                                      real_dialect: Dialect) -> None:
    model, main, draft = catalog_route(kind, tmp_path / "models")
    name = route_names(model.name, model.drafted_suffix)[0]
    # the separate draft model as on a GPU box: -ngl all and its own -ngld
    route = drafted_route(model, name, str(main), str(draft) if draft else None,
                          gpu=kind == "draft-model",
                          host="127.0.0.1", port=free_port())
    timings = _complete(llama_server_bin, route, real_dialect, tmp_path / "server.log")
    assert timings["predicted_n"] == 32
    assert timings["draft_n"] > 0 and timings["draft_n_accepted"] > 0, timings


@pytest.mark.slow
def test_plain_route_says_no_drafting_and_does_not_draft(tmp_path: Path,
                                                        llama_server_bin: Path,
                                                        real_dialect: Dialect) -> None:
    pair = write_draft_pair(tmp_path / "models")
    route = Route(name="tiny", model=str(pair.main), port=free_port(), ctx_size=1024)
    assert render_args(route, real_dialect)[-2:] == ["--spec-type", "none"]
    timings = _complete(llama_server_bin, route, real_dialect, tmp_path / "server.log")
    assert timings["predicted_n"] == 32 and "draft_n" not in timings
