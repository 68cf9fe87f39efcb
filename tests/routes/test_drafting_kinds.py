"""The kinds of drafting in bench and tune, without servers: the /metrics counters, the words,
the cells tune sweeps, the choice it writes (never a loss), and the tuned file's new fields."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ojai_setup.apply.tuning import save_route_tuning
from ojai_setup.measure import kinds
from ojai_setup.measure.campaign import arm_run
from ojai_setup.measure.client import Generation, SpecCounters, parse_spec_metrics
from ojai_setup.measure.prompts import load_prompts, old_format_note
from ojai_setup.measure.results import ArmRun, Pair
from ojai_setup.measure.servers import LaunchScript
from ojai_setup.measure.stats import robust, summarize
from ojai_setup.measure.tune import (
    BackendResult,
    LengthResult,
    TuneConfig,
    TuneResult,
    _choose_and_write,
    cell_knobs,
    cell_script,
    plan_cells,
)
from ojai_setup.core.root import Root
from ojai_setup.facts.tuning import load_tuning
from ojai_setup.formats.tuning import RouteTuning, TuningError, parse_tuning

#: what b11434 serves on /metrics after one self-drafted completion (captured from the real
#: CPU build with Gemma 3 270M, -md the same file, --spec-draft-n-max 4, temperature 0)
METRICS = """\
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
llamacpp:n_decode_total 12
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 37
llamacpp:spec_decode_num_accepted_tokens_total 37
llamacpp:spec_decode_num_drafts_total 10
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 10
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 9
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 9
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 9
"""


def test_metrics_counters_are_read_and_subtracted():
    c = parse_spec_metrics(METRICS)
    assert c == SpecCounters(drafts=10, draft_tokens=37, accepted=37, per_position=(10, 9, 9, 9))
    assert parse_spec_metrics("llamacpp:n_decode_total 12\n") is None  # no counters: no source
    assert c.minus(SpecCounters(4, 16, 12, (4, 3))) == SpecCounters(6, 21, 25, (6, 6, 9, 9))


def _gen(dn, acc, steps):
    return Generation(text="x", timings={"predicted_n": 40, "predicted_ms": 1000.0,
                                         "predicted_per_second": 40.0, "draft_n": dn,
                                         "draft_n_accepted": acc}, steps=steps, wall_s=1.0)


def test_an_arm_takes_the_exact_counters_when_they_agree_with_its_timings():
    # the stream saw 4 steps (it can merge steps); the server counted 6 of 3 drafted tokens
    gen = _gen(18, 12, [(3, 3), (6, 4), (6, 3), (3, 2)])
    counters = SpecCounters(drafts=6, draft_tokens=18, accepted=12, per_position=(5, 4, 3))
    run = arm_run("mtp", gen, counters)
    assert run.counters == "metrics" and run.steps == 6
    assert run.position_rates == pytest.approx([5 / 6, 4 / 6, 3 / 6])
    assert run.mean_accepted_length == pytest.approx(1 + 12 / 6)
    assert run.rejections == 3 and run.acceptance == pytest.approx(12 / 15)
    # counters that do not match the completion (someone else used the server): timings
    other = arm_run("mtp", gen, SpecCounters(drafts=9, draft_tokens=27, accepted=20, per_position=(8, 7, 5)))
    assert other.counters == "timings" and other.steps == 4


@pytest.mark.parametrize("spec, label, ngram", [
    ("draft-mtp", "MTP", False), ("draft-simple", "draft-simple", False),
    ("ngram-simple", "ngram-simple", True), ("draft-simple,ngram-mod", "draft-simple,ngram-mod", False),
    (None, "drafted", False), ("none", "drafted", False)])
def test_the_drafted_arm_is_named_by_its_kind(spec, label, ngram):
    assert kinds.label(spec) == label and kinds.is_ngram(spec) is ngram


@pytest.mark.parametrize("info, version", [("b11434-unknown", "build 11434"),
                                           ("b11434-abc1234", "build 11434 commit abc1234"),
                                           ("8171 (c17dce4f5)", "8171 (c17dce4f5)"), (None, None)])
def test_the_build_from_props(info, version):
    assert kinds.version_of_build_info(info) == version


def test_robust_summary_keeps_a_spoilt_pair_from_the_median():
    r = robust([1.30, 1.32, 0.02, 1.31, 1.29])
    assert r.median == pytest.approx(1.30) and r.outliers == (0.02,)
    assert r.ci_low is not None and r.ci_low > 1.0  # one spoilt pair of five moves no choice
    assert summarize([1.30, 1.32, 0.02, 1.31, 1.29]).mean < 1.1  # where the mean would


SCRIPT = LaunchScript("#!/bin/sh\n", ("/opt/llama-server", "--model", "/m.gguf", "--spec-draft-model",
                                      "/m.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "4",
                                      "-ngld", "99", "--port", "8080"))


def test_cells_set_each_kinds_own_knobs():
    cfg = TuneConfig()
    ngram = cell_script(SCRIPT, "ngram-simple", cell_knobs("ngram-simple", 8, cfg))
    assert ngram.value("--spec-type") == "ngram-simple" and ngram.value("--spec-draft-model") is None
    assert ngram.value("-ngld") is None and ngram.value("--spec-draft-n-max") is None
    assert ngram.value("--spec-ngram-simple-size-m") == "8" and ngram.value("--spec-ngram-simple-size-n") == "3"
    assert "--metrics" in ngram.argv
    mod = cell_knobs("ngram-mod", 16, cfg)
    assert mod == {"--spec-ngram-mod-n-match": 16, "--spec-ngram-mod-n-max": 16, "--spec-ngram-mod-n-min": 1}
    head = cell_script(SCRIPT, "draft-simple", cell_knobs("draft-simple", 2, cfg))
    assert head.value("--spec-draft-n-max") == "2" and head.value("--spec-draft-model") == "/m.gguf"
    chain = cell_knobs("draft-simple,ngram-mod", 2, cfg, head_g=2, ngram_g=32)
    assert chain["--spec-draft-n-max"] == 2 and chain["--spec-ngram-mod-n-max"] == 32
    assert cell_knobs("ngram-cache", 8, cfg) == {}


def test_the_kinds_swept_are_those_that_apply():
    available = ("none", "draft-simple", "draft-mtp", *kinds.NGRAM_TYPES)
    cfg = TuneConfig(lengths=(1, 2), ngram_lengths=(8,))
    cells = dict(plan_cells("draft-simple", available, True, cfg))
    assert cells == {"draft-simple": [1, 2], "ngram-simple": [8], "ngram-map-k": [8], "ngram-map-k4v": [8],
                     "ngram-mod": [8], "ngram-cache": [8]}
    # an MTP head kind the route has no heads for is not swept; synthetic rates keep to its own
    assert "draft-mtp" not in cells
    assert dict(plan_cells("draft-mtp", available, True, TuneConfig(lengths=(3,), synthetic_acceptance=0.8))) \
        == {"draft-mtp": [3]}
    # a build whose help cannot be read: the route's own kind only
    assert dict(plan_cells("draft-mtp", (), False, cfg)) == {"draft-mtp": [1, 2]}


def _pair(s: float) -> Pair:
    run = ArmRun(arm="mtp", tokens=10, server_tps=s, harness_tps=None, wall_s=1.0)
    plain = ArmRun(arm="plain", tokens=10, server_tps=1.0, harness_tps=None, wall_s=1.0)
    return Pair(prompt_id="p", seed=1, order="mtp,plain", mtp=run, plain=plain, speedup=s)


def _backend(cells: list[tuple[str, int, list[float]]], confirm: list[float] | None) -> BackendResult:
    from ojai_setup.measure.tune import refresh_predictions

    b = BackendResult(binary="/opt/llama-server", fingerprint="f", own_kind="draft-simple", safe=True)
    for kind, g, speedups in cells:
        b.lengths.append(LengthResult(g=g, kind=kind, knobs={"--spec-draft-n-max": g} if not kind else
                                      {f"--spec-{kind}-size-m": g}, pairs=[_pair(s) for s in speedups],
                                      measured=summarize(speedups), robust=robust(speedups)))
    refresh_predictions(b)
    if confirm:
        b.confirmed, b.confirmed_robust = summarize(confirm), robust(confirm)
    return b


def test_a_loss_is_never_written_no_drafting_is(tmp_path):
    """Every setting measured below plain (the self-drafted Gemma at -35 %): the choice is no
    drafting, and the tuned file says so, with no length in it."""
    root = Root(tmp_path)
    b = _backend([("", 4, [0.62, 0.66, 0.65]), ("", 5, [0.64, 0.66, 0.65]), ("ngram-simple", 8, [0.97, 1.0, 0.99])],
                 confirm=None)
    result = TuneResult(route="gemma", started="2026-12-02T13:00:00+00:00", backends=[b])
    _choose_and_write(root, None, TuneConfig(), result, tmp_path / "progress.json")
    assert result.chosen_kind == "none" and result.choice.startswith("no drafting (the plain route)")
    tuned = tomllib.loads((tmp_path / "etc/ojai/tuned.toml").read_text())["routes"]["gemma"]
    assert tuned["drafting"] is False and "draft_n_max" not in tuned and "spec_type" not in tuned
    assert "best ngram-simple" in tuned["reason"]
    assert load_tuning(root).routes["gemma"].source().endswith("no drafting beat plain, measured -1%")


def test_a_gain_within_its_interval_of_the_threshold_is_no_drafting(tmp_path):
    b = _backend([("ngram-simple", 8, [1.2, 1.3, 1.25])], confirm=[1.30, 0.98, 1.02, 1.25, 0.97])
    result = TuneResult(route="gemma", started="2026-12-02T13:00:00+00:00", backends=[b])
    _choose_and_write(Root(tmp_path), None, TuneConfig(), result, tmp_path / "progress.json")
    assert result.chosen_kind == "none"


def test_a_confirmed_gain_writes_the_kind_and_its_knobs(tmp_path):
    b = _backend([("", 2, [0.7, 0.72, 0.71]), ("ngram-simple", 8, [2.9, 3.1, 3.0])],
                 confirm=[3.0, 3.1, 2.9, 3.05, 0.4])  # one confirmation pair spoilt by load
    result = TuneResult(route="gemma", started="2026-12-02T13:00:00+00:00", backends=[b])
    _choose_and_write(Root(tmp_path), None, TuneConfig(), result, tmp_path / "progress.json")
    assert result.chosen_kind == "ngram-simple" and result.chosen_speedup == pytest.approx(3.0)
    tuned = tomllib.loads((tmp_path / "etc/ojai/tuned.toml").read_text())["routes"]["gemma"]
    assert tuned["spec_type"] == "ngram-simple" and tuned["knobs"] == {"--spec-ngram-simple-size-m": 8}
    assert "draft_n_max" not in tuned and tuned.get("drafting", True) is True


@pytest.mark.parametrize("text, where", [
    ("[routes.x]\ndrafting = false\ndraft_n_max = 2\ndate = 'd'\n", "drafting = false takes no"),
    ("[routes.x]\ndate = 'd'\n", "needs draft_n_max or spec_type")])
def test_inconsistent_tuned_routes_are_errors(text, where):
    with pytest.raises(TuningError, match=where):
        parse_tuning(text, "/etc/ojai/tuned.toml")


def test_no_drafting_round_trips(tmp_path):
    root = Root(tmp_path)
    t = RouteTuning(drafting=False, reason='nothing beat "plain"', date="2026-12-02", speedup=0.65)
    save_route_tuning(root, "g", t)
    assert load_tuning(root).routes["g"] == t


def test_bench_and_tune_read_a_prompt_file_alike_one_prompt_per_paragraph(tmp_path: Path):
    path = tmp_path / "mine.txt"
    path.write_text("first prompt\n\nsecond prompt\nits second line\n")
    want = ["first prompt", "second prompt\nits second line"]
    assert [p.text for p in load_prompts(path, lines=True)] == want  # tune
    assert [p.text for p in load_prompts(path)] == want  # bench
    assert old_format_note(path) is None


def test_tunes_old_one_a_line_file_is_still_read_with_a_note(tmp_path: Path):
    path = tmp_path / "old.txt"
    path.write_text("first prompt\nsecond prompt\nthird\n")
    assert [p.text for p in load_prompts(path, lines=True)] == ["first prompt", "second prompt", "third"]
    note = old_format_note(path)
    assert note and "read as 3 prompts, one a line (tune's old format)" in note
    assert "put a blank line between them" in note
    from typer.testing import CliRunner

    from ojai_setup.cli import app

    result = CliRunner().invoke(app, ["tune", "r", "--root", str(tmp_path), "--prompts",
                                      str(path)], env={"COLUMNS": "300"})
    assert note in result.stderr, result.stderr
    for command in (["tune", "--help"], ["bench", "--help"]):
        text = " ".join(CliRunner().invoke(app, command, env={"COLUMNS": "300"}).stdout.split())
        assert "one prompt per paragraph (blank lines between them)" in text, text
