"""An embedding model registered with Lemonade: the label ``embeddings`` (with which Lemonade
starts its llama-server with ``--embeddings``), no ``mtp`` label and no ``--spec-type``."""

from __future__ import annotations

import json

from support import stand_ins
from typer.testing import CliRunner

from ojai_setup.cli import app


def test_lemonade_registers_the_embedding_model_with_its_label(machine):
    box = machine("ojai-fresh")
    stand_ins.give_lemonade(box, ("systemctl restart lemond",))
    result = CliRunner().invoke(app, ["setup", "--root", str(box), "--llamacpp", "none",
                                      "--no-npu", "--model", "nomic-embed-text-v1",
                                      "--lemonade-downloads", "--json"])
    plan = json.loads(result.stdout)
    step = next(s for s in plan["steps"] if s["step"] == "lemonade")
    assert step["status"] == "change", step
    assert "register user.nomic-embed-text-v1 (label embeddings)" in step["sentence"]
    files = {a["path"].rsplit("/", 1)[-1]: json.loads(a["after"]) for a in step["actions"]
             if a.get("path", "").endswith(".json")}
    entry = files["user_models.json"]["nomic-embed-text-v1"]
    assert "embeddings" in entry["labels"] and "mtp" not in entry["labels"]
    assert entry["checkpoints"] == {"main": "nomic-ai/nomic-embed-text-v1-GGUF:Q4_K_S"}
    options = files["recipe_options.json"]["user.nomic-embed-text-v1"]
    assert "--spec-type" not in options.get("llamacpp_args", "")
    assert options["ctx_size"] == 2048
