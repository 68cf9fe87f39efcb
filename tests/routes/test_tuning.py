"""Tuned route settings: written by ojai tune, rendered by ojai setup through the normal plan."""

from __future__ import annotations

import json

import pytest
from support.fake_hub import fake_hub  # noqa: F401 - a fixture, which hub uses
from test_routes import CATALOG, hub  # noqa: F401 - hub: a stand-in hub for every test here
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.root import Root
from ojai_setup.apply.tuning import save_route_tuning
from ojai_setup.core.paths import TUNED_FILE
from ojai_setup.facts.tuning import load_tuning
from ojai_setup.formats.tuning import BackendTuning, RouteTuning, TuningError
from ojai_setup.measure.tune import LengthResult, BackendResult, refresh_predictions, trend_is_clear
from ojai_setup.measure.stats import summarize
from support.stand_ins import give_lemonade, give_llama_server


def _plan(root, tmp_path):
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(CATALOG)
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none", "--json",
                                      "--model", "tiny", "--catalog", str(catalog)])
    return json.loads(result.stdout)


def _step(plan, name):
    return next(s for s in plan["steps"] if s["step"] == name)


def test_setup_renders_the_tuned_length_and_says_where_it_came_from(machine, tmp_path):
    root = machine("ojai-fresh")
    give_llama_server(root, "gfx1150")
    give_lemonade(root, ("systemctl restart lemond",))  # its follow-up must be able to run
    before = _step(_plan(root, tmp_path), "routes")
    assert "draft length 2: catalog default" in before["sentence"]
    script = next(a["after"] for a in before["actions"] if a["path"].endswith("tiny-mtp.sh"))
    assert "--spec-draft-n-max 2" in script

    save_route_tuning(Root(root), "tiny", RouteTuning(
        draft_n_max=5, date="2026-11-30T21:40:00+00:00", speedup=1.42, binary="/opt/x/llama-server",
        backends={"/opt/vulkan/llama-server": BackendTuning(safe=False, reason="collapsed")}))
    plan = _plan(root, tmp_path)
    routes = _step(plan, "routes")
    assert "draft length 5: tuned 2026-11-30, measured +42%" in routes["sentence"]
    script = next(a["after"] for a in routes["actions"] if a["path"].endswith("tiny-mtp.sh"))
    assert "--spec-draft-n-max 5" in script and "--spec-draft-n-max 2" not in script
    lemonade = _step(plan, "lemonade")
    options = next(a["after"] for a in lemonade["actions"] if a["path"].endswith("recipe_options.json"))
    assert "--spec-draft-n-max 5" in json.loads(options)["user.tiny"]["llamacpp_args"]
    assert TUNED_FILE in routes["reads"]


def test_tuned_file_round_trips_and_keeps_other_routes(tmp_path):
    root = Root(tmp_path)
    save_route_tuning(root, "a", RouteTuning(draft_n_max=3, date="2026-11-30", speedup=1.2000000000000002))
    save_route_tuning(root, "b.c", RouteTuning(draft_n_max=1, date="2026-12-01", binary='/opt/"odd" path/x'))
    t = load_tuning(root)
    assert t.routes["a"].draft_n_max == 3 and t.routes["b.c"].binary == '/opt/"odd" path/x'
    assert t.routes["a"].source() == "tuned 2026-11-30, measured +20%"


@pytest.mark.parametrize("text, where", [("[routes.x]\ndraft_n_max = 0\ndate = 'd'\n", "routes.x.draft_n_max"),
                                         ("[routes.x\n", "not valid TOML"),
                                         ("[routes.x]\ndraft_n_max = 2\ndate = 'd'\nsurprise = 1\n", "surprise")])
def test_a_damaged_tuned_file_is_an_error_naming_the_field(machine, tmp_path, text, where):
    root = machine("ojai-fresh")
    (root / "etc/ojai").mkdir(parents=True, exist_ok=True)
    (root / "etc/ojai/tuned.toml").write_text(text)
    with pytest.raises(TuningError, match=where):
        load_tuning(Root(root))
    give_llama_server(root, "gfx1150")
    routes = _step(_plan(root, tmp_path), "routes")
    assert routes["status"] == "blocked" and "tuned.toml" in routes["sentence"]


def _length(g, speedups):
    return LengthResult(g=g, pairs=[], measured=summarize(speedups))


def test_early_stop_needs_two_worse_lengths_and_the_model_agreeing():
    b = BackendResult(binary="x", fingerprint="f", lengths=[
        _length(1, [1.5, 1.52]), _length(2, [1.8, 1.82]), _length(3, [1.6, 1.62])])
    refresh_predictions(b)
    assert b.best_g == 2
    b.acceptance, b.draft_cost = 0.6, 0.3
    assert trend_is_clear(b, 0.03) is None  # only one length past the best
    b.lengths.append(_length(4, [1.5, 1.52]))
    assert "lengths 3 and 4" in trend_is_clear(b, 0.03)
    b.acceptance, b.draft_cost = 0.99, 0.01  # the model says longer drafts still gain
    assert trend_is_clear(b, 0.03) is None


def _pair(g: int, base: float, c: float, *, passes: int = 100, accepted_per_pass: int = 1):
    """A pair whose MTP arm drafted ``g`` tokens per pass, each pass costing ``base + g*c``
    plain tokens (the plain arm: 10 ms a token)."""
    from ojai_setup.measure.results import ArmRun, Pair
    from ojai_setup.measure.stats import draft_cost

    tokens = passes * (1 + accepted_per_pass)
    ms = passes * (base + g * c) * 10.0
    mtp = ArmRun(arm="mtp", tokens=tokens, server_tps=None, harness_tps=None, predicted_ms=ms,
                 draft_n=passes * g, draft_n_accepted=passes * accepted_per_pass,
                 rejections=passes, wall_s=1.0)
    plain = ArmRun(arm="plain", tokens=tokens, server_tps=100.0, harness_tps=None, wall_s=1.0)
    cost = draft_cost(mtp_predicted_n=tokens, mtp_predicted_ms=ms, draft_n=passes * g,
                      draft_n_accepted=passes * accepted_per_pass, plain_ms_per_token=10.0)
    return Pair(prompt_id="p", seed=1, order="mtp,plain", mtp=mtp, plain=plain, speedup=1.0,
                draft_cost=cost)


def test_the_fit_finds_a_fixed_cost_per_pass_across_lengths():
    """Passes that cost 1.7 + 0.55*g plain tokens: fitted over several lengths, the base and c
    come back; the classic model (base 1) would overrate the short drafts."""
    from ojai_setup.measure.tune import fit_model

    lengths = [LengthResult(g=g, pairs=[_pair(g, 1.7, 0.55)]) for g in (1, 2, 4, 8)]
    a, c, base = fit_model(lengths)
    assert a == pytest.approx(0.5) and c == pytest.approx(0.55) and base == pytest.approx(1.7)
    b = BackendResult(binary="x", fingerprint="f", lengths=[
        lr.model_copy(update={"measured": summarize([expected / (1.7 + 0.55 * lr.g)] * 2)})
        for lr in lengths
        for expected in [(1 - 0.5 ** (lr.g + 1)) / 0.5]])
    refresh_predictions(b)
    assert b.pass_base == pytest.approx(1.7) and b.max_prediction_error == pytest.approx(0, abs=1e-9)


def test_one_length_alone_keeps_the_classic_model():
    from ojai_setup.measure.tune import fit_model

    a, c, base = fit_model([LengthResult(g=3, pairs=[_pair(3, 1.7, 0.55)] * 2)])
    assert base == 1.0 and c == pytest.approx((1.7 + 3 * 0.55 - 1) / 3)


def _gemma_plan(root, tmp_path):
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none", "--json",
                                      "--model", "gemma-3-270m-self"])
    plan = json.loads(result.stdout)
    routes = _step(plan, "routes")
    scripts = {a["path"].rsplit("/", 1)[-1]: a["after"] for a in routes["actions"]
               if a.get("path", "").endswith(".sh")}
    return routes, scripts


def test_setup_lays_tunes_kind_and_knobs_over_the_catalog_or_says_why_not(machine, tmp_path):
    """What ojai tune chose for the self-drafted Gemma: a chain with n-gram knobs, n-gram alone
    (its draft file dropped), or no drafting (the route stays, the sentence says to serve the
    plain route)."""
    root = machine("ojai-fresh")
    give_llama_server(root, "gfx1150")
    _, before = _gemma_plan(root, tmp_path)
    drafted = "gemma-3-270m-self-draft.sh"
    assert "--spec-type draft-simple" in before[drafted] and "ngram-mod" not in before[drafted]

    save_route_tuning(Root(root), "gemma-3-270m-self", RouteTuning(
        spec_type="draft-simple,ngram-mod", draft_n_max=3, date="2026-12-02T13:00:00+00:00", speedup=1.3,
        knobs={"--spec-ngram-mod-n-max": 16, "--spec-ngram-mod-n-min": 1, "--spec-ngram-mod-n-match": 16}))
    routes, scripts = _gemma_plan(root, tmp_path)
    assert "tuned 2026-12-02, measured +30%" in routes["sentence"], routes["sentence"]
    s = scripts[drafted]
    assert "draft-simple,ngram-mod" in s and "--spec-ngram-mod-n-max 16" in s and "--spec-draft-n-max 3" in s

    save_route_tuning(Root(root), "gemma-3-270m-self", RouteTuning(
        spec_type="ngram-simple", date="2026-12-02T13:00:00+00:00", speedup=2.1,
        knobs={"--spec-ngram-simple-size-n": 3, "--spec-ngram-simple-size-m": 16}))
    routes, scripts = _gemma_plan(root, tmp_path)
    s = next(v for k, v in scripts.items() if "ngram-simple" in v)
    assert "--spec-ngram-simple-size-m 16" in s and "--spec-draft-model" not in s, s

    save_route_tuning(Root(root), "gemma-3-270m-self", RouteTuning(
        drafting=False, reason="no setting beat plain by 5%", date="2026-12-02T13:00:00+00:00", speedup=0.65))
    routes, scripts = _gemma_plan(root, tmp_path)
    assert "no drafting beat plain" in routes["sentence"] and "serve the plain route" in routes["sentence"]
    assert scripts == before


def test_a_reason_with_a_servers_log_lines_is_written_as_valid_toml():
    """A gate that could not start a server carries the log's last lines in its reason."""
    from ojai_setup.formats.tuning import BackendTuning, RouteTuning, Tuning, parse_tuning, render_tuning

    reason = 'the correctness gate could not be run: gate-x: exited\nerror: "bad"\tC:\\x \x1b[0m'
    tuning = Tuning(routes={"gemma": RouteTuning(drafting=False, reason=reason, date="2026-12-05",
                                                 backends={"/opt/v/llama-server": BackendTuning(safe=False, reason=reason)})})
    text = render_tuning(tuning)
    assert parse_tuning(text, "tuned.toml") == tuning
    assert all(line.count('"') % 2 == 0 for line in text.splitlines() if line.startswith("reason"))
