"""The routes step: launch scripts in the installed binary's dialect and environment; doctor's
pairing check of the routes it recorded."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from support.fake_hub import announce_catalog, fake_hub  # noqa: F401 - fake_hub is a fixture
from support.gguf_files import gemma4_assistant, gemma4_main
from support.machine_state import record_state, store_capture
from support.stand_ins import give_llama_server
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.root import CommandResult, Root

CATALOG = """
[routes.tiny]
title = "Tiny test route"
repo = "ojai-test/tiny-GGUF"
main = [{ file = "main.gguf", size = 1000 }]
draft = { file = "mtp-main.gguf", size = 100 }
mtp = "sidecar"
lemonade_checkpoint = "ojai-test/tiny-GGUF:main.gguf"
lemonade_draft_checkpoint = "ojai-test/tiny-GGUF:mtp-main.gguf"
context_size = 4096
max_context = 8192
[routes.tiny.kv]
full_layers = 1
full_kv_heads = 1
full_head_dim = 64
"""


@pytest.fixture(autouse=True)
def hub(fake_hub, tmp_path):
    """A hub that serves every catalog route's files (the tiny one's too): the routes wait for
    the model step, which asks the hub whether it serves them."""
    tiny = tmp_path / "hub-catalog.toml"
    tiny.write_text(CATALOG)
    announce_catalog(fake_hub, tiny)
    return fake_hub


def mtp_script(root: Path, tmp_path: Path) -> str:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(CATALOG)
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none", "--json",
                                      "--model", "tiny", "--catalog", str(catalog)])
    plan = json.loads(result.stdout)
    step = next(s for s in plan["steps"] if s["step"] == "routes")
    assert step["status"] == "change", step
    return next(a["after"] for a in step["actions"] if a["path"].endswith("tiny-mtp.sh"))


@pytest.mark.parametrize("family, override", [("gfx1150", None), ("gfx110X", "11.5.0")])
def test_override_only_when_the_binary_lacks_the_gpu_target(machine, tmp_path, family, override):
    root = machine("ojai-fresh")  # a gfx1150 box
    give_llama_server(root, family)
    script = mtp_script(root, tmp_path)
    assert "--spec-type draft-mtp" in " ".join(script.replace("\\\n", " ").split())
    if override is None:
        assert "HSA_OVERRIDE_GFX_VERSION" not in script
    else:
        assert f"export HSA_OVERRIDE_GFX_VERSION={override}" in script


def test_doctor_reports_a_mismatched_pair(machine, tmp_path):
    root = machine("ojai-fresh")
    models = root / "var/lib/ojai/models/ojai-test/tiny-GGUF"
    models.mkdir(parents=True)
    main = gemma4_main(models / "main.gguf")
    draft = gemma4_assistant(models / "mtp-main.gguf", tokens=["<pad>", "<s>", "other", "words"])
    machine_path = "/var/lib/ojai/models/ojai-test/tiny-GGUF/"
    record_state(Root(root), "routes", {"tiny-mtp": {
        "port": 8080, "model": "tiny", "main": machine_path + main.name,
        "draft": machine_path + draft.name, "mtp": "sidecar"}})
    report = json.loads(CliRunner().invoke(app, ["doctor", "--json", "--root", str(root)]).stdout)
    finding = next(f for f in report["findings"] if f["id"] == "models.pairs")
    assert finding["severity"] == "fail"
    assert "token" in finding["evidence"]
    assert report["facts"]["models"][0]["ok"] is False


def test_doctor_keeps_model_metadata_in_the_state_folder_and_says_when_it_cannot(machine):
    """The metadata doctor reads from a route's files is kept in ojai's state folder (nothing is
    written beside the models), and a state folder that cannot take it is said, not passed over."""
    root = machine("ojai-fresh")
    models = root / "var/lib/ojai/models/ojai-test/tiny-GGUF"
    models.mkdir(parents=True)
    main, draft = gemma4_main(models / "main.gguf"), gemma4_assistant(models / "mtp-main.gguf")
    machine_path = "/var/lib/ojai/models/ojai-test/tiny-GGUF/"
    record_state(Root(root), "routes", {"tiny-mtp": {
        "port": 8080, "model": "tiny", "main": machine_path + main.name,
        "draft": machine_path + draft.name, "mtp": "sidecar"}})

    def doctor() -> dict:
        return json.loads(CliRunner().invoke(app, ["doctor", "--json", "--root", str(root)]).stdout)

    pair = doctor()["facts"]["models"][0]
    assert pair["ok"] is True and pair["note"] is None
    assert sorted(p.name for p in models.iterdir()) == ["main.gguf", "mtp-main.gguf"]
    assert len(list((root / "var/lib/ojai/gguf").glob("*.json"))) == 2
    shutil.rmtree(root / "var/lib/ojai/gguf")
    (root / "var/lib/ojai/gguf").write_text("")  # no folder can be made there
    pair = doctor()["facts"]["models"][0]
    assert pair["ok"] is True
    assert pair["note"].count("cannot keep the model's metadata in ") == 2, pair["note"]
    text = CliRunner().invoke(app, ["doctor", "--root", str(root)], env={"COLUMNS": "300"}).stdout
    assert re.search(r"route tiny +│ matched pair \(cannot keep the model's metadata", text), text


def test_systemd_units_for_both_routes(machine, tmp_path):
    root = machine("ojai-fresh")
    give_llama_server(root, "gfx1150")
    # a machine with systemd (without it the step is blocked: see test_failed_apply.py)
    store_capture(root, CommandResult(("systemctl", "daemon-reload"), 0, ""))
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(CATALOG)
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none", "--json",
                                      "--model", "tiny", "--catalog", str(catalog), "--systemd"])
    plan = json.loads(result.stdout)
    step = next(s for s in plan["steps"] if s["step"] == "routes")
    units = {a["path"]: a["after"] for a in step["actions"] if a["path"].endswith(".service")}
    assert set(units) == {"/etc/systemd/system/ojai-tiny-mtp.service",
                          "/etc/systemd/system/ojai-tiny.service"}
    assert "ExecStart=/opt/ojai/routes/tiny-mtp.sh" in units["/etc/systemd/system/ojai-tiny-mtp.service"]
    assert plan["handlers"]["systemd"]["argv"] == ["systemctl", "daemon-reload"]


def _routes_step(root: Path, model: str, *extra: str) -> dict:
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none", "--json",
                                      "--model", model, *extra])
    plan = json.loads(result.stdout)
    return next(s for s in plan["steps"] if s["step"] == "routes")


def _args(script: str) -> str:
    return " ".join(script.replace("\\\n", " ").split())


@pytest.mark.parametrize("model, drafted, words, args", [
    ("gemma-3-270m", "gemma-3-270m-ngram", "n-gram (ngram-simple), 1 slot",
     "--spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 8"),
    ("gemma-3-270m-self", "gemma-3-270m-self-draft", "self-draft, 1 slot",
     "--spec-type draft-simple --spec-draft-n-max 4 --spec-draft-ngl all"),
])
def test_gemma3_270m_routes_are_named_and_worded_by_their_kind(machine, model, drafted, words, args):
    root = machine("ojai-fresh")
    give_llama_server(root, "gfx1150")
    step = _routes_step(root, model)
    assert step["status"] == "change", step
    assert f"write launch scripts for {drafted} ({words}" in step["sentence"]
    assert "MTP" not in step["sentence"]
    scripts = {a["path"]: a["after"] for a in step["actions"]}
    assert set(scripts) == {f"/opt/ojai/routes/{drafted}.sh", f"/opt/ojai/routes/{model}.sh"}
    assert args in _args(scripts[f"/opt/ojai/routes/{drafted}.sh"])
    plain = _args(scripts[f"/opt/ojai/routes/{model}.sh"])
    assert plain.endswith("--spec-type none") and "ngram" not in plain and "draft" not in plain
    record = step["records"]["routes"][drafted]
    assert record["pairing"] == ("ngram" if model == "gemma-3-270m" else "draft_model")
    assert record["spec_type"] in args
    if model == "gemma-3-270m":
        assert record["draft_n_max"] is None and record["ngram"] == {"size-n": 3, "size-m": 8}


def test_a_chained_route_from_the_user_catalog(machine, tmp_path):
    root = machine("ojai-fresh")
    give_llama_server(root, "gfx1150")
    catalog = tmp_path / "catalog.toml"
    catalog.write_text('[routes."qwen3.6-27b"]\nspec_type = "draft-mtp,ngram-mod"\n'
                       '[routes."qwen3.6-27b".ngram]\nn_max = 64\n')
    step = _routes_step(root, "qwen3.6-27b", "--catalog", str(catalog))
    assert step["status"] == "change", step
    assert "qwen3.6-27b-mtp (MTP in-file + n-gram (ngram-mod), 1 slot" in step["sentence"]
    script = next(a["after"] for a in step["actions"] if a["path"].endswith("qwen3.6-27b-mtp.sh"))
    assert ("--spec-type draft-mtp,ngram-mod --spec-draft-n-max 2 --spec-ngram-mod-n-max 64"
            in _args(script))


def test_doctor_says_the_pairing_of_a_self_draft_and_of_ngram_drafting(machine):
    root = machine("ojai-fresh")
    folder = "/var/lib/ojai/models/ojai-test/tiny-GGUF/"
    main = gemma4_main(root / folder.lstrip("/") / "main.gguf")
    record_state(Root(root), "routes", {
        "tiny-ngram": {"port": 8080, "model": "tiny", "main": folder + main.name,
                       "draft": None, "mtp": None, "pairing": "ngram"},
        "self-draft": {"port": 8082, "model": "self", "main": folder + main.name,
                       "draft": folder + main.name, "mtp": None, "pairing": "draft_model"}})
    report = json.loads(CliRunner().invoke(app, ["doctor", "--json", "--root", str(root)]).stdout)
    finding = next(f for f in report["findings"] if f["id"] == "models.pairs")
    assert finding["severity"] == "pass", finding
    assert "tiny (n-gram drafting): pairing not applicable" in finding["evidence"]
    assert "self (drafts for itself) matched" in finding["evidence"]


def test_a_plain_catalog_model_gets_ngram_mod_and_a_plain_route(machine, tmp_path):
    root = machine("ojai-fresh")
    give_llama_server(root, "gfx1150")
    catalog = tmp_path / "catalog.toml"
    plain = CATALOG.replace('draft = { file = "mtp-main.gguf", size = 100 }\nmtp = "sidecar"\n', "")
    catalog.write_text(plain.replace('lemonade_draft_checkpoint = "ojai-test/tiny-GGUF:mtp-main.gguf"\n', ""))
    step = _routes_step(root, "tiny", "--catalog", str(catalog))
    assert step["status"] == "change", step
    assert "write launch scripts for tiny-ngram (n-gram (ngram-mod), 1 slot" in step["sentence"]
    assert "n-gram knobs: the binary's defaults" in step["sentence"]
    scripts = {a["path"]: _args(a["after"]) for a in step["actions"]}
    assert set(scripts) == {"/opt/ojai/routes/tiny-ngram.sh", "/opt/ojai/routes/tiny.sh"}
    assert "--spec-type ngram-mod" in scripts["/opt/ojai/routes/tiny-ngram.sh"]
    assert "--spec-draft" not in scripts["/opt/ojai/routes/tiny-ngram.sh"]
    assert scripts["/opt/ojai/routes/tiny.sh"].endswith("--spec-type none")
    record = step["records"]["routes"]["tiny-ngram"]
    assert (record["pairing"], record["draft"], record["spec_type"]) == ("ngram", None, "ngram-mod")


def test_a_vulkan_build_gets_no_hsa_override_and_no_library_path(machine, tmp_path):
    """Upstream's Vulkan build on a box whose GPU (gfx1150) no ROCm family covers here: no HSA
    override (it does not run on ROCm) and no LD_LIBRARY_PATH (it finds its libraries and
    backends beside itself through RPATH $ORIGIN), although libraries sit next to it."""
    root = machine("ojai-fresh")
    server = give_llama_server(root, "vulkan")
    (server.parent / "libggml-vulkan.so").write_bytes(b"\x7fELF")
    script = mtp_script(root, tmp_path)
    assert "HSA_OVERRIDE_GFX_VERSION" not in script and "LD_LIBRARY_PATH" not in script
    # the same folder recorded as a ROCm build for another family gets both
    record = server.parent / "ojai-install.json"
    record.write_text(json.dumps({"tag": "b1311", "family": "gfx110X"}))
    script = mtp_script(root, tmp_path)
    assert "export HSA_OVERRIDE_GFX_VERSION=11.5.0" in script and "LD_LIBRARY_PATH" in script
