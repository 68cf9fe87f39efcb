"""Memory per route with its real context and slots, and for the routes that run at once.

The KV cache ojai computes from a GGUF file's metadata is checked against what the real
llama-server (build 11434, CPU) allocates for the same file, context, slots and speculation:
the sizes it logs (``llama_kv_cache: size = ...``, ``llama_memory_recurrent: size = ...``).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.tiny_models import write_gemma4_main, write_qwen35_mtp

from ojai_setup.core.paths import GIB
from ojai_setup.domain.catalog import load_catalog
from ojai_setup.domain.deployment import fit_gpu_routes, kv_layout
from ojai_setup.domain.launch import render_llama_unit
from ojai_setup.facts.gguf import read_model_info

MIB = 2**20
_SIZE = re.compile(r"(llama_kv_cache|llama_memory_recurrent): size =\s+([0-9.]+) MiB")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _allocated(server: Path, model: Path, args: list[str], log: Path) -> list[float]:
    """The cache sizes (MiB) llama-server logs while loading ``model`` with ``args``."""
    port = _free_port()
    with log.open("w") as out:
        proc = subprocess.Popen([str(server), "-m", str(model), "--port", str(port), "-lv", "4",
                                 "--host", "127.0.0.1", *args],
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while "listening on" not in log.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    sizes = [float(m.group(2)) for m in _SIZE.finditer(log.read_text())]
    assert sizes, "llama-server logged no cache size:\n" + log.read_text()
    return sizes


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tiny")
    return {"gemma4": write_gemma4_main(d / "tiny-gemma4.gguf"),
            "qwen35": write_qwen35_mtp(d / "tiny-qwen35-mtp.gguf")}


def test_the_layout_read_from_a_gguf_file(tiny):
    gemma = kv_layout(read_model_info(tiny["gemma4"]))
    # 2 layers: one sliding (window 128), one full; 2 KV heads of 32
    assert (gemma.full_layers, gemma.full_kv_heads, gemma.full_head_dim) == (1, 2, 32)
    assert (gemma.swa_layers, gemma.swa_window, gemma.state_bytes, gemma.mtp_layers) == (1, 128, 0, 0)
    qwen = kv_layout(read_model_info(tiny["qwen35"]))
    # a recurrent layer, a full-attention layer, and the MTP block (cached only when drafting)
    assert (qwen.full_layers, qwen.mtp_layers, qwen.swa_layers) == (1, 1, 0)
    assert qwen.state_bytes == ((4 - 1) * (128 + 2 * 2 * 32) + 32 * 128) * 4


def test_gemma3_slides_all_but_every_sixth_layer_without_a_pattern_key():
    """gemma-3-270m-q4_k_m.gguf carries no sliding_window_pattern (its metadata as read from
    the file below); llama.cpp's gemma3 makes layers 5, 11 and 17 global. The layout matches
    the catalog's gemma-3-270m route."""
    from ojai_setup.domain.catalog import load_catalog
    from ojai_setup.formats.gguf import ModelInfo

    info = ModelInfo(path="/m/gemma-3-270m-q4_k_m.gguf", file_size=253_113_024,
                     architecture="gemma3", embedding_length=640, block_count=18,
                     head_count_kv=(1,), head_count=4, key_length=256, value_length=256,
                     sliding_window=512, tokenizer_model="llama", token_count=262144)
    layout = kv_layout(info)
    assert (layout.full_layers, layout.swa_layers, layout.swa_window) == (3, 15, 512)
    assert layout == load_catalog(None).get("gemma-3-270m").kv
    other = kv_layout(info.model_copy(update={"architecture": "llama"}))
    assert (other.full_layers, other.swa_layers) == (18, 0)


CASES = {
    # name: (model, llama-server arguments, ctx, slots, drafting with --spec-draft-n-max)
    "sliding-window-one-slot": ("gemma4", ["--ctx-size", "5000", "--parallel", "1"], 5000, 1, None),
    "sliding-window-four-slots": ("gemma4", ["--ctx-size", "5000", "--parallel", "4"], 5000, 4, None),
    "hybrid-four-slots": ("qwen35", ["--ctx-size", "8192", "--parallel", "4"], 8192, 4, None),
    "hybrid-drafting-with-its-mtp-head": (
        "qwen35", ["--ctx-size", "5000", "--parallel", "1", "--spec-type", "draft-mtp",
                   "--spec-draft-n-max", "3"], 5000, 1, 3),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_kv_bytes_are_what_llama_server_allocates(case, tiny, llama_server_bin, tmp_path):
    model, args, ctx, slots, n_max = CASES[case]
    layout = kv_layout(read_model_info(tiny[model]))
    ours = layout.bytes_for(ctx, slots=slots, draft=n_max is not None, rollback=n_max or 0) / MIB
    logged = _allocated(llama_server_bin, tiny[model], args, tmp_path / "server.log")
    # each logged size is rounded to 0.01 MiB
    assert abs(sum(logged) - ours) <= 0.005 * len(logged) + 1e-9, (logged, ours)


def test_the_plain_route_is_fitted_with_its_slots_and_the_pair_together():
    route = load_catalog().get("gemma-4-31b")
    d = fit_gpu_routes(route, 48 * GIB)
    assert d.mtp.slots == 1 and d.mtp.ctx_size == route.context_size
    assert d.plain is not None and d.plain.slots == 4 and d.plain.ctx_size == 4 * route.context_size
    # the plain route loads no draft head, the MTP route does
    assert d.mtp.weights_bytes - d.plain.weights_bytes == route.draft.size
    assert d.mtp.fits and d.plain.fits and not d.together
    assert d.together_bytes == d.mtp.need_bytes + d.plain.need_bytes > 48 * GIB
    assert d.conflicts == {"gemma-4-31b-mtp": ("gemma-4-31b",), "gemma-4-31b": ("gemma-4-31b-mtp",)}
    assert "each runs alone, not both at once" in d.sentence()
    small = fit_gpu_routes(load_catalog().get("gemma-4-12b"), 48 * GIB)
    assert small.together and small.conflicts == {} and "both run at once" in small.sentence()


def test_a_plain_route_too_big_alone_gets_the_largest_context_that_fits():
    route = load_catalog().get("gemma-4-31b")
    d = fit_gpu_routes(route, 30 * GIB)
    assert d.plain is not None and d.plain.fits and d.plain.ctx_size < 4 * route.context_size
    assert d.plain.ctx_size % (4 * 1024) == 0
    bigger = route.footprint().need(d.plain.ctx_size + 4 * 1024, slots=4, draft=False)
    assert bigger > 30 * GIB  # the next step would not fit
    assert any("do not fit the GPU budget" in w for w in d.warnings())
    tight = fit_gpu_routes(route, 20 * GIB)
    assert tight.plain is None  # not even 4 slots of 1024 fit
    assert "gemma-4-31b-mtp does not fit" in tight.sentence()
    assert "the plain route is left out" in tight.sentence()


def test_units_of_routes_that_cannot_share_the_budget_conflict():
    unit = render_llama_unit("/opt/ojai/routes/a.sh", "a", conflicts=("ojai-b.service",))
    assert "Conflicts=ojai-b.service" in unit.splitlines()
    assert "Conflicts=" not in render_llama_unit("/opt/ojai/routes/a.sh", "a")
    from ojai_setup.domain.launch import LaunchError

    with pytest.raises(LaunchError):
        render_llama_unit("/opt/ojai/routes/a.sh", "a", conflicts=("x.service\nExecStartPre=/bin/sh",))
