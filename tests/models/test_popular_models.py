"""The popular models in the built-in catalog beyond the drafting pairs: gpt-oss 20B and 120B,
Qwen3-Coder 30B-A3B (plain: offered ngram-mod) and an embedding model (served plain with
``--embeddings``); what each fits on the 64 GiB Strix Point and the 128 GiB Strix Halo test
machines by ojai's own fit; the embedding route planned, and checked by ``ojai verify``'s
embedding check against the real llama-server."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
from support.fake_hub import announce_route, fake_hub  # noqa: F401 - fake_hub is a fixture
from support.gemma import gemma_model  # noqa: F401 - a fixture
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.server import llama_server
from support.stand_ins import give_llama_server
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.verify import check_embedding_route
from ojai_setup.domain.catalog import load_catalog
from ojai_setup.domain.deployment import kv_layout
from ojai_setup.domain.own_model import HubFile, parse_model_ref, pick_files
from ojai_setup.facts.gguf import read_model_info

PLAIN = ("gpt-oss-20b", "gpt-oss-120b", "qwen3-coder-30b-a3b")
PINNED = {"gpt-oss-20b": "c2753664", "qwen3-coder-30b-a3b": "fadc3e5f"}


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_the_popular_models_are_plain_routes_offered_ngram_mod():
    catalog = load_catalog(None)
    for name in PLAIN:
        r = catalog.get(name)
        assert r.plain and not r.embedding and r.spec_types == ("ngram-mod",)
        if name in PINNED:  # exact size and sha256, as public projects pin them
            assert not r.sizes_estimated and [f.sha256[:8] for f in r.main] == [PINNED[name]]
        else:  # gpt-oss-120b's split files: exact sizes, but no public sha256 to pin
            assert not r.sizes_estimated and all(f.sha256 is None for f in r.main)
            assert [f.size for f in r.main] == [49_630_904_192, 13_137_819_360]
        assert r.lemonade_checkpoint == f"{r.repo}:Q4_K_M"
        # the checkpoint names the catalog's files by llama.cpp's own rule
        listing = [HubFile(f.file, f.size, None) for f in r.main] + [
            HubFile("mmproj-F16.gguf", 1, None), HubFile("README.md", 1, None)]
        assert pick_files(parse_model_ref(r.lemonade_checkpoint), listing) == tuple(
            HubFile(f.file, f.size, None) for f in r.main)
    big = catalog.get("gpt-oss-120b")
    assert [f.file for f in big.main] == ["Q4_K_M/gpt-oss-120b-Q4_K_M-00001-of-00002.gguf",
                                          "Q4_K_M/gpt-oss-120b-Q4_K_M-00002-of-00002.gguf"]
    embed = catalog.get("nomic-embed-text-v1")
    assert embed.embedding and embed.spec_types == () and embed.drafting == "embeddings"
    assert embed.kv.bytes_for(2048) == 0  # an encoder keeps no KV cache


def test_the_catalogs_gpt_oss_layout_is_what_llama_cpp_reads_from_its_header(tmp_path):
    # gpt-oss as the converter writes it: no sliding-window pattern in the file, llama.cpp
    # makes every other layer slide (src/models/openai-moe.cpp: load_swa_pattern(ml, 2))
    path = tmp_path / "gpt-oss.gguf"
    writer = gguf.GGUFWriter(path, "gpt-oss")
    writer.add_block_count(24)
    writer.add_context_length(131072)
    writer.add_embedding_length(2880)
    writer.add_head_count(64)
    writer.add_head_count_kv(8)
    writer.add_key_length(64)
    writer.add_value_length(64)
    writer.add_sliding_window(128)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert kv_layout(read_model_info(path)) == load_catalog(None).get("gpt-oss-20b").kv


#: (route, fits on the 64 GiB Strix Point, largest context there, on the 128 GiB Strix Halo,
#: largest context there), as ``ojai models`` computes them at each route's context (32K)
FITS = [
    ("gpt-oss-20b", True, 131072, True, 131072),
    ("gpt-oss-120b", False, None, True, 131072),
    ("qwen3-coder-30b-a3b", True, 262144, True, 262144),
    ("nomic-embed-text-v1", True, 2048, True, 2048),
]


@pytest.mark.parametrize(("machine_name", "budget_gib", "column"), [
    ("ojai-fresh", 48, 1),  # the OJAI box: Strix Point, 64 GiB (63.1 GiB seen by the OS)
    # a Strix Halo with 128 GiB (125.1 GiB seen): its owner's 125 GiB limit is kept (ojai's
    # default would be 117), and the models are sized within what it leaves the OS (121)
    ("strix-halo-debian13-grub-dropin", 121, 3),
])
def test_what_each_fits_on_strix_point_and_strix_halo(machine, machine_name, budget_gib, column):
    root = machine(machine_name)
    result = ojai("models", "--root", root, "--json")
    rows = {r["name"]: r for r in json.loads(result.stdout)["routes"]}
    for name, *expected in FITS:
        row = rows[name]
        assert round(row["budget_bytes"] / (1 << 30)) == budget_gib
        assert (row["fits"], row["max_ctx"]) == (expected[column - 1], expected[column]), name
    # gpt-oss-120b's weights alone (62.7 GB) are more than the Strix Point's whole budget
    assert rows["gpt-oss-120b"]["download_bytes"] > 48 * (1 << 30)


def test_the_embedding_model_is_one_plain_route_with_embeddings(machine, fake_hub):
    announce_route(fake_hub, load_catalog(None).get("nomic-embed-text-v1"))
    root = machine("ojai-fresh")
    give_llama_server(root, "gfx1150")
    plan = json.loads(ojai("setup", "--root", root, "--llamacpp", "none", "--no-npu", "--json",
                           "--model", "nomic-embed-text-v1").stdout)
    step = next(s for s in plan["steps"] if s["step"] == "routes")
    assert step["status"] == "change", step
    assert "write the launch script for nomic-embed-text-v1 (embeddings, 4 slots, port 8080)" \
        in step["sentence"]
    scripts = {a["path"]: " ".join(a["after"].replace("\\\n", " ").split())
               for a in step["actions"]}
    assert list(scripts) == ["/opt/ojai/routes/nomic-embed-text-v1.sh"]
    args = scripts["/opt/ojai/routes/nomic-embed-text-v1.sh"]
    assert "--embeddings" in args and "--port 8080" in args and "ngram" not in args
    assert "--spec-draft" not in args
    record = step["records"]["routes"]["nomic-embed-text-v1"]
    assert record["embedding"] is True and record["drafting"] == "none"
    model = next(s for s in plan["steps"] if s["step"] == "model")
    assert model["status"] == "change", model
    assert "nomic-embed-text-v1 at ctx 2048 needs" in model["sentence"]


def test_verify_checks_an_embedding_route_on_the_real_server(tmp_path, llama_server_bin,
                                                            gemma_model):
    # Gemma 3 270M is no embedding model: its file names no pooling, so the test asks for mean
    # pooling (a real embedding model's GGUF names its own); --embeddings as the route has it
    args = ["-m", str(gemma_model), "--embeddings", "--pooling", "mean", "-c", "2048",
            "--spec-type", "none"]
    with llama_server(llama_server_bin, args, tmp_path) as server:
        check = check_embedding_route("nomic-embed-text-v1", "127.0.0.1", server.port,
                                      timeout=30)
        assert check.healthy and check.error is None, check
        assert check.embedding_dims == 640  # Gemma 3 270M's hidden size
    # a server that serves completions only has no embeddings to give
    with llama_server(llama_server_bin, ["-m", str(gemma_model), "-c", "2048"], tmp_path) as server:
        check = check_embedding_route("x", "127.0.0.1", server.port, timeout=30)
        assert check.healthy and check.error and "/v1/embeddings failed" in check.error
