"""The real Lemonade (Debian unstable's lemonade-server, ``lemond``) runs what ojai set up.

A copy of the OJAI box gets Lemonade as its system service, ojai's own llama-server (the real
CPU build the tests cache) behind ``/opt/ojai/llama.cpp/current``, and a tiny real Gemma 4 main
model + MTP head pair on the stand-in hub. ``ojai setup --apply`` downloads the pair and writes
Lemonade's ``config.json``, ``user_models.json`` and ``recipe_options.json``; then the real
``lemond`` is started on those files (:mod:`support.lemond`) and asked for a completion.

The old behaviour is reproduced with the command ojai used to run (``lemonade config set
llamacpp.<backend>_bin=<folder>``) against the same running server.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support import stand_ins
from support.fake_hub import fake_hub  # noqa: F401 - a fixture
from support.tiny_route import REPO, ROUTE, catalog  # noqa: F401 - catalog is a fixture
from support.lemond import Lemond, lemond, lemond_version
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.sid import ensure_sid_chroot, run_in_chroot
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.domain.checks import KINDS
from ojai_setup.facts.lemonade import health
from ojai_setup.formats.lemonade import parse_lemonade_version
from ojai_setup.model.facts import Facts

pytestmark = pytest.mark.slow

MODELS = f"/var/lib/ojai/models/{REPO}"
PROMPT = "the of and to in is that it for on was with as at by be this"
COMMANDS = ("systemctl restart lemond",)


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def version() -> str:
    """``lemond --version`` of the packaged Lemonade (``lemond version 2026.39.1-2``)."""
    return lemond_version()


@pytest.fixture(scope="module")
def cli_version() -> str:
    return run_in_chroot(ensure_sid_chroot(), ["lemonade", "--version"]).stdout


@pytest.fixture
def box(machine, version: str, cli_version: str, llama_server_bin: Path) -> Path:
    """The OJAI box with the packaged Lemonade (its real version lines) as its service."""
    root = machine("ojai-fresh")
    stand_ins.give_lemonade(root, COMMANDS, versions={"lemonade --version": cli_version,
                                                      "lemond --version": version})
    stand_ins.give_built_llama_server(root, llama_server_bin)
    return root


def apply(root: Path, catalog: Path, *extra: object):
    result = ojai("setup", "--root", root, "--llamacpp", "none", "--no-npu", "--catalog",
                  catalog, "--model", ROUTE, "--apply", "--yes", *extra)
    assert result.exit_code == 0, result.output
    return result


def model_id(server: Lemond, version: str) -> str:
    status, models = server.request("GET", "/api/v1/models")
    assert status == 200, models
    ids = [m["id"] for m in models["data"]]
    parsed = parse_lemonade_version(version)
    assert parsed is not None
    # 11.x lists a user model as user.NAME, the calendar versions (2026.39.1) as the bare NAME
    wanted = ("" if parsed.calendar else "user.") + ROUTE
    assert wanted in ids, ids
    return wanted


def complete(server: Lemond, model: str) -> tuple[int, dict | str]:
    return server.request("POST", "/api/v1/completions", {
        "model": model, "prompt": PROMPT, "max_tokens": 24, "temperature": 0.0})


def test_lemond_loads_ojais_files_with_ojais_llama_server_and_drafts(box, catalog, version,
                                                                       tmp_path):
    apply(box, catalog)
    config = json.loads((box / "var/lib/lemonade/config.json").read_text())
    assert config["llamacpp"]["cpu_bin"] == "/opt/ojai/llama.cpp/current/llama-server"
    with lemond(box, tmp_path / "lemond") as server:
        model = model_id(server, version)
        status, answer = complete(server, model)
        assert status == 200, f"{answer}\n{server.log()[-3000:]}"
        timings = answer["timings"]
        assert timings["draft_n"] > 0 and timings["draft_n_accepted"] > 0, timings
        # llama-server prints its draft statistics after the answer is sent, and lemond copies
        # its output into the log as it comes: wait for that line before reading the log
        deadline = time.monotonic() + 30
        while "draft acceptance = " not in server.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        log = server.log()
        # Lemonade started ojai's binary on ojai's files, the MTP head as the draft model
        assert "backend at /opt/ojai/llama.cpp/current/llama-server" in log
        assert f"loading model '{MODELS}/tiny-gemma4.gguf'" in log
        assert f"loading draft model '{MODELS}/mtp-tiny-gemma4.gguf'" in log
        assert "draft acceptance = " in log
    # ojai's next plan has nothing to do although lemond rewrote config.json (config_version)
    plan = ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu", "--catalog", catalog,
                "--model", ROUTE, "--json")
    step = next(s for s in json.loads(plan.stdout)["steps"] if s["step"] == "lemonade")
    assert step["status"] == "satisfied", step
    # one copy: nothing went into Lemonade's Hugging Face cache
    assert not [p for p in server.hf_home.rglob("*") if p.is_file()]


def test_old_folder_value_fails_every_load(box, catalog, version, tmp_path):
    """What ojai ran before: ``lemonade config set llamacpp.<backend>_bin=<folder>``."""
    apply(box, catalog)
    with lemond(box, tmp_path / "lemond") as server:
        model = model_id(server, version)
        folder = "/opt/ojai/llama.cpp/current"
        res = run_in_chroot(ensure_sid_chroot(), ["lemonade", "--port", str(server.port),
                                                  "config", "set", f"llamacpp.cpu_bin={folder}"])
        assert res.returncode == 0  # Lemonade accepts the folder: it only checks that it exists
        status, answer = complete(server, model)
        assert status != 200
        assert folder in json.dumps(answer) or f"Failed to execute: {folder}" in server.log()
    # doctor catches what lemonade config set wrote
    doctor = ojai("doctor", "--root", box, "--json")
    finding = next(f for f in json.loads(doctor.stdout)["findings"] if f["id"] == "lemonade.bins")
    assert finding["severity"] == "fail"
    assert "is a folder" in finding["evidence"]
    assert f"llamacpp.cpu_bin={folder}/llama-server" in finding["fix"]
    # and ojai's setup puts the executable back
    apply(box, catalog)
    config = json.loads((box / "var/lib/lemonade/config.json").read_text())
    assert config["llamacpp"]["cpu_bin"] == f"{folder}/llama-server"


def test_old_hub_checkpoints_make_lemonade_download_a_second_copy(box, catalog, version,
                                                                   tmp_path):
    """Hub checkpoints (``org/repo:FILE``, what ojai wrote before; now only with
    --lemonade-downloads) make Lemonade fetch its own copy of the pair from the hub into its
    Hugging Face cache although ojai's copy is on disk. (Lemonade fetches over HTTPS only, so
    the plain-HTTP stand-in hub cannot serve it: the fetch it starts is the evidence.)"""
    apply(box, catalog)  # ojai's copy is on disk
    assert len(list((box / MODELS.lstrip("/")).glob("*.gguf"))) == 2
    apply(box, catalog, "--lemonade-downloads")
    models = json.loads((box / "var/lib/lemonade/user_models.json").read_text())
    assert models[ROUTE]["checkpoints"]["main"] == f"{REPO}:tiny-gemma4.gguf"
    with lemond(box, tmp_path / "lemond") as server:
        status, listed = server.request("GET", "/api/v1/models")
        assert ROUTE not in [m["id"] for m in listed["data"]]  # not "downloaded" for Lemonade
        status, _ = complete(server, ROUTE)
        log = server.log()
        assert "Model not cached, downloading from Hugging Face" in log
        assert f"Fetching repository file list from Hugging Face: {REPO}" in log
        assert f"loading model '{MODELS}/tiny-gemma4.gguf'" not in log
        assert status != 200


def test_unreadable_model_fails_for_the_service_user(box, catalog, version, tmp_path):
    """The plan refuses files the lemond user cannot read; lemond itself confirms why."""
    apply(box, catalog)
    draft = box / MODELS.lstrip("/") / "mtp-tiny-gemma4.gguf"
    draft.chmod(0o600)
    plan = ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu", "--catalog", catalog,
                "--model", ROUTE, "--json")
    step = next(s for s in json.loads(plan.stdout)["steps"] if s["step"] == "lemonade")
    assert step["status"] == "blocked" and "chmod o+r" in step["sentence"]
    with lemond(box, tmp_path / "lemond") as server:
        status, listed = server.request("GET", "/api/v1/models")
        assert ROUTE not in [m["id"] for m in listed["data"]]  # lemond cannot see the file
        status, _ = complete(server, ROUTE)
        assert status != 200


def test_verify_checks_the_route_through_lemonade(box, catalog, version, tmp_path):
    apply(box, catalog)
    with lemond(box, tmp_path / "lemond") as server:
        config_path = box / "var/lib/lemonade/config.json"
        config = json.loads(config_path.read_text())
        config["port"] = server.port  # the user's own port setting, which verify follows
        config_path.write_text(json.dumps(config, indent=2))
        result = ojai("verify", "--root", box, "--json", "--route", f"lemonade {ROUTE}",
                      "--tokens", "24")
        assert result.exit_code == 0, result.output + server.log()[-3000:]
        [check] = json.loads(result.stdout)["routes"]
        assert check["healthy"] and check["error"] is None
        assert check["url"] == f"http://127.0.0.1:{server.port}"
        assert check["model_id"] == model_id(server, version)
        assert check["draft_n"] > 0 and check["draft_n_accepted"] > 0


def test_doctor_reports_the_real_version(box, version):
    doctor = json.loads(ojai("doctor", "--root", box, "--json").stdout)
    assert doctor["facts"]["tools"]["lemond"]["version"] == version.strip()
    finding = next(f for f in doctor["findings"] if f["id"] == "lemonade.version")
    assert "2026.39.1" in finding["evidence"] and "calendar" in finding["evidence"]


def test_doctor_reports_version_port_and_health_of_the_real_lemond(box, catalog, version,
                                                                     tmp_path):
    """Doctor's Lemonade finding on a running lemond: its version line, the port of its config
    and ``/api/v1/health``, probed the way doctor probes it on a machine (under ``--root`` the
    machine folder's network is not the host's, so doctor says "not checked" there; the probe
    itself is run here against the real server)."""
    apply(box, catalog)
    with lemond(box, tmp_path / "lemond") as server:
        config_path = box / "var/lib/lemonade/config.json"
        config = json.loads(config_path.read_text())
        config["port"] = server.port
        config_path.write_text(json.dumps(config, indent=2))
        report = json.loads(ojai("doctor", "--root", box, "--json").stdout)
        tools = report["facts"]["tools"]
        detail = (tools.get("lemonade") or tools["lemond"])["detail"]
        assert detail["port"] == server.port and detail["health"] == "not checked (--root)"
        detail["health"] = health(server.port)
        facts = Facts.model_validate(report["facts"])
        out = KINDS["lemonade_server"](facts, None, {})
        assert out.ok is True, out
        line = ".".join(version.split()[-1].split(".")[:2])
        assert out.evidence.startswith(f"{version.strip()} (calendar version, line {line}); port "
                                       f"{server.port}; system-service reading /var/lib/lemonade;"
                                       " health: ok"), out.evidence
    # and once lemond is gone
    detail["health"] = health(server.port)
    out = KINDS["lemonade_server"](Facts.model_validate(report["facts"]), None, {})
    assert out.ok is False and "health: no answer" in out.evidence


def test_lemond_serves_a_set_of_routes_from_ojais_files(box, catalog, version, tmp_path,
                                                         fake_hub):
    """``--model A --model B``: both routes registered (the catalog's MTP pair and an owner's
    own GGUF from the Hub, drafting with n-grams) and ``max_loaded_models`` set to what fits;
    the real lemond lists both, answers each by name and keeps both loaded."""
    from support.tiny_models import tiny_vocab, write_llama_model

    own = write_llama_model(tmp_path / "published" / "tiny-llama.gguf", 64, 2, 7, tiny_vocab())
    fake_hub.add_path("ojai-test/tiny-llama-GGUF", own.name, own)
    apply(box, catalog, "--model", f"hf:ojai-test/tiny-llama-GGUF:{own.name}")
    config = json.loads((box / "var/lib/lemonade/config.json").read_text())
    assert config["max_loaded_models"] == 2
    with lemond(box, tmp_path / "lemond") as server:
        status, listed = server.request("GET", "/api/v1/models")
        assert status == 200, listed
        ids = [m["id"] for m in listed["data"]]
        prefix = "" if parse_lemonade_version(version).calendar else "user."
        names = [prefix + ROUTE, prefix + "tiny-llama"]
        assert set(names) <= set(ids), ids
        for name in names:
            status, answer = complete(server, name)
            assert status == 200, f"{answer}\n{server.log()[-3000:]}"
            assert answer["choices"][0]["text"]
        status, health_now = server.request("GET", "/api/v1/health")
        assert health_now["max_models"]["llm"] == 2, health_now
        loaded = {m["model_name"] for m in health_now["all_models_loaded"]}
        assert loaded == set(names), health_now
