"""ojai tune chooses the backend by measurement: the real CPU build (b11434) against a real
Vulkan build (Debian sid's llama.cpp 11669 with libggml0-backend-vulkan, on Mesa's lavapipe:
tests/support/lavapipe_backend.py), each gated against its own CPU backend, then measured plain
and drafted (n-gram drafting: Gemma 3 270M has no MTP head) at two depths, with two identical
plain servers giving the run's noise. Short prompts and few tokens: the test is about the
choice running on real servers; the speeds are whatever they are on this machine."""

from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path

import pytest
from support.bench_machine import write_gemma_machine
from support.gemma import gemma_model  # noqa: F401 - a fixture
from support.lavapipe_backend import write_lavapipe_backend
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.terminal import Terminal
from ojai_setup.measure.tune import TuneReport, TuneResult

pytestmark = pytest.mark.slow

PROMPTS = "The capital of France is\n\nWrite one line of Python that adds two numbers.\n"


def test_tune_chooses_between_the_cpu_and_the_vulkan_build_by_measurement(tmp_path, llama_server_bin,
                                                                          gemma_model, monkeypatch):
    if not Path("/proc/self/ns/mnt").exists():
        pytest.fail("needs mount namespaces (run the tests as root)")
    root = tmp_path / "machine"
    write_gemma_machine(root, llama_server_bin, gemma_model)
    vulkan = write_lavapipe_backend(tmp_path / "vulkan", [gemma_model.parent])
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPTS)
    args = ["tune", "gemma", "--root", str(root), "--binary", str(llama_server_bin),
            "--binary", str(vulkan), "--kind", "ngram-simple", "--ngram-lengths", "4",
            "--prompts", str(prompts), "--seeds", "1", "--tokens", "16", "--min-pairs", "2",
            "--confirm-seeds", "1", "--confirm-tokens", "16", "--long-tokens", "0", "--raw",
            "--depth", "0", "--depth", "24", "--depth-tokens", "8", "--depth-runs", "2"]
    ran = CliRunner().invoke(app, [*args, "--json"])
    assert ran.exit_code == 0, ran.output
    data = json.loads(ran.stdout)
    cpu, vk = data["backends"]
    assert cpu["binary"] == str(llama_server_bin) and vk["binary"] == str(vulkan)
    # both computed what their own CPU backend computes (lavapipe against sid's CPU backend)
    for b in (cpu, vk):
        assert b["gate_failed"] is None and b["gate"]["passed"], b["gate"]
    cells = {(c["backend"], c["drafting"].split()[0], c["depth"]): c for c in data["cells"]}
    assert set(cells) == {(b, d, depth) for b in ("cpu", "vulkan") for d in ("plain", "ngram-simple")
                          for depth in (0, 24)}, sorted(cells)
    for c in cells.values():
        assert c["error"] is None and c["runs"] == 2 and c["gen_tps"] > 0 and c["prompt_tps"] > 0
    noise = data["noise"]
    assert noise["pairs"] == 4 and noise["max"] >= noise["median"] >= 0
    limit = data["limit"]
    assert limit["bytes_per_token"] > 200_000_000 and limit["source"].startswith("measured")

    # the choice: correct first (both are), then fastest at the deepest depth, where another
    # backend or drafting wins only by more than the noise
    choice = data["depth_choice"]
    assert choice["depth"] == 24 and choice["binary"] in (str(llama_server_bin), str(vulkan))
    bar = 1 + noise["max"]

    def best(backend):
        plain, drafted = cells[(backend, "plain", 24)], cells[(backend, "ngram-simple", 24)]
        return drafted if drafted["gen_tps"] > plain["gen_tps"] * bar else plain

    chosen_backend = "cpu" if choice["binary"] == str(llama_server_bin) else "vulkan"
    other = "vulkan" if chosen_backend == "cpu" else "cpu"
    mine, theirs = best(chosen_backend), best(other)
    assert choice["drafted"] == (mine["drafting"] != "plain")
    if chosen_backend == "cpu":  # the route's own: kept unless the other clears the noise
        assert not theirs["gen_tps"] > mine["gen_tps"] * bar
    else:
        assert mine["gen_tps"] > theirs["gen_tps"] * bar
    tuned = tomllib.loads((root / "etc/ojai/tuned.toml").read_text())["routes"]["gemma"]
    assert tuned["binary"] == choice["binary"]
    assert tuned.get("drafting", True) is choice["drafted"]
    print("cells:", {f"{k[0]} {k[1]} {k[2]}": round(v["gen_tps"], 1) for k, v in cells.items()},
          "noise:", noise, "choice:", choice["reason"])

    # the report as a person reads it at 80 columns (rendered from the same result)
    out = io.StringIO()
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    TuneReport(TuneResult.model_validate({**data, "schema_": data.pop("schema")})).render(
        Terminal(stdout=out))
    lines = out.getvalue().splitlines()
    top = lines.index("backend x drafting x depth (tokens/s)")
    table = lines[top:top + 12]
    assert all(len(line) <= 80 for line in table), table
    header = table[2].split()
    assert header == ["backend", "drafting", "depth", "prompt", "gen", "limit", "vs", "plain"], table
    rows = [line for line in table if line.strip().split()[:1] in (["cpu"], ["vulkan"], ["*"])]
    assert len(rows) == 8 and sum(line.lstrip().startswith("*") for line in rows) == 1, table
    assert any(line.startswith("noise: two identical plain servers differed") for line in lines)
    assert any(line.startswith("limit: plain decoding limit") for line in lines)
    print("\n".join(lines[top:]))
