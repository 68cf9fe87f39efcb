"""ojai tune on the real llama-server with tiny models and synthetic per-token acceptance."""

from __future__ import annotations

import json
import tomllib

import pytest
from support.bench_machine import MODEL, write_bench_machine
from support.collapsing_backend import write_collapsing_backend
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from typer.testing import CliRunner

from ojai_setup.measure.campaign import BenchConfig
from ojai_setup.measure.prompts import Prompt
from ojai_setup.cli import app
from ojai_setup.core.root import Root
from ojai_setup.measure.tune import TuneConfig, TuneObserver, replay_sweep, run_tune

pytestmark = pytest.mark.slow

PROMPTS = (Prompt("a", "the tiny model"), Prompt("b", "speculative decoding with a small draft"))


def _config(**kw) -> TuneConfig:
    bench = BenchConfig(prompts=PROMPTS, seeds=(1,), n_predict=64, template=False)
    defaults = dict(lengths=tuple(range(1, 7)), bench=bench, confirm_seeds=(7, 8), confirm_tokens=96,
                    long_tokens=0, synthetic_acceptance=0.8, min_pairs=2, depths=())
    return TuneConfig(**{**defaults, **kw})


def test_sweep_fit_choice_and_setup_picks_it_up(tmp_path, llama_server_bin):
    m = write_bench_machine(tmp_path / "machine", llama_server_bin, draft_n_max=2)
    result = run_tune(Root(m.root), MODEL, _config(early_stop=False))
    (backend,) = result.backends
    assert [lr.g for lr in backend.lengths] == [1, 2, 3, 4, 5, 6]
    for lr in backend.lengths:
        assert len(lr.pairs) == 2 and lr.measured is not None and lr.predicted is not None
        # synthetic acceptance a = 0.8: each length's MLE of a is near it
        assert lr.acceptance == pytest.approx(0.8, abs=0.12)
    assert backend.acceptance == pytest.approx(0.8, abs=0.06)
    assert backend.draft_cost is not None and backend.draft_cost > 0
    measured = {lr.g: lr.measured.mean for lr in backend.lengths}
    best = max(measured.values())
    assert measured[backend.best_g] == best
    # the early-stopping tuner over the same runs chooses the best of the lengths it measured
    # before it stopped (how close that is to the exhaustive best is a figure of
    # benchmarks/bench_figures.py: one 64-token run per length here is within noise of another)
    chosen, seen = replay_sweep(backend.lengths, 0.03)
    assert 1 <= seen <= 6
    assert measured[chosen] == max(measured[g] for g in range(1, seen + 1)), (chosen, seen, measured)
    print("sweep:", json.dumps({g: round(v, 3) for g, v in measured.items()}),
          "predicted:", json.dumps({lr.g: round(lr.predicted, 3) for lr in backend.lengths}),
          "max prediction error:", backend.max_prediction_error, "replayed choice:", chosen, "after", seen)

    # the choice is written for setup, with its source; the progress file keeps the runs: a
    # length when its confirmed interval clears the threshold, else no drafting (never a loss)
    tuned = tomllib.loads((m.root / "etc/ojai/tuned.toml").read_text())["routes"][MODEL]
    r = backend.confirmed_robust
    if result.chosen_kind == "none":
        assert tuned["drafting"] is False and "draft_n_max" not in tuned
        assert r is None or r.ci_low is None or r.ci_low <= 1.05
    else:
        assert result.chosen_g == backend.best_g and backend.confirmed.n == 4 and r.ci_low > 1.05
        assert tuned["draft_n_max"] == result.chosen_g
        assert tuned["speedup"] == pytest.approx(result.chosen_speedup, abs=1e-4)
    assert (m.root / "var/lib/ojai/tune" / f"{MODEL}.json").is_file()


class _InterruptAfter(TuneObserver):
    def __init__(self, n: int | None) -> None:
        self.n, self.seen = n, []

    def length(self, binary, lr):
        self.seen.append(lr.g)
        if self.n is not None and len(self.seen) >= self.n:
            raise KeyboardInterrupt


def test_ctrl_c_then_resume_measures_each_length_once(tmp_path, llama_server_bin):
    m = write_bench_machine(tmp_path / "machine", llama_server_bin)
    config = _config(lengths=(1, 2, 3), early_stop=False, write=False)
    first = _InterruptAfter(2)
    cut = run_tune(Root(m.root), MODEL, config, observer=first)
    assert cut.interrupted and first.seen == [1, 2] and cut.chosen_g is None and cut.choice is None
    again = _InterruptAfter(None)
    done = run_tune(Root(m.root), MODEL, config, observer=again)
    assert again.seen == [3] and not done.interrupted
    assert [lr.g for lr in done.backends[0].lengths] == [1, 2, 3]
    assert done.chosen_g in (1, 2, 3) or done.chosen_kind == "none"
    assert not (m.root / "etc/ojai/tuned.toml").exists()  # --no-write


def test_ctrl_c_in_the_depth_sweep_then_resume_measures_each_server_once(
        tmp_path, llama_server_bin, monkeypatch):
    from ojai_setup.measure import sweep

    m = write_bench_machine(tmp_path / "machine", llama_server_bin)
    config = _config(lengths=(2,), early_stop=False, write=False, depths=(0, 256),
                     depth_runs=1, depth_tokens=32)
    real, calls = sweep.measure, []

    def measure(ep, twin, requests, cells, twin_cells, **kw):
        calls.append(sorted({c.drafting for c in cells.values()}))
        if len(calls) == 2 and cut_here:
            raise KeyboardInterrupt
        return real(ep, twin, requests, cells, twin_cells, **kw)

    monkeypatch.setattr(sweep, "measure", measure)
    cut_here = True
    cut = run_tune(Root(m.root), MODEL, config)
    assert cut.interrupted and calls == [["plain"], ["draft-mtp 2"]], calls
    plain = [c for c in cut.cells if c.plain]
    assert [c.depth for c in plain] == [0, 256] and all(c.gen_tps for c in plain)
    assert cut.noise is not None and cut.depth_key

    cut_here, calls[:] = False, []
    done = run_tune(Root(m.root), MODEL, config)
    assert calls == [["draft-mtp 2"]], calls  # the plain servers' cells were taken up
    assert not done.interrupted and done.depth_key == cut.depth_key
    assert [c.model_dump() for c in done.cells if c.plain] == [c.model_dump() for c in plain]
    assert done.noise == cut.noise
    assert sorted((c.drafting, c.depth) for c in done.cells) == [
        ("draft-mtp 2", 0), ("draft-mtp 2", 256), ("plain", 0), ("plain", 256)]
    assert done.depth_choice is not None


def test_a_backend_that_collapses_is_refused_for_drafting(tmp_path, llama_server_bin):
    m = write_bench_machine(tmp_path / "machine", llama_server_bin)
    fake = write_collapsing_backend(tmp_path / "vulkan")
    result = CliRunner().invoke(app, [
        "tune", MODEL, "--root", str(m.root), "--lengths", "1,2", "--binary", str(llama_server_bin),
        "--binary", str(fake), "--seeds", "1", "--tokens", "48", "--confirm-seeds", "1",
        "--confirm-tokens", "48", "--long-tokens", "600", "--collapse-ratio", "0.3", "--raw", "--synthetic-acceptance", "0.8",
        "--no-gate", "--depth", "0", "--depth-tokens", "16", "--depth-runs", "2", "--json"])  # the stand-in computes no distributions: the gate is the next test's
    assert result.stdout.startswith('{\n  "schema": "ojai.tune/1",'), result.stdout
    data = json.loads(result.stdout)
    real, vulkan = data["backends"]
    assert vulkan["binary"] == str(fake)
    assert vulkan["safe"] is False and vulkan["long_collapse"] and vulkan["confirmed"] is None
    # refused for drafting, not as a backend: its plain server may still win the depth sweep
    assert result.exit_code == 0, result.output
    assert data["depth_choice"] is not None and data["chosen_binary"] in (str(llama_server_bin), str(fake))
    if data["chosen_binary"] == str(fake) or not real["safe"]:
        assert data["chosen_kind"] == "none"
    assert {c["backend"] for c in data["cells"]} == {"cpu", "vulkan"}
    assert not any(c["binary"] == str(fake) and c["drafting"] != "plain" for c in data["cells"])
    tuned = tomllib.loads((m.root / "etc/ojai/tuned.toml").read_text())["routes"][MODEL]
    assert tuned["backends"][str(fake)]["safe"] is False
    assert tuned["backends"][str(llama_server_bin)]["safe"] is real["safe"]


def _wrong_on_gpu(folder, real, wrong_model):
    """A build that computes from other weights whenever it offloads (no ``--device none``), as
    a GPU backend reading its buffers wrongly would; its CPU backend is the real one."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "llama-server"
    path.write_text("#!/bin/bash\n"
                    'prev=; for a in "$@"; do [ "$prev" = --device ] && [ "$a" = none ] && exec '
                    f'{real} "$@"; prev=$a; done\n'
                    f'exec {real} "$@" -m {wrong_model}\n')
    path.chmod(0o755)
    return path


def test_a_backend_that_fails_the_gate_is_not_adopted(tmp_path, llama_server_bin):
    from support.tiny_models import tiny_vocab, write_llama_model

    m = write_bench_machine(tmp_path / "machine", llama_server_bin)
    vocab = tiny_vocab()
    other = write_llama_model(tmp_path / "other.gguf", 64, 2, seed=3, vocab=vocab,
                              successor=vocab.draft_succ(miss_every=1))
    wrong = _wrong_on_gpu(tmp_path / "gpu", llama_server_bin, other)
    result = run_tune(Root(m.root), MODEL, _config(lengths=(1,), binaries=(str(wrong), str(llama_server_bin)),
                                                   confirm_seeds=(7,), gate_stride=8))
    bad, real = result.backends
    assert bad.binary == str(wrong) and bad.safe is False and not bad.lengths  # never measured
    assert bad.gate["figures"]["agreement"] < 0.5 and "Do not serve it" in bad.gate_failed
    assert real.gate["passed"] and real.gate_failed is None and real.lengths
    assert result.chosen_binary != str(wrong)
    tuned = tomllib.loads((m.root / "etc/ojai/tuned.toml").read_text())["routes"][MODEL]
    assert tuned["backends"][str(wrong)]["safe"] is False
    assert "does not compute what the CPU computes" in tuned["backends"][str(wrong)]["reason"]


def test_bench_sweeps_backend_and_drafting_at_depth_and_writes_nothing(tmp_path, llama_server_bin):
    m = write_bench_machine(tmp_path / "machine", llama_server_bin)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the tiny model\n\nspeculative decoding with a small draft\n")
    result = CliRunner().invoke(app, [
        "bench", "--root", str(m.root), "--prompts", str(prompts), "--tokens", "32", "--raw",
        "--long-tokens", "0", "--depth", "0", "--depth", "256", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema"] == "ojai.tune/1" and data["depths"] == [0, 256]
    (backend,) = data["backends"]
    assert [(lr["kind"], lr["g"]) for lr in backend["lengths"]] == [("", 3)]  # the route's own
    cells = {(c["drafting"], c["depth"]) for c in data["cells"]}
    assert cells == {("plain", 0), ("plain", 256), ("draft-mtp 3", 0), ("draft-mtp 3", 256)}
    assert data["noise"]["pairs"] == 6 and data["depth_choice"]["depth"] == 256  # 3 runs x 2 depths
    assert not (m.root / "etc/ojai/tuned.toml").exists()  # bench writes no choice
    assert (m.root / "var/lib/ojai/bench/tiny-sweep.json").is_file()
    assert not (m.root / "var/lib/ojai/tune/tiny.json").exists()  # tune's progress left alone
