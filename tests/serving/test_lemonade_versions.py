"""Lemonade 11.x, which no package here provides, through a stand-in that behaves like 11.7 on the
points where the versions differ: ``lemonade version 11.7.0`` as its version line, user models
listed as ``user.NAME`` by ``/api/v1/models`` (2026.39.1 lists the bare ``NAME``), and no Gemma 4
MTP pair in its own catalog. Completions go to the real llama-server (the tests' CPU build)
serving the pair ojai downloaded, as 11.7's llama.cpp backend would start it.

Also: the plan names the entry of the real 2026.39.1 catalog that has the same pair."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from support import stand_ins
from support.fake_hub import announce_catalog, fake_hub  # noqa: F401 - a fixture
from support.http_stand_in import Served, StandInHandler, start
from support.tiny_route import ROUTE, catalog  # noqa: F401 - catalog is a fixture
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.server import llama_server
from typer.testing import CliRunner

from ojai_setup.cli import app

COMMANDS = ("systemctl restart lemond",)


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


class Lemonade117:
    """``/api/v1/health``, ``/api/v1/models`` and ``/api/v1/completions`` the way 11.7 answers
    them, for the user models in ``state``/user_models.json; completions are forwarded to
    ``backend`` (a llama-server) with the model name swapped, as Lemonade does."""

    #: the paths Lemonade serves for POST only; the calendar line (v2026.45 and later)
    #: answers a GET on them with 405
    POST_ONLY = ("/api/v1/completions", "/api/v1/chat/completions", "/api/v1/load",
                 "/api/v1/unload", "/api/v1/pull", "/api/v1/delete", "/api/v1/params")

    def __init__(self, state: Path, backend: str, *, calendar_line: bool = False) -> None:
        self.state, self.backend = state, backend
        self.requested: list[str] = []
        #: every (method, path) asked, in order
        self.seen: list[tuple[str, str]] = []
        prefix = "" if calendar_line else "user."
        outer = self

        class Handler(StandInHandler):
            def _send(self, status: int, payload: object) -> None:
                self.reply_json(status, payload)

            def do_GET(self) -> None:
                outer.seen.append(("GET", self.path))
                if calendar_line and self.path.split("?")[0] in outer.POST_ONLY:
                    return self._send(405, {"error": "method not allowed"})
                if self.path == "/api/v1/health":
                    return self._send(200, {"status": "ok", "model_loaded": None})
                if self.path.startswith("/api/v1/models"):
                    return self._send(200, {"object": "list", "data": [
                        {"id": f"{prefix}{name}", "object": "model", "owned_by": "lemonade",
                         "recipe": entry.get("recipe")} for name, entry in outer.models().items()]})
                self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                outer.seen.append(("POST", self.path))
                body = self.json_body()
                outer.requested.append(body.get("model"))
                if self.path != "/api/v1/completions" or \
                        body.get("model") not in {f"{prefix}{n}" for n in outer.models()}:
                    return self._send(404, {"error": {"message": f"model {body.get('model')} "
                                                      "not found", "type": "not_found"}})
                body["model"] = "llama"
                req = urllib.request.Request(outer.backend + "/v1/completions",
                                             data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=120) as resp:
                    self._send(200, json.loads(resp.read()))

        self.handler = Handler
        self.served: Served | None = None

    def models(self) -> dict:
        return json.loads((self.state / "user_models.json").read_text())

    @property
    def port(self) -> int:
        assert self.served is not None, "the stand-in is started by its with block"
        return self.served.port

    def __enter__(self) -> Lemonade117:
        self.served = start(self.handler, name="lemonade-11x")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.served is not None
        self.served.stop()


@pytest.mark.slow
def test_verify_calls_the_id_11x_lists(machine, catalog, llama_server_bin, tmp_path):
    box = machine("ojai-fresh")
    stand_ins.give_lemonade(box, COMMANDS)  # 11.7.0's version line
    stand_ins.give_built_llama_server(box, llama_server_bin)
    result = ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu", "--catalog", catalog,
                  "--model", ROUTE, "--apply", "--yes")
    assert result.exit_code == 0, result.output
    state = box / "var/lib/lemonade"
    entry = json.loads((state / "user_models.json").read_text())[ROUTE]
    args = ["-m", box / entry["checkpoints"]["main"].lstrip("/"),
            "-md", box / entry["checkpoints"]["draft"].lstrip("/"),
            "--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "-c", "2048"]
    with llama_server(llama_server_bin, [str(a) for a in args], tmp_path / "logs") as backend, \
            Lemonade117(state, backend.url) as lemonade:
        config = json.loads((state / "config.json").read_text())
        (state / "config.json").write_text(json.dumps({**config, "port": lemonade.port}))
        verified = ojai("verify", "--root", box, "--json", "--route", f"lemonade {ROUTE}",
                        "--tokens", "24")
        assert verified.exit_code == 0, verified.output
        [check] = json.loads(verified.stdout)["routes"]
        assert check["model_id"] == f"user.{ROUTE}"
        assert check["draft_n"] > 0 and check["draft_n_accepted"] > 0
        assert lemonade.requested == [f"user.{ROUTE}"]


@pytest.mark.slow
def test_verify_asks_the_calendar_line_only_what_it_serves(machine, catalog, llama_server_bin,
                                                           tmp_path):
    """Lemonade v2026.45 and later answer 405 to a GET on a POST-only path: ojai's verify asks
    health and models with GET and the completion with POST, nothing else, and passes."""
    box = machine("ojai-fresh")
    stand_ins.give_lemonade(box, COMMANDS, versions={"lemond --version":
                                                     "lemond version 2026.48.3\n"})
    stand_ins.give_built_llama_server(box, llama_server_bin)
    result = ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu", "--catalog", catalog,
                  "--model", ROUTE, "--apply", "--yes")
    assert result.exit_code == 0, result.output
    state = box / "var/lib/lemonade"
    recipe = json.loads((state / "recipe_options.json").read_text())[f"user.{ROUTE}"]
    assert recipe["llamacpp_args"] == "--spec-draft-n-max 3"  # no MTP defaults to undo
    entry = json.loads((state / "user_models.json").read_text())[ROUTE]
    args = ["-m", box / entry["checkpoints"]["main"].lstrip("/"),
            "-md", box / entry["checkpoints"]["draft"].lstrip("/"),
            "--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "-c", "2048"]
    with llama_server(llama_server_bin, [str(a) for a in args], tmp_path / "logs") as backend, \
            Lemonade117(state, backend.url, calendar_line=True) as lemonade:
        config = json.loads((state / "config.json").read_text())
        (state / "config.json").write_text(json.dumps({**config, "port": lemonade.port}))
        verified = ojai("verify", "--root", box, "--json", "--route", f"lemonade {ROUTE}",
                        "--tokens", "8")
        assert verified.exit_code == 0, verified.output
        [check] = json.loads(verified.stdout)["routes"]
        assert check["model_id"] == ROUTE
    assert lemonade.seen == [("GET", "/api/v1/health"), ("GET", "/api/v1/models"),
                             ("POST", "/api/v1/completions")]


@pytest.mark.parametrize(("line", "p_min"), [("lemonade version 11.6.0", True),
                                              ("lemonade version 11.7.0", False),
                                              ("lemond version 2026.48.3", False)])
def test_a_lemonade_that_injects_p_min_075_gets_p_min_0(machine, catalog, line, p_min):
    """Lemonade before 11.7.0 added --spec-draft-p-min 0.75 to MTP models (#3175, dropped by
    #3187); the route then passes llama.cpp's 0 itself."""
    box = machine("ojai-fresh")
    program = line.split()[0]
    stand_ins.give_lemonade(box, (*COMMANDS, "lemonade config set rocm_channel=nightly",
                                  "lemonade backends install llamacpp:rocm"),
                            versions={f"{program} --version": line + "\n", "lemonade --version":
                                      line.replace("lemond ", "lemonade ") + "\n"})
    plan = ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu", "--catalog", catalog,
                "--model", ROUTE, "--lemonade-downloads", "--show", "/var/lib/lemonade/recipe_options.json")
    assert plan.exit_code == 0, plan.output
    assert ("--spec-draft-p-min 0" in plan.stdout) == p_min, plan.stdout


def test_doctor_reports_the_calendar_line(machine):
    box = machine("ojai-fresh")
    stand_ins.give_lemonade(box, COMMANDS, versions={"lemond --version":
                                                     "lemond version 2026.48.3\n"})
    doctor = json.loads(ojai("doctor", "--root", box, "--json").stdout)
    finding = next(f for f in doctor["findings"] if f["id"] == "lemonade.version")
    assert "lemond version 2026.48.3 (calendar version, line 2026.48)" in finding["evidence"]


def test_doctor_parses_the_11x_version_line(machine):
    box = machine("ojai-fresh")
    stand_ins.give_lemonade(box, COMMANDS)
    doctor = json.loads(ojai("doctor", "--root", box, "--json").stdout)
    finding = next(f for f in doctor["findings"] if f["id"] == "lemonade.version")
    assert "lemonade version 11.7.0 (semantic version, line 11.x)" in finding["evidence"]
    assert "port 13305" in finding["evidence"] and "/var/lib/lemonade" in finding["evidence"]


def test_11x_catalog_has_no_gemma_pair_so_the_plan_says_nothing_of_it(machine, catalog):
    box = machine("ojai-fresh")
    stand_ins.give_lemonade(box, COMMANDS)
    plan = json.loads(ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu",
                           "--model", "gemma-4-26b-a4b", "--json").stdout)
    step = next(s for s in plan["steps"] if s["step"] == "lemonade")
    assert "own catalog" not in step["sentence"]


@pytest.mark.slow
def test_plan_says_when_lemonades_own_catalog_has_the_route(machine, fake_hub):
    """The catalog of the real 2026.39.1 package (from the sid chroot) has Gemma 4 26B-A4B's
    main + MTP pair. The stand-in hub serves the route's files: the Lemonade step waits for
    the model step, which asks the hub whether it serves them."""
    from support.sid import ensure_sid_chroot

    announce_catalog(fake_hub)
    box = machine("ojai-fresh")
    stand_ins.give_lemonade(box, COMMANDS)
    resources = "usr/share/lemonade-server/resources/server_models.json"
    (box / resources).parent.mkdir(parents=True)
    (box / resources).write_bytes((ensure_sid_chroot() / resources).read_bytes())
    plan = json.loads(ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu",
                           "--model", "gemma-4-26b-a4b", "--json").stdout)
    step = next(s for s in plan["steps"] if s["step"] == "lemonade")
    assert "Lemonade's own catalog already has this pair as Gemma-4-26B-A4B-it-MTP-GGUF" \
        in step["sentence"]
