"""``ojai setup --model A --model B``: several routes planned as one deployment on the GPU budget
and served behind one port, through llama-server's router mode (a models preset ojai writes)
and through Lemonade (every route registered, ``max_loaded_models`` set to what fits).

The plans are made for the OJAI box (48 GiB GPU budget) with the stand-in Hub on 127.0.0.1
serving the owner's own GGUF and announcing the catalog route's files; the real router and the
real Lemonade run the files in tests/serving/test_router_real.py and tests/serving/test_lemonade_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fake_hub import FakeHub, announce_route, fake_hub  # noqa: F401 - fake_hub is a fixture
from support.gguf_files import attention_model
from support.machine_state import store_capture
from support.models_disk import ojai_with_models_disk
from support.server import free_port
from support.stand_ins import give_lemonade
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.root import CommandResult
from ojai_setup.domain.catalog import load_catalog

REPO = "ojai-test/tiny-llama-GGUF"
GEMMA = "/var/lib/ojai/models/unsloth/gemma-4-26B-A4B-it-GGUF"


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def own(tmp_path, fake_hub: FakeHub) -> str:
    """An owner's GGUF on the stand-in Hub, and the catalog routes' files announced there."""
    [path] = attention_model(tmp_path / "Tiny-Llama-Q4_K_M.gguf", payload_bytes=1 << 20)
    fake_hub.add_path(REPO, path.name, path)
    catalog = load_catalog(None)
    for name in ("gemma-4-26b-a4b", "qwen3.6-27b", "gpt-oss-20b"):
        announce_route(fake_hub, catalog.get(name))
    return f"hf:{REPO}:{path.name}"


def setup_args(root: Path, *args: object) -> list[str]:
    return [str(a) for a in ("setup", "--root", root, "--llamacpp", "none", "--no-npu", "--json",
                             *args)]


def plan(root: Path, *args: object) -> tuple[dict, int]:
    result = ojai(*setup_args(root, *args))
    return json.loads(result.stdout), result.exit_code


def plan_on_box_disk(root: Path, *args: object) -> tuple[dict, int]:
    """:func:`plan` for two large catalog routes (about 35 GB to download): the machine's models
    folder on a 1 TB filesystem of its own, so the plan does not hang on the host's free space."""
    done = ojai_with_models_disk(root, *setup_args(root, *args))
    assert done.stdout, done.stderr
    return json.loads(done.stdout), done.returncode


def step(data: dict, name: str) -> dict:
    return next(s for s in data["steps"] if s["step"] == name)


def written(data: dict, path: str) -> str:
    return next(a["after"] for s in data["steps"] for a in s["actions"] if a.get("path") == path)


def test_an_own_gguf_and_a_catalog_route_are_one_deployment_behind_one_port(box, own):
    data, code = plan(box, "--model", own, "--model", "gemma-4-26b-a4b")
    assert code == 2, data
    model = step(data, "model")
    assert model["status"] == "change", model
    # both fitted, each with its own sizes, and both downloaded
    assert "tiny-llama-q4_k_m-ngram at ctx 32768 needs" in model["sentence"]
    assert "gemma-4-26b-a4b-mtp at ctx 32768 needs" in model["sentence"]
    repos = {a["repo_id"] for a in model["actions"]}
    assert repos == {REPO, "unsloth/gemma-4-26B-A4B-it-GGUF"}
    routes = step(data, "routes")
    assert routes["status"] == "change", routes
    sentence = routes["sentence"]
    assert "2 routes behind port 8080" in sentence
    assert "tiny-llama-q4_k_m-ngram" in sentence and "gemma-4-26b-a4b-mtp" in sentence
    assert "of the 48.0 GiB GPU budget: all 2 stay loaded at once (--models-max 2)" in sentence
    preset = written(data, "/opt/ojai/routes/router.ini")
    sections = preset.split("\n[")[1:]
    own_section = next(s for s in sections if s.startswith("tiny-llama-q4_k_m-ngram]"))
    gemma_section = next(s for s in sections if s.startswith("gemma-4-26b-a4b-mtp]"))
    assert f"model = /var/lib/ojai/models/{REPO}/Tiny-Llama-Q4_K_M.gguf" in own_section
    assert "spec-type = ngram-mod" in own_section
    # the catalog route's own arguments: its MTP sidecar, draft length and context
    assert f"model = {GEMMA}/gemma-4-26B-A4B-it-UD-Q4_K_M.gguf" in gemma_section
    assert f"spec-draft-model = {GEMMA}/mtp-gemma-4-26B-A4B-it.gguf" in gemma_section
    assert "spec-type = draft-mtp" in gemma_section and "ctx-size = 32768" in gemma_section
    assert "spec-draft-n-max = " in gemma_section
    for s in (own_section, gemma_section):  # the router sets these itself
        assert "port =" not in s and "host =" not in s and "alias =" not in s
        assert "load-on-startup = true" in s
    script = written(data, "/opt/ojai/routes/router.sh")
    assert "--models-preset /opt/ojai/routes/router.ini" in script
    assert "--models-max 2" in script and "--port 8080" in script
    # no single-route launch scripts beside the router
    paths = [a["path"] for a in routes["actions"]]
    assert sorted(paths) == ["/opt/ojai/routes/router.ini", "/opt/ojai/routes/router.sh"]


def test_routes_that_do_not_fit_together_load_on_demand(box, own):
    data, _ = plan_on_box_disk(box, "--model", "gemma-4-26b-a4b", "--model", "qwen3.6-27b",
                               "--gpu-memory", "24")
    routes = step(data, "routes")
    assert routes["status"] == "change", routes
    assert ("at most 1 loaded at once (--models-max 1); gemma-4-26b-a4b-mtp loaded at start, "
            "qwen3.6-27b-mtp on demand") in routes["sentence"]
    preset = written(data, "/opt/ojai/routes/router.ini")
    qwen = preset.split("[qwen3.6-27b-mtp]")[1]
    assert "load-on-startup = false" in qwen
    assert "sleep-idle-seconds = 600" in qwen  # b11434's help has it: idle unload
    assert "--models-max 1" in written(data, "/opt/ojai/routes/router.sh")


def test_a_models_max_that_does_not_fit_is_refused(box, own):
    data, code = plan(box, "--model", "gemma-4-26b-a4b", "--model", "qwen3.6-27b",
                      "--gpu-memory", "24", "--models-max", "2")
    routes = step(data, "routes")
    assert code == 1 and routes["status"] == "blocked", routes
    assert "--models-max 2: the 2 largest together need" in routes["sentence"]
    assert "at most 1 fit at once (--models-max 1)" in routes["sentence"]


@pytest.mark.parametrize("args, message", [
    (("--model", "gpt-oss-20b", "--models-max", "1"), "--models-max 1 is for several routes"),
    (("--model", "gpt-oss-20b", "--model", "gpt-oss-20b"), "--model gpt-oss-20b is given twice"),
    (("--model", "gpt-oss-20b", "--model", "gemma-4-12b", "--models-max", "3"),
     "--models-max 3: only 2 routes are asked for"),
])
def test_wrong_combinations_are_usage_errors(box, args, message):
    result = ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu", *args)
    assert result.exit_code == 64, result.output
    assert message in result.output


def test_each_name_is_resolved_and_an_unknown_one_named(box, own):
    result = ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu",
                  "--model", "Gemma-4-26B-A4B", "--model", "gpt-oss-21b")
    assert result.exit_code == 64
    assert "--model gpt-oss-21b: no such route; did you mean gpt-oss-20b" in result.output


def test_lemonade_gets_every_route_and_max_loaded_models(box, own):
    config = give_lemonade(box, ("systemctl restart lemond",))
    data, _ = plan_on_box_disk(box, "--model", own, "--model", "gemma-4-26b-a4b",
                               "--model", "qwen3.6-27b", "--gpu-memory", "24")
    lemonade = step(data, "lemonade")
    assert lemonade["status"] == "change", lemonade
    assert "max_loaded_models 1" in lemonade["sentence"]
    folder = "/" + str(config.relative_to(box))
    models = json.loads(written(data, f"{folder}/user_models.json"))
    assert set(models) == {"tiny-llama-q4_k_m", "gemma-4-26b-a4b", "qwen3.6-27b"}
    assert models["gemma-4-26b-a4b"]["checkpoints"]["draft"].endswith("mtp-gemma-4-26B-A4B-it.gguf")
    options = json.loads(written(data, f"{folder}/recipe_options.json"))
    assert set(options) == {"user.tiny-llama-q4_k_m", "user.gemma-4-26b-a4b",
                            "user.qwen3.6-27b"}
    assert "--spec-type ngram-mod" in options["user.tiny-llama-q4_k_m"]["llamacpp_args"]
    settings = json.loads(written(data, f"{folder}/config.json"))
    # 24 GiB: the two largest (about 18 and 20 GiB) do not fit together, so one at a time
    assert settings["max_loaded_models"] == 1
    # each file written once
    paths = [a["path"] for a in lemonade["actions"] if "path" in a]
    assert len(paths) == len(set(paths))


@pytest.fixture
def applied(box) -> tuple[Path, list[str]]:
    """Two of the owner's GGUFs on the machine, set up together and applied (nothing to
    download, nothing started)."""
    for name, layers in (("one-Q4_K_M.gguf", 4), ("two-Q8_0.gguf", 2)):
        attention_model(box / "srv/models" / name, block_count=layers)
    result = ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu", "--model",
                  "/srv/models/one-Q4_K_M.gguf", "--model", "/srv/models/two-Q8_0.gguf",
                  "--port", free_port(), "--apply", "--yes")
    assert result.exit_code == 0, result.output
    return box, ["one-q4_k_m-ngram", "two-q8_0-ngram"]


def test_the_apply_says_how_to_start_the_router_and_check_each_route(applied):
    root, names = applied
    state = json.loads((root / "var/lib/ojai/state.json").read_text())
    routes = {k: v for k, v in state["records"]["routes"].items() if isinstance(v, dict)}
    assert set(routes) == set(names)
    for name in names:
        r = routes[name]
        assert r["router"] and r["script"] == "/opt/ojai/routes/router.sh"
        assert r["port"] == routes[names[0]]["port"]  # one port
        assert r["plain_args"] and "--spec-type" in r["args"]
    assert (root / "opt/ojai/routes/router.ini").is_file()
    # nothing answers: verify names each route and the script that starts them
    result = ojai("verify", "--root", root, "--timeout", "0", "--no-gate")
    assert result.exit_code == 1
    for name in names:
        assert f"FAIL {name} (http://127.0.0.1:{routes[name]['port']})" in result.output
    assert "/opt/ojai/routes/router.sh" in result.output


def test_tune_refuses_a_route_of_the_router_with_the_way_to_tune_it(applied):
    root, names = applied
    result = ojai("tune", names[0], "--root", root)
    assert result.exit_code != 0
    assert "served by the router beside other routes" in result.output
    assert "--model one-q4_k_m" in result.output


def test_with_systemd_the_router_has_one_unit(box, own):
    store_capture(box, CommandResult(("systemctl", "daemon-reload"), 0, ""))
    data, _ = plan(box, "--model", own, "--model", "gemma-4-26b-a4b", "--systemd")
    routes = step(data, "routes")
    assert routes["status"] == "change", routes
    unit = written(data, "/etc/systemd/system/ojai-router.service")
    assert "ExecStart=/opt/ojai/routes/router.sh" in unit and "User=ojai" in unit
    paths = sorted(a["path"] for a in routes["actions"])
    assert paths == ["/etc/systemd/system/ojai-router.service", "/opt/ojai/routes/router.ini",
                     "/opt/ojai/routes/router.sh"]


def test_an_sglang_route_is_served_alone(box):
    result = ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu",
                  "--model", "gpt-oss-20b", "--model", "deepseek-v3-nextn")
    assert result.exit_code == 64, result.output
    assert "an SGLang route is served alone" in result.output
