"""From a fresh OJAI box to serving routes: one `ojai setup --apply` puts every file of both
paths in place (GPU limit, llama.cpp nightly, the model pair, launch scripts, Lemonade config,
the FastFlowLM script), a second changes nothing, and the rendered MTP launch script serves
with the real llama-server.

The internet is stood in for: GitHub's release API by tests/support/fake_github.py serving a
nightly-layout zip made from the real CPU llama-server build, the Hugging Face Hub by
tests/support/fake_hub.py serving a tiny Gemma 4 main model and its gemma4-assistant MTP head.
The launch scripts are run unchanged, in a private mount namespace where /opt and /var/lib are
the test machine's own, so their machine paths resolve into the test root and the host is not
touched.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.llamacpp.nightly import asset_name
from ojai_setup.root import COMMANDS_DIR, command_key
from support.fake_github import FakeGitHub, fake_github, make_zip, nightly_entries_from_build  # noqa: F401
from support.fake_hub import FakeHub, fake_hub  # noqa: F401
from support.llama import llama_server_bin  # noqa: F401
from support.server import free_port, serve
from support.tiny_models import write_mtp_pair

pytestmark = pytest.mark.slow

REPO = "ojai-test/tiny-gemma4-GGUF"
ROUTE = "tiny-gemma"


def ojai(*args: object):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result


def in_machine(root: Path, script: str) -> list[str]:
    """Run a launch script as written, with /opt and /var/lib of the machine root mounted over
    the host's in a private mount namespace."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$1/opt" /opt && mount --bind "$1/var/lib" /var/lib && exec bash "$2"',
            "sh", str(root), script]


def catalog_file(tmp_path: Path, main: Path, draft: Path) -> Path:
    path = tmp_path / "catalog.toml"
    path.write_text(f"""
[routes.{ROUTE}]
title = "Tiny Gemma 4 + MTP assistant (test route)"
repo = "{REPO}"
main = [{{ file = "{main.name}", size = {main.stat().st_size} }}]
draft = {{ file = "{draft.name}", size = {draft.stat().st_size} }}
mtp = "sidecar"
lemonade_checkpoint = "{REPO}:{main.name}"
lemonade_draft_checkpoint = "{REPO}:{draft.name}"
context_size = 2048
max_context = 8192
draft_n_max = 3
overhead_bytes = 0
[routes.{ROUTE}.kv]
full_layers = 1
full_kv_heads = 1
full_head_dim = 64
swa_layers = 1
swa_kv_heads = 1
swa_head_dim = 64
swa_window = 512
""")
    return path


def give_lemonade(root: Path) -> None:
    """Lemonade installed as the system service, with a model of the user's own. The command
    outputs are composed: Lemonade prints nothing to rely on for `config set`."""
    unit = root / "usr/lib/systemd/system/lemond.service"
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text("[Unit]\nDescription=Lemonade Server\n\n[Service]\nUser=lemonade\n"
                    "StateDirectory=lemonade\nProtectHome=yes\nExecStart=/usr/bin/lemond\n\n"
                    "[Install]\nWantedBy=multi-user.target\n")
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "lemond.service").symlink_to("/usr/lib/systemd/system/lemond.service")
    config = root / "var/lib/lemonade"
    config.mkdir(parents=True)
    (config / "user_models.json").write_text(json.dumps({"my-coder": {
        "checkpoint": "someone/coder-GGUF:Q4_K_M", "recipe": "llamacpp", "size": 9.1}}, indent=2) + "\n")
    for argv in ("lemonade --version", "lemond --version",
                 "lemonade config set llamacpp.rocm_bin=/opt/ojai/llama.cpp/current",
                 "lemonade config set flm.prefer_system=true", "systemctl restart lemond"):
        d = root / COMMANDS_DIR / command_key(argv.split())
        d.mkdir(parents=True)
        (d / "stdout").write_text("lemonade version 11.7.0\n" if "version" in argv else "")
        (d / "exit_code").write_text("0\n")


def test_fresh_box_to_serving_mtp_route(machine, tmp_path, fake_github: FakeGitHub,
                                        fake_hub: FakeHub, llama_server_bin: Path):
    root = machine("ojai-fresh")
    give_lemonade(root)
    nightly = make_zip(tmp_path / "nightly.zip",
                       nightly_entries_from_build(llama_server_bin.parent, llama_server_bin))
    fake_github.add_release("b1311", {asset_name("b1311", "gfx1150"): nightly})
    pair = write_mtp_pair(tmp_path / "published")
    fake_hub.add_path(REPO, pair.main.name, pair.main)
    fake_hub.add_path(REPO, pair.draft.name, pair.draft)
    port = free_port()
    setup = ["setup", "--root", root, "--model", ROUTE, "--catalog",
             catalog_file(tmp_path, pair.main, pair.draft), "--port", port]

    plan = ojai(*setup)
    assert plan.exit_code == 2, plan.output
    for line in ("change gpu-memory", "change llama.cpp: install llama.cpp nightly b1311 for gfx1150",
                 "change model: download", "change routes", "change lemonade", "change npu"):
        assert line in plan.stdout, line

    first = ojai(*setup, "--apply", "--yes")
    assert first.exit_code == 0, first.output
    scripts = root / "opt/ojai/routes"
    assert sorted(p.name for p in scripts.iterdir()) == [
        "flm-gemma4-it-e4b.sh", f"{ROUTE}-mtp.sh", f"{ROUTE}.sh"]
    for script in scripts.iterdir():
        subprocess.run(["bash", "-n", str(script)], check=True)
    mtp_script = (scripts / f"{ROUTE}-mtp.sh").read_text()
    assert "--spec-type draft-mtp" in " ".join(mtp_script.split()).replace(" \\ ", " ")
    assert "HSA_OVERRIDE_GFX_VERSION" not in mtp_script  # the nightly build has gfx1150 itself
    assert (root / "opt/ojai/llama.cpp/current/llama-server").is_file()
    models = root / "var/lib/ojai/models" / REPO
    assert (models / pair.main.name).read_bytes() == pair.main.read_bytes()
    user_models = json.loads((root / "var/lib/lemonade/user_models.json").read_text())
    assert "my-coder" in user_models
    assert user_models[ROUTE]["checkpoints"] == {"main": f"{REPO}:{pair.main.name}",
                                                 "draft": f"{REPO}:{pair.draft.name}"}
    assert "mtp" in user_models[ROUTE]["labels"]
    recipe = json.loads((root / "var/lib/lemonade/recipe_options.json").read_text())
    assert recipe[f"user.{ROUTE}"]["llamacpp_args"] == "--spec-draft-n-max 3"

    hub_requests = len(fake_hub.requests_to())
    second = ojai(*setup, "--apply", "--yes")
    assert second.exit_code == 0, second.output
    assert "nothing to do" in second.stdout
    assert len(fake_hub.requests_to()) == hub_requests

    doctor = json.loads(ojai("doctor", "--json", "--root", root).stdout)
    pairs = next(f for f in doctor["findings"] if f["id"] == "models.pairs")
    assert pairs["severity"] == "pass", pairs
    assert "draft-mtp" in " ".join(doctor["facts"]["tools"]["llama-server"]["detail"]["dialect"])

    with serve(in_machine(root, f"/opt/ojai/routes/{ROUTE}-mtp.sh"), port, tmp_path / "mtp.log"):
        verify = ojai("verify", "--root", root, "--json", "--route", f"{ROUTE}-mtp")
        assert verify.exit_code == 0, verify.output
        report = json.loads(verify.stdout)["routes"][0]
    assert report["healthy"] and report["draft_n"] > 0
    assert report["draft_n_accepted"] > 0
    assert report["predicted_speedup"] > 1.0
    assert 0 < report["acceptance_estimate"] <= 1.0

    with serve(in_machine(root, f"/opt/ojai/routes/{ROUTE}.sh"), port + 1, tmp_path / "plain.log"):
        verify = ojai("verify", "--root", root, "--json", "--route", ROUTE)
        assert verify.exit_code == 0, verify.output
        plain = json.loads(verify.stdout)["routes"][0]
    assert plain["healthy"] and plain["predicted_n"] > 0 and plain["draft_n"] is None
