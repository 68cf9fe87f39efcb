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
from support import stand_ins
from support.fake_github import (  # noqa: F401
    FakeGitHub,
    fake_github,
    make_zip,
    nightly_entries_from_build,
)
from support.fake_hub import FakeHub, fake_hub  # noqa: F401
from support.llama import llama_server_bin  # noqa: F401
from support.server import free_port, serve
from support.stand_ins import route_toml
from support.text import flat
from support.tiny_models import write_mtp_pair
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.domain.nightly import asset_name

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


def give_lemonade(root: Path) -> None:
    """Lemonade as the system service (see support/stand_ins.py), with a model of the user's own."""
    stand_ins.give_lemonade(
        root, ("lemond --version", "lemonade config set llamacpp.rocm_bin=/opt/ojai/llama.cpp/current",
               "lemonade config set flm.prefer_system=true", "lemonade pull gemma4-it-e4b-FLM",
               "systemctl restart lemond"),
        user_models=json.dumps({"my-coder": {"checkpoint": "someone/coder-GGUF:Q4_K_M",
                                             "recipe": "llamacpp", "size": 9.1}}, indent=2) + "\n")


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
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(route_toml(ROUTE, REPO, pair.main, pair.draft, draft_n_max=3))
    setup = ["setup", "--root", root, "--model", ROUTE, "--catalog", catalog, "--port", port]

    plan = ojai(*setup)
    assert plan.exit_code == 2, plan.output
    for line in ("change gpu-memory", "change llama.cpp: install llama.cpp nightly b1311 for gfx1150",
                 "change model: download", "change routes", "change lemonade", "change npu"):
        assert line in flat(plan.stdout), line

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
    assert user_models[ROUTE]["checkpoints"] == {  # ojai's files: one copy of each
        "main": f"/var/lib/ojai/models/{REPO}/{pair.main.name}",
        "draft": f"/var/lib/ojai/models/{REPO}/{pair.draft.name}"}
    assert user_models[ROUTE]["source"] == "local_path"
    assert "mtp" in user_models[ROUTE]["labels"]
    config = json.loads((root / "var/lib/lemonade/config.json").read_text())
    assert config == {"llamacpp": {"rocm_bin": "/opt/ojai/llama.cpp/current/llama-server"},
                      "rocm_channel": "nightly"}
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
