"""Several routes behind one port, for real: ``ojai setup --model A --model B --apply`` writes the
models preset and the launch script of llama-server's router mode, and the real build 11434
(the CPU build the tests cache) serves both from them: the real Gemma 3 270M and a tiny
``llama`` GGUF generated with the ``gguf`` package, each answering under its own route name,
the second loaded on demand when ``--models-max 1`` keeps one loaded at a time; then
``ojai verify`` checks each by name through the request's ``model`` field.

The Gemma file is the owner's own GGUF (``--model /path/file.gguf``, used where it is), its
machine path made the same as its path here (the machine folder holds a link at that path); the
tiny one comes from the Hub stand-in on 127.0.0.1 (``hf:ORG/REPO:FILE.gguf``) or is used where
it is. The router is started with the launch script's own arguments, the machine's /opt/ojai
and models folders found under the machine folder (:func:`runnable_here`), plus ``--threads``
for this shared processor.
"""

from __future__ import annotations

import json
import shlex
import time
import urllib.request
from pathlib import Path

import pytest
from support.fake_hub import fake_hub  # noqa: F401 - a fixture
from support.gemma import gemma_model  # noqa: F401 - a fixture
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.server import THREADS, free_port, serve
from support.stand_ins import give_built_llama_server
from support.tiny_models import tiny_vocab, write_llama_model
from typer.testing import CliRunner

from ojai_setup.cli import app

pytestmark = pytest.mark.slow

REPO = "ojai-test/tiny-llama-GGUF"


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def box(machine, tmp_path, gemma_model: Path, llama_server_bin: Path):
    """The OJAI box with the real llama-server as ojai's own, and two GGUF files whose
    machine paths are their paths here."""
    root = machine("ojai-fresh")
    give_built_llama_server(root, llama_server_bin)
    models = tmp_path / "models"
    models.mkdir()
    gemma = models / "gemma-3-270m-q4_k_m.gguf"
    gemma.symlink_to(gemma_model)
    tiny = write_llama_model(models / "tiny-llama.gguf", 64, 2, 7, tiny_vocab())
    inside = root / str(models).lstrip("/")
    inside.parent.mkdir(parents=True, exist_ok=True)
    inside.symlink_to(models)
    return root, gemma, tiny


def apply(root: Path, *models: Path, extra: tuple = ()) -> dict:
    port = free_port()
    args = ["setup", "--root", root, "--llamacpp", "none", "--no-npu", "--port", port,
            "--apply", "--yes"]
    for m in models:
        args += ["--model", m]
    result = ojai(*args, *extra)
    assert result.exit_code == 0, result.output
    state = json.loads((root / "var/lib/ojai/state.json").read_text())
    return {k: v for k, v in state["records"]["routes"].items()
            if isinstance(v, dict) and "port" in v}


def runnable_here(root: Path) -> None:
    """The router's launch script and preset with the machine's /opt/ojai and models paths
    moved under the machine folder, so that the router (and ``ojai bench``) run on this host."""
    script = root / "opt/ojai/routes/router.sh"
    script.write_text(script.read_text().replace("/opt/ojai/", f"{root}/opt/ojai/"))
    preset = root / "opt/ojai/routes/router.ini"
    preset.write_text(preset.read_text().replace("= /var/lib/ojai/models/",
                                                 f"= {root}/var/lib/ojai/models/"))

def router_command(root: Path) -> list[str]:
    """The launch script's exec line, its binary and preset under the machine folder."""
    script = (root / "opt/ojai/routes/router.sh").read_text().replace("\\\n", " ")
    line = next(x for x in script.splitlines() if x.startswith("exec "))
    words = shlex.split(line)[1:]
    words = [str(root / w.lstrip("/")) if w.startswith("/opt/ojai/") else w for w in words]
    return [*words, "--threads", str(THREADS)]


def request(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {"error": exc.read().decode("utf-8", "replace")}


def statuses(port: int) -> dict[str, str]:
    status, listed = request(port, "GET", "/models")
    assert status == 200, listed
    return {m["id"]: m["status"]["value"] for m in listed["data"]}


def wait_status(port: int, name: str, wanted: str, timeout: float = 120) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        now = statuses(port)
        if now.get(name) == wanted or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def test_two_models_answer_by_name_the_second_loaded_on_demand(box, tmp_path, fake_hub):
    """The tiny model comes from the Hub stand-in (``hf:ORG/REPO:FILE.gguf``, downloaded by
    the apply and checked), the Gemma file is used where it is."""
    root, gemma, tiny = box
    fake_hub.add_path(REPO, tiny.name, tiny)
    routes = apply(root, gemma, f"hf:{REPO}:{tiny.name}", extra=("--models-max", "1"))
    names = list(routes)
    assert len(names) == 2 and all(r["router"] for r in routes.values())
    first, second = names
    preset = (root / "opt/ojai/routes/router.ini").read_text()
    assert f"[{first}]" in preset and f"[{second}]" in preset
    assert f"model = {gemma}" in preset
    assert f"model = /var/lib/ojai/models/{REPO}/{tiny.name}" in preset
    assert (root / f"var/lib/ojai/models/{REPO}/{tiny.name}").read_bytes() == tiny.read_bytes()
    port = routes[first]["port"]
    runnable_here(root)
    assert routes[second]["port"] == port  # one address for both
    with serve(router_command(root), port, tmp_path / "router.log") as server:
        # loaded at start: the first; the second waits for its first request
        now = wait_status(port, first, "loaded")
        assert now[first] == "loaded" and now[second] == "unloaded", now
        for name in (first, second):
            status, answer = request(port, "POST", "/v1/completions", {
                "model": name, "prompt": "Monday, Tuesday,", "max_tokens": 8,
                "temperature": 0.0})
            assert status == 200, f"{answer}\n{server.log_path.read_text()[-3000:]}"
            assert answer["model"] == name  # each answers under its own name
            assert answer["choices"][0]["text"]
        # one at a time (--models-max 1): asking for the second unloaded the first
        now = wait_status(port, first, "unloaded")
        assert now == {**now, first: "unloaded", second: "loaded"}, now
        # ojai verify checks each by name through the model field
        result = ojai("verify", "--root", root, "--json", "--tokens", "8", "--timeout", "120")
        assert result.exit_code == 0, result.output + server.log_path.read_text()[-3000:]
        checks = {c["route"]: c for c in json.loads(result.stdout)["routes"]}
        assert set(checks) == {first, second}
        for c in checks.values():
            assert c["healthy"] and c["error"] is None and c["predicted_n"] == 8, c
            assert c["url"] == f"http://127.0.0.1:{port}"


def test_routes_that_fit_together_all_load_at_start(box, tmp_path):
    root, gemma, tiny = box
    routes = apply(root, tiny, gemma)
    preset = (root / "opt/ojai/routes/router.ini").read_text()
    assert preset.count("load-on-startup = true") == 2
    assert "--models-max 2" in (root / "opt/ojai/routes/router.sh").read_text()
    port = next(iter(routes.values()))["port"]
    with serve(router_command(root), port, tmp_path / "router.log"):
        for name in routes:
            assert wait_status(port, name, "loaded")[name] == "loaded"


def test_bench_compares_a_router_route_with_the_same_model_undrafted(box, tmp_path):
    from support.gemma_machine import PROMPTS

    root, gemma, tiny = box
    routes = apply(root, gemma, tiny)
    name = next(n for n in routes if n.startswith("gemma"))
    port = routes[name]["port"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in PROMPTS))
    runnable_here(root)
    with serve(router_command(root), port, tmp_path / "router.log"):
        result = ojai("bench", "--root", root, "--route", name, "--prompts", prompts,
                      "--seeds", "1", "--tokens", "32", "--long-tokens", "0",
                      "--concurrency", "", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    drafted, plain = data["servers"]
    # the route through the router, by its name; the plain arm started by bench beside it
    assert drafted["route"] == name and drafted["url"] == f"http://127.0.0.1:{port}"
    assert drafted["spec_type"] == "ngram-mod" and plain["spec_type"] in ("none", None)
    assert plain["started_by_bench"] and plain["url"] != drafted["url"]
    assert [m["path"] for m in drafted["models"]] == [str(gemma)]
    assert data["pairs"] and all(p["identical"] is True for p in data["pairs"])
    assert any(p["mtp"]["draft_n"] for p in data["pairs"])  # it drafted, through the router
