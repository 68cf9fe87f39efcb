"""ojai bench on the real llama-server with tiny models: routes ojai wrote, started and stopped
by the benchmark, synthetic acceptance rates, parallel streams on real slots."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.bench_machine import MODEL, write_bench_machine
from support.gguf_files import gemma4_assistant
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.server import serve
from typer.testing import CliRunner

from ojai_setup.measure.campaign import BenchConfig, Observer
from ojai_setup.measure.client import Endpoint
from ojai_setup.measure.command import load_result, run_bench
from ojai_setup.measure.prompts import Prompt
from ojai_setup.cli import app
from ojai_setup.core.root import Root

pytestmark = pytest.mark.slow

RATES = [0.8, 0.6, 0.4]


def _prompts(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"id": "story", "prompt": "the tiny model"}) + "\n"
                    + json.dumps({"id": "draft", "prompt": "speculative decoding with a small draft"}) + "\n")
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _idle(port: int) -> bool:
    return Endpoint(f"http://127.0.0.1:{port}").health(timeout=1)[0] == 0


def test_bench_runs_the_whole_campaign_on_routes_it_starts(tmp_path, llama_server_bin):
    m = write_bench_machine(tmp_path / "machine", llama_server_bin, draft_n_max=3, synth_rates=RATES)
    result = CliRunner().invoke(app, [
        "bench", "--root", str(m.root), "--prompts", str(_prompts(tmp_path)), "--seeds", "2",
        "--tokens", "96", "--long-tokens", "2000", "--window", "250", "--concurrency", "1,2",
        "--concurrency-tokens", "48", "--raw", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    folder = Path(data["folder"])
    assert folder.parent == m.root / "var/lib/ojai/bench"
    saved = load_result(folder)
    assert saved.dump()["pairs"] == data["pairs"]
    assert (folder / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the servers it started are gone, and it said exactly how they ran
    assert _idle(m.mtp_port) and _idle(m.plain_port)
    mtp, plain = saved.servers
    assert mtp.started_by_bench and plain.started_by_bench
    assert mtp.command[0] == str(llama_server_bin) and "--spec-draft-n-max" in mtp.command
    assert mtp.command[mtp.command.index("--port") + 1] == str(m.mtp_port)
    assert "build 11434" in mtp.version and mtp.slots == 1 and plain.slots == 4
    assert {(f.role, f.sha256) for f in mtp.models} == {("main", _sha256(m.main)), ("draft", _sha256(m.draft))}
    assert mtp.synthetic_rates == RATES and mtp.draft_n_max == 3
    assert "proven pair" in saved.pairing

    # paired runs: prompts x seeds, the order alternating
    assert [(p.prompt_id, p.seed) for p in saved.pairs] == [("story", 1), ("draft", 1), ("story", 2), ("draft", 2)]
    assert [p.order for p in saved.pairs] == ["mtp,plain", "plain,mtp"] * 2
    for p in saved.pairs:
        assert p.mtp.draft_n and p.mtp.draft_n_accepted is not None and p.plain.draft_n is None
        assert p.mtp.tokens == p.plain.tokens == 96
        assert p.speedup == pytest.approx(p.mtp.server_tps / p.plain.server_tps)
        assert p.identical == (p.first_divergence is None)
        assert p.predicted_speedup is not None and p.draft_cost is not None
    assert saved.summary.n == 4 and saved.verdict.decision in ("adopt", "do not adopt", "inconclusive")

    # acceptance: what the synthetic rates imply (sampling noise over a few hundred steps)
    assert saved.model.implied_mean_length == pytest.approx(1 + sum(RATES))
    assert saved.model.mean_accepted_length == pytest.approx(1 + sum(RATES), rel=0.15)
    assert saved.model.position_rates == pytest.approx(RATES, abs=0.15)
    assert saved.temperature0.compared == 4

    # the long generation: at least 2000 streamed tokens per arm, in windows
    for arm in (saved.long.mtp, saved.long.plain):
        assert arm.tokens >= 2000 and len(arm.rates) == 7 and min(arm.rates) > 0
    assert saved.long.mtp.mean_accepted_length > 1.5

    # parallel streams on the real slots
    points = {(p.arm, p.k): p for p in saved.concurrency.points}
    assert set(points) == {("mtp", 1), ("plain", 1), ("mtp", 2), ("plain", 2)}
    assert points[("plain", 2)].tokens == 96 and points[("mtp", 2)].slots == 1


def test_bench_refuses_a_route_whose_draft_is_not_its_pair(tmp_path, llama_server_bin):
    m = write_bench_machine(tmp_path / "machine", llama_server_bin)
    gemma4_assistant(m.draft, target_hidden=64)  # a head trained for another main model
    result = CliRunner().invoke(app, ["bench", "--root", str(m.root), "--long-tokens", "0"])
    assert result.exit_code == 1
    assert "not a proven pair" in result.stderr and "hidden size 64" in result.stderr
    assert _idle(m.mtp_port) and not list((m.root / "var/lib/ojai/bench").glob("*/results.json"))


def test_bench_uses_running_routes_and_leaves_them_running(tmp_path, llama_server_bin):
    m = write_bench_machine(tmp_path / "machine", llama_server_bin, draft_n_max=2)
    common = ["--prompts", str(_prompts(tmp_path)), "--seeds", "1", "--tokens", "32", "--long-tokens", "0",
              "--concurrency", "", "--raw", "--json"]
    with serve([m.script(f"{MODEL}-mtp")], m.mtp_port, tmp_path / "mtp.log"), \
            serve([m.script(MODEL)], m.plain_port, tmp_path / "plain.log") as plain:
        by_route = CliRunner().invoke(app, ["bench", "--root", str(m.root), *common, "--score", "wc -c"])
        assert by_route.exit_code == 0, by_route.output
        by_url = CliRunner().invoke(app, ["bench", "--root", str(m.root), *common,
                                          "--mtp-url", f"127.0.0.1:{m.mtp_port}",
                                          "--plain-url", f"http://127.0.0.1:{m.plain_port}"])
        assert by_url.exit_code == 0, by_url.output
        assert plain.get("/health")[0] == 200  # still running: not ours to stop
    first, second = json.loads(by_route.stdout), json.loads(by_url.stdout)
    assert not any(s["started_by_bench"] for s in first["servers"])
    assert first["servers"][0]["command"][0] == str(llama_server_bin)  # read from the launch script
    assert first["scoring"]["scored_pairs"] == 2
    for p in first["pairs"]:
        assert p["mtp"]["score"] == len(p["mtp"]["text"].encode())
    # given by URL, the servers' command lines are read from their processes on this host: the
    # pair is checked from the files they run
    assert second["pairing"].startswith("proven pair") and "running process" in second["pairing"]
    assert second["servers"][0]["command_from_process"] and second["servers"][0]["build_info"]

    compared = CliRunner().invoke(app, ["bench", "compare", first["folder"], second["folder"], "--json"])
    assert compared.exit_code == 0, compared.output
    assert compared.stdout.startswith('{\n  "schema": "ojai.bench-compare/1",'), compared.stdout
    assert by_route.stdout.startswith('{\n  "schema": "ojai.bench/1",'), by_route.stdout
    diff = json.loads(compared.stdout)
    assert diff["figures"]["pairs"] == [2, 2]
    assert "score_command" in diff["changed"]
    human = CliRunner().invoke(app, ["bench", "compare", first["folder"], second["folder"]],
                               env={"NO_COLOR": "1", "COLUMNS": "80"})
    assert human.exit_code == 0 and "mean speedup" in human.stdout


class _StopAfter(Observer):
    def __init__(self, n: int) -> None:
        self.n = n

    def pair(self, pair, done, total):
        if done >= self.n:
            raise KeyboardInterrupt


def test_ctrl_c_keeps_the_finished_pairs_and_stops_the_servers(tmp_path, llama_server_bin):
    m = write_bench_machine(tmp_path / "machine", llama_server_bin)
    config = BenchConfig(prompts=(Prompt("a", "the tiny model"), Prompt("b", "a small draft")),
                         seeds=(1, 2, 3), n_predict=24, template=False, parts=("pairs", "long"))
    result, folder = run_bench(Root(m.root), config, observer=_StopAfter(2))
    assert result.interrupted and result.stopped == "interrupted (Ctrl-C)"
    assert len(result.pairs) == 2 and result.long is None
    assert load_result(folder).pairs == result.pairs
    assert result.verdict.decision == "inconclusive"
    assert _idle(m.mtp_port) and _idle(m.plain_port)
