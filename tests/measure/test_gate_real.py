"""The correctness gate on the real llama-server CPU build (b11434): tiny generated models for
the wiring (seconds), and the real Gemma 3 270M for what the thresholds are about (``slow``).

The backend under test is always a launch script (a binary, its environment, its arguments) or
a running server; a wrong backend is a server that computes something else from the route's
model: another model under the route's name, or a copy of the file with scrambled weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.corrupt_gguf import corrupt_copy
from support.gemma import gemma_model  # noqa: F401 - a fixture
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.machine_state import record_state
from support.server import THREADS, free_port, serve
from support.tiny_models import tiny_vocab, write_llama_model
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.measure.servers import LaunchScript, ServerPool
from ojai_setup.measure.gate import Backend, run_gate, scripts
from ojai_setup.core.root import Root
from ojai_setup.domain.launch import render_llama_script

PREAMBLE = "set -euo pipefail\n"


def _base(binary: Path, model: Path) -> LaunchScript:
    return LaunchScript(PREAMBLE, (str(binary), "-m", str(model), "-t", str(THREADS),
                                   "--no-warmup", "-ngl", "all", "--port", "0"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny llama model and another with other successors (a wrong model, same vocabulary)."""
    folder = tmp_path_factory.mktemp("tiny-gate")
    vocab = tiny_vocab()
    right = write_llama_model(folder / "tiny.gguf", 64, 2, seed=7, vocab=vocab)
    wrong = write_llama_model(folder / "other.gguf", 64, 2, seed=7, vocab=vocab,
                              successor=vocab.draft_succ(miss_every=1))
    return right, wrong


def test_cpu_against_itself_passes_and_another_model_fails(tmp_path, llama_server_bin, tiny) -> None:
    right, wrong = tiny
    test, reference = scripts(_base(llama_server_bin, right))
    assert "--device" in reference.argv and reference.value("--device") == "none"
    cache: dict = {}
    with ServerPool(log_dir=tmp_path / "logs", ready_timeout=120) as pool:
        same = run_gate(pool, "tiny", Backend(script=test), reference, stride=8, cache=cache)
        assert same.error is None, same.error
        assert same.figures.passed and same.figures.agreement == 1.0
        assert same.figures.mean_kl == pytest.approx(0.0, abs=1e-6)
        assert same.tokens > 200 and same.figures.positions == len(range(1, same.tokens, 8))
        other = LaunchScript(test.preamble, tuple(str(wrong) if a == str(right) else a
                                                  for a in test.argv))
        bad = run_gate(pool, "tiny", Backend(script=other), reference, stride=8, cache=cache)
        assert len(cache) == 1  # the reference was read once
        assert not pool.started  # every server the gate started is stopped
    assert bad.error is None and not bad.figures.passed
    assert bad.figures.mean_kl > 100 * bad.figures.max_mean_kl
    assert bad.finding and "backend" in bad.finding and "Do not serve it" in bad.finding
    assert bad.where is not None and bad.where.build and "11434" in bad.where.build


def test_the_cpu_reference_is_kept_per_model_digest_and_build(tmp_path, llama_server_bin, tiny) -> None:
    """The CPU reference's reading is kept in the machine's state folder and read back by the
    next gate of the same model and build (no reference server started); a damaged file is
    said and computed anew; another model gets a file of its own; a state folder that cannot
    be written is said, and the gate still runs."""
    right, wrong = tiny
    machine = Root(tmp_path / "machine")
    test, reference = scripts(_base(llama_server_bin, right))

    def gate(script, ref, logs):
        with ServerPool(log_dir=tmp_path / logs, ready_timeout=120) as pool:
            return run_gate(pool, "tiny", Backend(script=script), ref, stride=8, root=machine)

    first = gate(test, reference, "first")
    assert first.error is None and first.figures.passed
    assert first.reference_from == "computed" and first.reference_note is None
    kept = Path(first.reference_file)
    assert kept.parent == tmp_path / "machine/var/lib/ojai/gate" and kept.is_file()
    second = gate(test, reference, "second")
    assert second.reference_from == "kept" and second.reference_date == first.reference_date
    assert second.figures == first.figures
    assert not list((tmp_path / "second").glob("gate-tiny-cpu*"))  # no reference server started
    assert list((tmp_path / "first").glob("gate-tiny-cpu*"))

    kept.write_text("{not json")
    damaged = gate(test, reference, "third")
    assert damaged.reference_from == "computed" and damaged.figures.passed
    assert f"the kept CPU reference {kept} was not used: cannot read it" in damaged.reference_note
    assert json.loads(kept.read_text())["schema"] == "ojai.gate-reference/1"  # kept anew

    other_test, other_ref = scripts(_base(llama_server_bin, wrong))
    other = gate(other_test, other_ref, "fourth")
    assert other.reference_from == "computed" and other.reference_file != str(kept)
    assert len(list(kept.parent.glob("*.json"))) == 2

    blocked = Root(tmp_path / "blocked")
    (tmp_path / "blocked/var/lib/ojai").mkdir(parents=True)
    (tmp_path / "blocked/var/lib/ojai/gate").write_text("a file where the folder goes")
    with ServerPool(log_dir=tmp_path / "fifth", ready_timeout=120) as pool:
        run = run_gate(pool, "tiny", Backend(script=test), reference, stride=8, root=blocked)
    assert run.figures.passed and run.reference_file is None
    assert "could not keep the CPU reference in " in run.reference_note, run.reference_note


def _route_machine(root: Path, binary: Path, model: Path, name: str = "tiny") -> int:
    port = free_port()
    args = ["-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "1024",
            "-t", str(THREADS), "--no-warmup", "--spec-type", "none"]
    script = root / f"opt/ojai/routes/{name}.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(render_llama_script(str(binary), args, {}, name))
    script.chmod(0o755)
    record_state(Root(root), "routes", {name: {"script": f"/opt/ojai/routes/{name}.sh",
                                               "host": "127.0.0.1", "port": port,
                                               "spec_type": "none", "model": name,
                                               "main": str(model)}})
    return port


def test_verify_prints_the_gate_and_fails_a_route_serving_other_output(tmp_path, llama_server_bin,
                                                                       tiny) -> None:
    right, wrong = tiny
    root = tmp_path / "machine"
    port = _route_machine(root, llama_server_bin, right)
    command = [str(llama_server_bin), "-t", str(THREADS), "--no-warmup", "-c", "1024",
               "--host", "127.0.0.1", "--port", str(port)]
    with serve([*command, "-m", str(right)], port, tmp_path / "right.log"):
        ok = CliRunner().invoke(app, ["verify", "--root", str(root), "--tokens", "4", "--json",
                                      "--gate-stride", "8"])
        human = CliRunner().invoke(app, ["verify", "--root", str(root), "--tokens", "4",
                                         "--gate-stride", "8"], env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert ok.exit_code == 0, ok.output
    gate = json.loads(ok.stdout)["routes"][0]["gate"]
    assert gate["figures"]["passed"] and gate["figures"]["agreement"] == 1.0
    assert "--device" in gate["reference"] and gate["test"] == f"http://127.0.0.1:{port}"
    assert "gate against the same build's CPU backend: top-1 agreement 100.0 %" in human.stdout
    # the route's port now answers with another model: verify fails it and says why
    with serve([*command, "-m", str(wrong)], port, tmp_path / "wrong.log"):
        bad = CliRunner().invoke(app, ["verify", "--root", str(root), "--tokens", "4",
                                       "--gate-stride", "8"], env={"NO_COLOR": "1", "COLUMNS": "200"})
        off = CliRunner().invoke(app, ["verify", "--root", str(root), "--tokens", "4", "--no-gate"],
                                 env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert bad.exit_code == 1, bad.output
    flat = " ".join(bad.stdout.split())
    assert "does not compute what the CPU computes" in flat and "Do not serve it" in flat
    assert flat.startswith("FAIL tiny (") and "FAIL gate against the same build's CPU backend" in flat
    assert off.exit_code == 0 and "gate: not run: --no-gate" in off.stdout


@pytest.mark.slow
def test_real_model_cpu_passes_and_a_corrupted_copy_fails(tmp_path, llama_server_bin, gemma_model) -> None:
    """Gemma 3 270M Q4_K_M: the CPU backend against itself passes; the same file with one
    layer's ffn_down blocks reversed (a backend reading the right weights at the wrong place)
    fails on both figures."""
    corrupt = tmp_path / "corrupt.gguf"  # under a second: the tensor table is read directly
    assert corrupt_copy(gemma_model, corrupt, r"^blk\.5\.ffn_down\.weight$") == ["blk.5.ffn_down.weight"]
    test, reference = scripts(_base(llama_server_bin, gemma_model))
    cache: dict = {}
    with ServerPool(log_dir=tmp_path / "logs", ready_timeout=300) as pool:
        same = run_gate(pool, "gemma", Backend(script=test), reference, stride=8, cache=cache)
        bad_script = LaunchScript(test.preamble, tuple(str(corrupt) if a == str(gemma_model) else a
                                                       for a in test.argv))
        bad = run_gate(pool, "gemma", Backend(script=bad_script), reference, stride=8, cache=cache)
    assert same.error is None and bad.error is None, (same.error, bad.error)
    assert same.figures.passed and same.figures.agreement == 1.0 and same.figures.mean_kl < 1e-6
    assert not bad.figures.passed
    assert bad.figures.agreement < bad.figures.min_agreement
    assert bad.figures.mean_kl > 10 * bad.figures.max_mean_kl
