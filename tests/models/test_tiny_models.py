"""The tiny generated models load in the real llama-server and speculate with MTP."""
from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import gguf
import numpy as np
import pytest
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.server import ServerError, free_port, llama_server, serve
from support.tiny_models import (
    TinyPair,
    tiny_vocab,
    write_draft_pair,
    write_mtp_pair,
    write_qwen35_mtp_pair,
)

PAIRS = pytest.mark.parametrize(
    "write_pair",
    [write_mtp_pair, write_qwen35_mtp_pair, write_draft_pair],
    ids=["gemma4-assistant", "qwen35-nextn", "llama-draft"],
)


def _tensor(reader: gguf.GGUFReader, name: str) -> np.ndarray:
    return np.asarray(next(t for t in reader.tensors if t.name == name).data)


def _field(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def test_pair_files_and_arguments(tmp_path: Path) -> None:
    pair = write_mtp_pair(tmp_path)
    assert pair.spec_type == "draft-mtp"
    assert pair.draft is not None and pair.draft.name == "mtp-tiny-gemma4.gguf"
    assert pair.server_args() == ["-m", str(pair.main), "-md", str(pair.draft), "--spec-type", "draft-mtp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mtp-tiny-gemma4.gguf", "tiny-gemma4.gguf"]

    main, draft = gguf.GGUFReader(pair.main), gguf.GGUFReader(pair.draft)
    assert _field(main, "general.architecture") == "gemma4"
    assert _field(draft, "general.architecture") == "gemma4-assistant"
    assert _field(draft, "gemma4-assistant.embedding_length_out") == _field(main, "gemma4.embedding_length")
    assert _field(main, "tokenizer.ggml.tokens") == _field(draft, "tokenizer.ggml.tokens")


@PAIRS
def test_pairs_are_deterministic(tmp_path: Path, write_pair) -> None:
    first: TinyPair = write_pair(tmp_path / "a")
    second: TinyPair = write_pair(tmp_path / "b")
    assert first.main.read_bytes() == second.main.read_bytes()
    assert (first.draft is None) == (second.draft is None)
    if first.draft is not None and second.draft is not None:
        assert first.draft.read_bytes() == second.draft.read_bytes()
    assert not list(tmp_path.rglob("*.partial"))


def test_qwen35_pair_has_its_heads_inside(tmp_path: Path) -> None:
    pair = write_qwen35_mtp_pair(tmp_path)
    assert pair.draft is None
    assert pair.server_args() == ["-m", str(pair.main), "--spec-type", "draft-mtp"]
    reader = gguf.GGUFReader(pair.main)
    assert _field(reader, "general.architecture") == "qwen35"
    assert _field(reader, "qwen35.block_count") == 3
    assert _field(reader, "qwen35.nextn_predict_layers") == 1
    assert {"blk.2.nextn.eh_proj.weight", "blk.0.ssm_conv1d.weight"} <= {t.name for t in reader.tensors}


def test_draft_succ_misses_every_nth_piece() -> None:
    vocab = tiny_vocab()
    assert np.array_equal(vocab.draft_succ(0), vocab.succ)
    drafted = vocab.draft_succ(4)
    missed = vocab.pieces[drafted[vocab.pieces] != vocab.succ[vocab.pieces]]
    assert np.array_equal(missed, vocab.pieces[::4])
    assert np.array_equal(drafted[missed], vocab.succ[vocab.succ[missed]])


def test_weights_predict_the_successor_cycle(tmp_path: Path) -> None:
    """The embedding path alone (what dominates both models) maps every piece to its successor."""
    pair = write_mtp_pair(tmp_path)
    assert pair.draft is not None
    main, draft = gguf.GGUFReader(pair.main), gguf.GGUFReader(pair.draft)
    embd = _tensor(main, "token_embd.weight")
    out = _tensor(main, "output.weight")
    draft_out = _tensor(draft, "token_embd.weight")
    pre = _tensor(draft, "nextn.pre_projection.weight")
    vocab = tiny_vocab()

    def rms_norm(x: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x))

    n_embd = embd.shape[1]
    for token in vocab.pieces:
        x = np.sqrt(n_embd) * embd[token]
        h = rms_norm(x)
        assert int(np.argmax(out @ h)) == vocab.succ[token]
        drafted = draft_out @ rms_norm(pre @ np.concatenate([x, h]))
        assert int(np.argmax(drafted)) == vocab.succ[token]


def _serve_and_complete(binary: Path, args: list[str], log_dir: Path, n_predict: int = 32) -> dict[str, object]:
    """Serve with ``args`` on one slot, complete ``n_predict`` tokens greedily; the answer's timings."""
    server_args = [*args, "-c", "1024", "-np", "1", "-t", "2"]
    with llama_server(binary, server_args, log_dir) as server:
        status, body = server.get("/health")
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        answer = server.post_json(
            "/completion",
            {"prompt": "the tiny model", "n_predict": n_predict, "ignore_eos": True, "temperature": 0.0, "seed": 1},
        )
        process = server.process
        log = server.log()
    assert process.poll() is not None, "the server outlived its context manager"
    timings = answer["timings"]
    assert isinstance(timings, dict)
    print("timings:", json.dumps(timings, sort_keys=True))
    print("content:", repr(answer["content"]))
    print("\n".join(line for line in log.splitlines() if "draft acceptance" in line))
    return timings


@pytest.mark.slow
@PAIRS
def test_llama_server_speculates(tmp_path: Path, llama_server_bin: Path, write_pair) -> None:
    pair = write_pair(tmp_path / "models")
    timings = _serve_and_complete(llama_server_bin, [*pair.server_args(), "--spec-draft-n-max", "3"], tmp_path)
    assert timings["predicted_n"] == 32
    assert timings["draft_n"] > 0
    assert "draft_n_accepted" in timings
    assert timings["draft_n_accepted"] > 0


@pytest.mark.slow
def test_llama_server_rejects_mispredicted_mtp_drafts(tmp_path: Path, llama_server_bin: Path) -> None:
    pair = write_mtp_pair(tmp_path / "models", miss_every=5)
    timings = _serve_and_complete(llama_server_bin, pair.server_args(), tmp_path, n_predict=64)
    assert timings["predicted_n"] == 64
    assert 0 < timings["draft_n_accepted"] < timings["draft_n"]


@pytest.mark.slow
def test_llama_server_without_draft_reports_no_draft_timings(tmp_path: Path, llama_server_bin: Path) -> None:
    pair = write_mtp_pair(tmp_path / "models")
    timings = _serve_and_complete(llama_server_bin, ["-m", str(pair.main)], tmp_path)
    assert timings["predicted_n"] == 32
    assert "draft_n" not in timings


@pytest.mark.slow
def test_llama_server_failing_to_load_raises_with_log(tmp_path: Path, llama_server_bin: Path) -> None:
    missing = tmp_path / "missing.gguf"
    with pytest.raises(ServerError, match="exited with") as err:
        with llama_server(llama_server_bin, ["-m", str(missing)], tmp_path):
            pytest.fail("a server without a model became healthy")
    assert "missing.gguf" in str(err.value)


@pytest.mark.slow
def test_serve_runs_a_launch_script_and_stops_its_children(tmp_path: Path, llama_server_bin: Path) -> None:
    """A launch script that does not ``exec`` still has its server stopped with it."""
    pair = write_mtp_pair(tmp_path / "models")
    port = free_port()
    script = tmp_path / "launch.sh"
    command = " ".join(shlex.quote(a) for a in [str(llama_server_bin), *pair.server_args()])
    script.write_text(f"#!/bin/sh\n{command} --host 127.0.0.1 --port {port} -np 1\necho ended\n")
    script.chmod(0o755)
    with serve([script], port, tmp_path / "launch.log") as server:
        timings = server.post_json("/completion", {"prompt": "the", "n_predict": 8, "ignore_eos": True})["timings"]
        group = server.process.pid
    assert timings["draft_n"] > 0
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)
