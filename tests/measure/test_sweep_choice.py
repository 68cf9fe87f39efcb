"""The backend x drafting choice at one depth (ojai_setup/domain/sweep.py), on given figures:
correct first, then fastest, every comparison clearing the run's own noise; and what tune
asks before it measures (the depths against the route's context, the installed backends)."""

from __future__ import annotations

import json

import pytest

from ojai_setup.measure.servers import BenchError, LaunchScript
from ojai_setup.measure.tune import TuneConfig, depths_of, installed_backends
from ojai_setup.core.root import Root
from ojai_setup.domain.sweep import Cell, Limit, choose, noise_of

ROCM, VULKAN = "/opt/ojai/llama.cpp/b1311-gfx1150/llama-server", "/opt/ojai/llama.cpp/b7000-vulkan/llama-server"


def cell(binary, drafting, gen, depth=8192):
    return Cell(binary=binary, backend="hip" if binary == ROCM else "vulkan", drafting=drafting,
                depth=depth, gen_tps=gen, runs=3)


def pick(cells, *, noise=0.05, allowed=(ROCM, VULKAN), drafting=(ROCM, VULKAN)):
    n = noise_of([1.0 + noise], [1.0])
    return choose(cells, 8192, own=ROCM, allowed={b: b in allowed for b in (ROCM, VULKAN)},
                  drafting_ok={b: b in drafting for b in (ROCM, VULKAN)}, noise=n)


def test_the_faster_backend_wins_only_beyond_the_noise():
    beyond = pick([cell(ROCM, "plain", 17.6), cell(VULKAN, "plain", 19.7)])  # +12 %
    assert beyond.binary == VULKAN and not beyond.drafted and "5.0 % noise" in beyond.reason
    within = pick([cell(ROCM, "plain", 17.6), cell(VULKAN, "plain", 18.2)])  # +3.4 %
    assert within.binary == ROCM and "kept" in within.reason and "not faster" in within.reason


def test_drafting_is_kept_only_beyond_the_noise_and_never_on_a_collapsing_build():
    cells = [cell(ROCM, "plain", 17.6), cell(ROCM, "draft-mtp 3", 18.0),
             cell(VULKAN, "plain", 19.7), cell(VULKAN, "draft-mtp 3", 31.0)]
    assert pick(cells).binary == VULKAN and pick(cells).drafted
    refused = pick(cells, drafting=(ROCM,))  # Vulkan's long generation collapsed
    assert refused.binary == VULKAN and not refused.drafted  # its plain still wins
    small = pick([cell(ROCM, "plain", 17.6), cell(ROCM, "draft-mtp 3", 18.0)])
    assert small.binary == ROCM and not small.drafted  # +2.3 %: within the noise


def test_a_backend_that_failed_the_gate_is_never_chosen_however_fast():
    cells = [cell(ROCM, "plain", 17.6), cell(VULKAN, "plain", 90.0)]
    assert pick(cells, allowed=(ROCM,)).binary == ROCM
    none = pick(cells, allowed=())
    assert none.binary is None and "passed the correctness gate" in none.reason


def test_noise_and_limit():
    n = noise_of([10.0, 10.4, 9.8], [10.0, 10.0, 10.5])
    assert n.pairs == 3 and n.max == pytest.approx(0.0667, abs=1e-3)
    assert n.median == pytest.approx(0.04, abs=1e-9)
    limit = Limit(bytes_per_token=16_000_000_000, bandwidth=256e9, source="given with --bandwidth")
    assert limit.tokens_per_second == 16.0
    assert limit.sentence() == ("plain decoding limit 16.0 tokens/s: 16000 MB of weights a token "
                                "over 256.0 GB/s (given with --bandwidth)")


def test_the_limit_falls_with_the_kv_cache_read_at_depth():
    limit = Limit(bytes_per_token=16_000_000_000, bandwidth=256e9, source="given with --bandwidth",
                  kv_bytes={0: 0, 32768: 4_000_000_000})
    assert limit.tokens_per_second_at(0) == 16.0 and limit.tokens_per_second_at(32768) == 12.8
    assert limit.sentence().endswith("; with the KV cache read at depth: 12.8 at 32768 (+4000 MB)")


def test_the_kv_bytes_a_token_reads_come_from_the_models_layout(tmp_path):
    from support.tiny_models import write_gemma4_main

    from ojai_setup.measure.tune import _kv_read
    from ojai_setup.domain.deployment import kv_layout
    from ojai_setup.facts.gguf import read_model_info

    model = write_gemma4_main(tmp_path / "tiny.gguf")
    layout = kv_layout(read_model_info(model))
    assert layout is not None
    script = LaunchScript("", ("llama-server", "-m", str(model)))
    read = _kv_read(str(model), script, [0, 1024, 4096])
    assert read[0] == 0 and 0 < read[1024] < read[4096]
    assert read[4096] == layout.bytes_for(4096, "f16")
    q8 = _kv_read(str(model), LaunchScript("", (*script.argv, "-ctk", "q8_0")), [4096])
    assert q8[4096] == layout.bytes_for(4096, "q8_0") < read[4096]
    assert _kv_read(str(tmp_path / "missing.gguf"), script, [4096]) == {}


def test_depths_are_checked_against_the_routes_context():
    script = LaunchScript("", ("llama-server", "-m", "m.gguf", "--ctx-size", "16384"))
    assert depths_of(script, TuneConfig()) == (16384 - 256 - 64,)
    assert depths_of(script, TuneConfig(depths=(8192, 0, 8192))) == (0, 8192)
    with pytest.raises(BenchError, match=r"--depth 32768 needs a context of at least 33088 tokens"):
        depths_of(script, TuneConfig(depths=(0, 32768)))


def test_each_installed_backend_is_found_once(tmp_path):
    base = tmp_path / "opt/ojai/llama.cpp"
    for folder, backend in (("b1300-gfx1150", "hip"), ("b1311-gfx1150", "hip"),
                            ("b7000-vulkan", "vulkan"), ("half-unpacked", None)):
        (base / folder).mkdir(parents=True)
        (base / folder / "llama-server").write_text("#!/bin/sh\n")
        if backend:
            (base / folder / "ojai-install.json").write_text(json.dumps({"backend": backend}))
    (base / "current").symlink_to("b1311-gfx1150")
    own = str(base / "current/llama-server")
    found = installed_backends(Root(tmp_path), own)
    assert found == (own, str(base / "b7000-vulkan/llama-server"))
