"""verify, bench and tune on a real model with real drafting: Gemma 3 270M (from PyPI's chunk
packages, sha256-checked, ``support.gemma``) on the real llama-server CPU build, drafting with
itself as draft model, with each n-gram type of build 11434 and with a chain of both; no
synthetic acceptance. One set of running routes is shared by the module (one worker runs it).

Speeds are not asserted (they are a benchmark's business, benchmarks/real_drafting.py): what is
asserted is what the counters, the pairing, the words and the written choice must be whatever
the machine's load."""

from __future__ import annotations

import json
import tomllib
from contextlib import ExitStack
from pathlib import Path

import pytest
from support.gemma import gemma_model  # noqa: F401 - a fixture
from support.gemma_machine import MODEL, PROMPTS, write_gemma_machine
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.server import THREADS, llama_server, serve
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.measure.campaign import BenchConfig
from ojai_setup.measure.command import run_bench
from ojai_setup.measure.prompts import Prompt
from ojai_setup.measure.tune import TuneConfig, run_tune
from ojai_setup.core.root import Root

pytestmark = pytest.mark.slow

NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


def _prompt_file(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in PROMPTS))
    return path


@pytest.fixture(scope="module")
def running(tmp_path_factory, llama_server_bin, gemma_model):
    """The machine with its three routes (plain, self-draft, ngram-simple), all running."""
    tmp = tmp_path_factory.mktemp("gemma")
    m = write_gemma_machine(tmp / "machine", llama_server_bin, gemma_model,
                            routes=("gemma-self", "gemma-ngram"))
    with ExitStack() as stack:
        for name in m.ports:
            stack.enter_context(serve([m.script(name)], m.ports[name], tmp / f"{name}.log"))
        yield m


def test_verify_reads_real_drafting_per_kind(running):
    result = CliRunner().invoke(app, ["verify", "--root", str(running.root), "--tokens", "32", "--json",
                                      "--gate-stride", "16"])
    assert result.exit_code == 0, result.output
    checks = {r["route"]: r for r in json.loads(result.stdout)["routes"]}
    # every route, drafted or not, computes what its build's CPU backend computes (one reference)
    for r in checks.values():
        assert r["gate"]["figures"]["passed"] and r["gate"]["figures"]["positions"] == 20, r["gate"]
    plain, self_draft, ngram = checks[MODEL], checks["gemma-self"], checks["gemma-ngram"]
    assert plain["draft_n"] is None and plain["predicted_n"] == 32
    # the model drafting for itself at temperature 0: every drafted token is accepted
    assert self_draft["draft_n"] > 0 and self_draft["draft_n_accepted"] == self_draft["draft_n"]
    assert self_draft["counters"] == "timings"  # the routes run without --metrics
    # a draft model's cost is unknown and n-gram drafting has no predictive model: no guess
    for r in (self_draft, ngram):
        assert r["predicted_speedup"] is None and r["no_prediction"]
    assert "n-gram" in ngram["no_prediction"] and ngram["spec_type"] == "ngram-simple"
    human = CliRunner().invoke(app, ["verify", "--root", str(running.root), "--tokens", "16",
                                     "--route", "gemma-ngram", "--no-gate"], env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert "not predictive" in human.stdout and "ngram-simple drafted" in human.stdout


def test_bench_started_route_uses_exact_counters_and_names_the_kind(tmp_path, llama_server_bin, gemma_model):
    """bench starts the self-draft route itself (with --metrics): the counters are the
    server's own and agree with what the model must do at temperature 0."""
    m = write_gemma_machine(tmp_path / "machine", llama_server_bin, gemma_model, draft_n_max=3)
    result = CliRunner().invoke(app, [
        "bench", "--root", str(m.root), "--route", "gemma-self", "--prompts", str(_prompt_file(tmp_path)),
        "--seeds", "1", "--tokens", "32", "--long-tokens", "0", "--concurrency", "", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["kind"] == "draft-simple" and data["pairing"].startswith("proven pair")
    assert "drafts for itself" in data["pairing"]
    assert "fallback chat template" in data["template"]  # the file has none
    drafted, plain = data["servers"]
    assert drafted["metrics"] and drafted["version"] == "0.6.0-dev build 11434"
    assert drafted["spec_type"] == "draft-simple" and plain["spec_type"] in ("none", None)
    for p in data["pairs"]:
        run = p["mtp"]
        assert run["counters"] == "metrics" and run["draft_n"] > 0
        assert run["draft_n_accepted"] == run["draft_n"]  # itself at temperature 0
        # every step drafted 3 and accepted all (the last step may draft fewer, cut short by
        # the token budget): the per-position counts add up to the accepted tokens
        rates = run["position_rates"]
        assert len(rates) == 3 and rates[0] == 1.0 and rates == sorted(rates, reverse=True)
        assert round(sum(rates) * run["steps"]) == run["draft_n_accepted"]
        assert 0 <= run["steps"] * 3 - run["draft_n"] <= 2
        assert run["mean_accepted_length"] == pytest.approx(1 + run["draft_n_accepted"] / run["steps"])
        assert p["identical"] is True
    assert data["model"]["counters"] == "metrics" and data["model"]["kind"] == "geometric"
    assert data["model"]["acceptance"] == 1.0
    human = CliRunner().invoke(app, [
        "bench", "compare", data["folder"], data["folder"]], env={"NO_COLOR": "1"})
    assert human.exit_code == 0


def test_bench_by_url_checks_the_pair_and_refuses_a_plain_arm_that_drafts(running, tmp_path):
    common = ["--root", str(running.root), "--prompts", str(_prompt_file(tmp_path)), "--seeds", "1",
              "--tokens", "24", "--long-tokens", "0", "--concurrency", "", "--raw"]
    by_url = CliRunner().invoke(app, ["bench", *common, "--mtp-url", running.url("gemma-ngram"),
                                      "--plain-url", running.url(MODEL)],
                                env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert by_url.exit_code == 0, by_url.output
    # the running process's command line was read: its kind and files are known
    assert "pairing: not applicable: ngram-simple drafts from the text itself" in by_url.stdout
    assert "ngram-simple t/s" in by_url.stdout and "MTP" not in by_url.stdout
    assert "not predictive" in by_url.stdout and "prompts: sent raw" in by_url.stdout
    assert "build 11434" in by_url.stdout and "unknown" not in by_url.stdout

    self_url = CliRunner().invoke(app, ["bench", *common, "--json", "--mtp-url", running.url("gemma-self"),
                                        "--plain-url", running.url(MODEL)])
    assert self_url.exit_code == 0, self_url.output
    data = json.loads(self_url.stdout)
    assert data["pairing"].startswith("proven pair") and "running process" in data["pairing"]
    assert data["servers"][0]["command_from_process"] is True

    refused = CliRunner().invoke(app, ["bench", *common, "--mtp-url", running.url("gemma-self"),
                                       "--plain-url", running.url("gemma-ngram")])
    assert refused.exit_code == 1
    assert "the plain arm" in refused.stderr and "is not plain" in refused.stderr


def test_a_plain_arm_without_slots_info_is_refused_by_its_timings(running, tmp_path):
    """The check on the completions themselves: a drafting "plain" arm is refused at its first
    completion even when /slots is not asked (called directly)."""
    from ojai_setup.measure.campaign import PlainDrafts, Runner
    from ojai_setup.measure.client import Endpoint

    runner = Runner(Endpoint(running.url(MODEL)), Endpoint(running.url("gemma-ngram")),
                    BenchConfig(prompts=(Prompt("code", PROMPTS[0][1]),), seeds=(1,), n_predict=24,
                                template=False))
    with pytest.raises(PlainDrafts, match="drafted"):
        runner.run_pair(0, runner.config.prompts[0], 1)


def test_bench_on_each_ngram_type_and_a_chain(running, tmp_path, llama_server_bin, gemma_model):
    """Each n-gram type of b11434, and draft-simple chained with ngram-mod, as the drafted arm:
    they run, draft, and are named by their kind."""
    config = BenchConfig(prompts=(Prompt("code", PROMPTS[0][1]),), seeds=(1,), n_predict=32,
                         template=False, parts=("pairs",))
    seen = {}
    for kind in (*NGRAM_TYPES, "draft-simple,ngram-mod"):
        args = ["-m", str(gemma_model), "--spec-type", kind, "-c", "1024", "--threads", str(THREADS), "--metrics",
                "--spec-ngram-simple-size-n", "3", "--spec-ngram-map-k-size-n", "3",
                "--spec-ngram-map-k4v-size-n", "3", "--spec-ngram-mod-n-match", "16",
                "--spec-ngram-mod-n-min", "1", "--spec-ngram-mod-n-max", "16"]
        if kind.startswith("draft-"):
            args += ["-md", str(gemma_model), "--spec-draft-n-max", "3"]
        with llama_server(llama_server_bin, args, tmp_path / kind) as server:
            result, _ = run_bench(Root(running.root), config, mtp_url=server.url,
                                  plain_url=running.url(MODEL), save=False)
        (pair,) = result.pairs
        seen[kind] = pair.mtp.draft_n or 0
        assert result.kind == kind and result.servers[0].spec_type == kind
        assert pair.plain.draft_n is None
        if kind.startswith("ngram-"):
            assert result.pairing.startswith("not applicable")
            assert result.model is None or result.model.kind == "none"
        else:
            assert result.pairing.startswith("proven pair") and result.model.kind == "geometric"
            assert pair.mtp.counters == "metrics" and pair.mtp.draft_n > 0
        if pair.mtp.draft_n:
            assert pair.mtp.counters == "metrics"
    print("drafted tokens per kind:", json.dumps(seen))
    # the code prompt repeats itself: at least the simple n-gram lookup finds drafts in it
    assert seen["ngram-simple"] > 0 and seen["draft-simple,ngram-mod"] > 0


def test_tune_sweeps_the_kinds_and_writes_its_choice_or_no_drafting(running, tmp_path):
    """tune on the self-draft route: the draft model, the simple n-gram lookup and their chain
    (every kind that applies is in plan_cells' fast test; each n-gram type drafts for real in
    the test above), paired against the running plain route; then the depth sweep at the
    route's context writes the drafted setting only when it beats plain by more than the
    run's own noise, else no drafting, saying why."""
    bench = BenchConfig(prompts=(Prompt("list", PROMPTS[1][1]),), seeds=(1,), n_predict=16, template=False)
    config = TuneConfig(lengths=(2,), ngram_lengths=(8,), bench=bench, min_pairs=2,
                        kinds=("draft-simple", "ngram-simple", "draft-simple,ngram-simple"),
                        confirm_seeds=(5, 6), confirm_tokens=16, long_tokens=0, early_stop=False)
    result = run_tune(Root(running.root), "gemma-self", config)
    (backend,) = result.backends
    cells = {(lr.kind or backend.own_kind, lr.g): lr for lr in backend.lengths}
    assert backend.own_kind == "draft-simple"
    assert set(cells) == {("draft-simple", 2), ("ngram-simple", 8), ("draft-simple,ngram-simple", 2)}
    for (kind, g), lr in cells.items():
        assert len(lr.pairs) >= 2 and lr.robust is not None and lr.robust.n == len(lr.pairs)
        if kind.startswith("ngram-"):
            assert lr.predicted is None  # not predictive: none printed
        elif kind == "draft-simple":
            assert lr.predicted is not None and lr.knobs == {"--spec-draft-n-max": g}
        for p in lr.pairs:
            assert p.plain.draft_n is None
            if p.mtp.draft_n:
                assert p.mtp.counters == "metrics"
    assert cells[("ngram-simple", 8)].knobs == {"--spec-ngram-simple-size-n": 3, "--spec-ngram-simple-size-m": 8}
    assert cells[("draft-simple,ngram-simple", 2)].knobs == {
        "--spec-draft-n-max": 2, "--spec-ngram-simple-size-n": 3, "--spec-ngram-simple-size-m": 8}
    tuned = tomllib.loads((running.root / "etc/ojai/tuned.toml").read_text())["routes"][MODEL]
    # the choice is the depth sweep's (at the route's context): plain against the best drafted
    # setting, each comparison cleared against the noise of two identical plain servers
    choice = result.depth_choice
    assert choice is not None and result.noise is not None
    assert "noise" in choice.reason, choice.reason
    if result.chosen_kind != "none":
        assert choice.drafted and tuned["spec_type"] == result.chosen_kind
        assert tuned.get("drafting", True) is True and result.chosen_speedup > 1 + result.noise.max
    else:
        assert not choice.drafted
        assert tuned["drafting"] is False and "spec_type" not in tuned and "draft_n_max" not in tuned
        assert tuned["reason"] == choice.reason and "plain" in tuned["reason"], tuned["reason"]
    print("cells:", json.dumps({f"{k}@{g}": round(lr.score, 3) for (k, g), lr in cells.items()}),
          "choice:", result.choice)
