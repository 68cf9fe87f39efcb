"""ojai verify: the speedup model, and routes answering (or not) on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from support.machine_state import record_state
from support.http_stand_in import StandInHandler, serving
from support.server import free_port
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.verify import predict
from ojai_setup.measure.stats import expected_tokens, solve_acceptance
from ojai_setup.core.root import Root


@pytest.mark.parametrize("a, g, e", [(0.0, 3, 1.0), (0.5, 1, 1.5), (0.5, 3, 1.875), (1.0, 3, 4.0)])
def test_expected_tokens_per_step(a, g, e):
    assert expected_tokens(a, g) == pytest.approx(e)


@pytest.mark.parametrize("a", [0.05, 0.3, 0.6, 0.9, 0.99])
@pytest.mark.parametrize("g", [1, 2, 3, 8])
def test_acceptance_is_solved_back_from_tokens_per_step(a, g):
    assert solve_acceptance(expected_tokens(a, g), g) == pytest.approx(a, abs=1e-6)


def test_prediction_from_timings():
    # 64 tokens, 48 of them accepted drafts: 16 verification steps of 4 tokens each
    out = predict({"predicted_n": 64, "predicted_per_second": 20.0, "draft_n": 60,
                   "draft_n_accepted": 48}, g=3, cost=0.1)
    assert out["accepted_fraction"] == pytest.approx(0.8)
    assert out["tokens_per_step"] == pytest.approx(4.0)
    assert out["acceptance_estimate"] == pytest.approx(1.0)
    assert out["predicted_speedup"] == pytest.approx(4.0 / 1.3)
    # without drafting there is no acceptance and no prediction
    plain = predict({"predicted_n": 64, "predicted_per_second": 20.0}, g=None)
    assert "predicted_speedup" not in plain and plain["tokens_per_second"] == 20.0


class _Fake(StandInHandler):
    timings: dict = {}
    tags: list = []

    def _json(self, code, payload):
        self.reply_json(code, payload)

    def do_GET(self):  # noqa: N802
        if self.path == "/health":
            self._json(200, {"status": "ok"})
        elif self.path == "/api/tags":
            self._json(200, {"models": [{"name": t} for t in self.tags]})
        else:
            self._json(404, {})

    def do_POST(self):  # noqa: N802
        self.body()
        self._json(200, {"content": "x", "timings": self.timings})


@pytest.fixture
def fake_route():
    with serving(_Fake, port=free_port()) as served:
        yield served.port


def test_verify_reports_routes_and_npu(tmp_path, fake_route):
    root = Root(tmp_path)
    _Fake.timings = {"predicted_n": 32, "predicted_per_second": 12.5, "draft_n": 30,
                     "draft_n_accepted": 24}
    _Fake.tags = ["qwen3:4b"]
    record_state(root, "routes", {"m-mtp": {"host": "127.0.0.1", "port": fake_route,
                                            "draft_n_max": 3}})
    record_state(root, "npu", {"tag": "qwen3:4b", "port": fake_route})
    result = CliRunner().invoke(app, ["verify", "--root", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    by_name = {r["route"]: r for r in data["routes"]}
    mtp = by_name["m-mtp"]
    assert mtp["draft_n"] == 30 and mtp["tokens_per_step"] == pytest.approx(4.0)
    assert mtp["predicted_speedup"] > 1
    assert by_name["flm qwen3:4b"]["healthy"] is True
    human = CliRunner().invoke(app, ["verify", "--root", str(tmp_path)], env={"NO_COLOR": "1"})
    assert "predicted speedup" in human.stdout and "not measured" in human.stdout


def test_verify_fails_for_a_route_that_does_not_answer(tmp_path):
    root = Root(tmp_path)
    record_state(root, "routes", {"gone": {"host": "127.0.0.1", "port": free_port(),
                                           "script": "/opt/ojai/routes/gone.sh"}})
    result = CliRunner().invoke(app, ["verify", "--root", str(tmp_path), "--timeout", "1"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "gone" in result.stdout and "/health answered nothing" in result.stdout
    assert "start it with: /opt/ojai/routes/gone.sh" in result.stdout
    # with a unit, the unit is the way to start it
    unit = tmp_path / "etc/systemd/system/ojai-gone.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\n")
    result = CliRunner().invoke(app, ["verify", "--root", str(tmp_path), "--timeout", "1"],
                                env={"COLUMNS": "200"})
    assert "start it with: sudo systemctl enable --now ojai-gone.service" in result.stdout
    # a route that cannot share the GPU budget with another is started alone, not enabled
    record_state(root, "routes", {"gone": {"host": "127.0.0.1", "port": free_port(),
                                           "script": "/opt/ojai/routes/gone.sh",
                                           "conflicts": ["gone-mtp"]}})
    result = CliRunner().invoke(app, ["verify", "--root", str(tmp_path), "--timeout", "1"],
                                env={"COLUMNS": "200"})
    assert ("start it with: sudo systemctl start ojai-gone.service (it stops gone-mtp: they "
            "do not fit the GPU budget together; `enable` only one of them for boot)"
            in " ".join(result.stdout.split())), result.stdout


def test_verify_without_routes_says_how_to_get_them(tmp_path):
    result = CliRunner().invoke(app, ["verify", "--root", str(tmp_path)])
    assert result.exit_code == 1
    assert f"`ojai setup --root {tmp_path} --model NAME --apply`" in result.stderr



def test_the_apply_names_verify_as_the_gate_of_each_llama_server_route(tmp_path):
    """A route the apply did not gate (it did not change it): its last lines say that `ojai
    verify` is where a llama-server route's output is checked against the CPU before it
    serves; an NPU route keeps its check."""
    from ojai_setup.commands.verify import next_steps

    root = Root(tmp_path)
    record_state(root, "routes", {"m": {"host": "127.0.0.1", "port": 8081,
                                        "script": "/opt/ojai/routes/m.sh"}})
    record_state(root, "npu", {"tag": "qwen3:4b", "port": 52625})
    (npu,) = [line for line in next_steps(root) if line.startswith("start flm qwen3:4b:")]
    (route,) = [line for line in next_steps(root) if line.startswith("start m:")]
    assert "its output against its own build's CPU backend" in route
    assert "correctness gate" in route and route.endswith(" --route m") and "ojai verify" in route
    assert "CPU" not in npu and "; then check it: ojai " in npu
