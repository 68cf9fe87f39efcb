"""Two backends installed side by side through `ojai setup`: a Vulkan nightly applied after the
ROCm one goes behind a link of its own (``/opt/ojai/llama.cpp/vulkan``) instead of switching
``current``, so the routes written for ROCm keep running it and the Vulkan plan's routes (and
Lemonade's ``vulkan_bin``) name the Vulkan build. Both archives carry the real CPU llama-server
in the layouts Lemonade's ROCm zips and upstream's Vulkan tarballs have (tests/support/fake_github.py),
so every route's flags are probed from a real binary."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.fake_github import (  # noqa: F401 - fake_github is a fixture
    UPSTREAM_REPO,
    FakeGitHub,
    fake_github,
    make_upstream_tarball,
    make_zip,
    nightly_entries_from_build,
)
from support.fake_hub import FakeHub, fake_hub  # noqa: F401 - a fixture
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.stand_ins import give_lemonade, route_toml
from support.tiny_models import write_mtp_pair
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.domain.nightly import asset_name
from ojai_setup.formats.tuning import RouteTuning, Tuning, render_tuning

# real llama-server probes and gated applies: the fast loop leaves them to CI
pytestmark = pytest.mark.slow

BASE = "/opt/ojai/llama.cpp"
REPO = "ojai-test/tiny-gemma4-GGUF"


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def steps(result) -> dict[str, dict]:
    assert result.stdout.lstrip().startswith("{"), result.output
    return {s["step"]: s for s in json.loads(result.stdout)["steps"]}


def a_box(machine, tmp_path: Path, fake_github: FakeGitHub, fake_hub: FakeHub,
          llama_server_bin: Path) -> tuple[Path, list, list]:
    """ojai-fresh with Lemonade, both nightlies published and a catalog of two routes; the
    machine, and the ROCm (route on-rocm) and Vulkan (route on-vulkan) setup commands."""
    root = machine("ojai-fresh")
    give_lemonade(root, ("lemond --version", "systemctl restart lemond",
                         f"lemonade config set llamacpp.rocm_bin={BASE}/current",
                         f"lemonade config set llamacpp.vulkan_bin={BASE}/vulkan"))
    entries = nightly_entries_from_build(llama_server_bin.parent, llama_server_bin)
    fake_github.add_release("b1311", {asset_name("b1311", "gfx1150"): make_zip(
        tmp_path / "rocm.zip", entries)})
    fake_github.add_release("b7000", {asset_name("b7000", "vulkan"): make_upstream_tarball(
        tmp_path / "vulkan.tar.gz", "b7000", entries)}, repo=UPSTREAM_REPO)
    pair = write_mtp_pair(tmp_path / "published")
    fake_hub.add_path(REPO, pair.main.name, pair.main)
    fake_hub.add_path(REPO, pair.draft.name, pair.draft)
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(route_toml("on-rocm", REPO, pair.main, pair.draft)
                       + route_toml("on-vulkan", REPO, pair.main, pair.draft))
    common = ["--root", root, "--no-npu", "--catalog", catalog, "--llamacpp", "nightly"]
    rocm = ["setup", *common, "--llamacpp-tag", "b1311", "--model", "on-rocm"]
    vulkan = ["setup", *common, "--llamacpp-tag", "b7000", "--backend", "vulkan", "--model",
              "on-vulkan", "--port", 8090]
    return root, rocm, vulkan


def test_a_second_backend_goes_beside_the_first_and_each_route_runs_its_own(
        machine, tmp_path, fake_github: FakeGitHub, fake_hub: FakeHub, llama_server_bin: Path):
    root, rocm, vulkan = a_box(machine, tmp_path, fake_github, fake_hub, llama_server_bin)
    first = ojai(*rocm, "--apply", "--yes")
    assert first.exit_code == 0, first.output
    assert os.readlink(root / "opt/ojai/llama.cpp/current") == "b1311-gfx1150"

    # the Vulkan plan names the link it switches and the binary its routes run
    plan = steps(ojai(*vulkan, "--json"))
    [install] = plan["llama.cpp"]["actions"]
    assert (install["dest"], install["link"]) == (f"{BASE}/b7000-vulkan", f"{BASE}/vulkan")
    assert not any(a.get("kind") == "prove_build" for a in plan["llama.cpp"]["actions"])
    second = ojai(*vulkan, "--apply", "--yes")
    assert second.exit_code == 0, second.output
    assert os.readlink(root / "opt/ojai/llama.cpp/current") == "b1311-gfx1150"  # untouched
    assert os.readlink(root / "opt/ojai/llama.cpp/vulkan") == "b7000-vulkan"

    routes = root / "opt/ojai/routes"
    for name, server in (("on-rocm", f"{BASE}/current/llama-server"),
                         ("on-vulkan", f"{BASE}/vulkan/llama-server")):
        for script in (routes / f"{name}.sh", routes / f"{name}-mtp.sh"):
            text = script.read_text()
            assert server in text, (script.name, text)
            other = f"{BASE}/vulkan/" if name == "on-rocm" else f"{BASE}/current/"
            assert other not in text, (script.name, text)
    vulkan_script = (routes / "on-vulkan-mtp.sh").read_text()
    assert "HSA_OVERRIDE" not in vulkan_script and "LD_LIBRARY_PATH" not in vulkan_script

    config = json.loads((root / "var/lib/lemonade/config.json").read_text())
    assert config["llamacpp"] == {"rocm_bin": f"{BASE}/current/llama-server",
                                  "vulkan_bin": f"{BASE}/vulkan/llama-server"}, config
    recipes = json.loads((root / "var/lib/lemonade/recipe_options.json").read_text())
    assert recipes["user.on-rocm"]["llamacpp_backend"] == "rocm"
    assert recipes["user.on-vulkan"]["llamacpp_backend"] == "vulkan"

    # each plan again: nothing to do, and neither link moves
    for again in (rocm, vulkan):
        result = steps(ojai(*again, "--json"))
        assert all(s["status"] == "satisfied" for s in result.values()), {
            k: (s["status"], s["sentence"]) for k, s in result.items() if s["status"] != "satisfied"}
    assert os.readlink(root / "opt/ojai/llama.cpp/current") == "b1311-gfx1150"
    assert os.readlink(root / "opt/ojai/llama.cpp/vulkan") == "b7000-vulkan"


def test_tunes_choice_of_the_other_backend_moves_the_route_and_its_lemonade_entry(
        machine, tmp_path, fake_github: FakeGitHub, fake_hub: FakeHub, llama_server_bin: Path):
    """ojai tune chose the Vulkan build for a route first written for ROCm: planning the ROCm
    setup again runs that route on the Vulkan build, and Lemonade's entry for it follows
    (its backend, and ``vulkan_bin`` naming the build tune chose)."""
    root, rocm, vulkan = a_box(machine, tmp_path, fake_github, fake_hub, llama_server_bin)
    for setup in (rocm, vulkan):
        applied = ojai(*setup, "--apply", "--yes")
        assert applied.exit_code == 0, applied.output
    chosen = f"{BASE}/b7000-vulkan/llama-server"
    tuned = root / "etc/ojai/tuned.toml"
    tuned.parent.mkdir(parents=True, exist_ok=True)
    tuned.write_text(render_tuning(Tuning(routes={"on-rocm": RouteTuning(
        date="2026-12-05", binary=chosen, draft_n_max=2,
        reason="vulkan, drafted: fastest at depth 0")})))

    plan = steps(ojai(*rocm, "--json"))
    assert plan["llama.cpp"]["status"] == "satisfied"
    assert plan["routes"]["status"] == "change", plan["routes"]
    applied = ojai(*rocm, "--apply", "--yes")
    assert applied.exit_code == 0, applied.output
    for script in ("on-rocm.sh", "on-rocm-mtp.sh"):
        text = (root / "opt/ojai/routes" / script).read_text()
        assert chosen in text and f"{BASE}/current/" not in text, text
    config = json.loads((root / "var/lib/lemonade/config.json").read_text())
    assert config["llamacpp"]["vulkan_bin"] == chosen, config
    recipes = json.loads((root / "var/lib/lemonade/recipe_options.json").read_text())
    assert recipes["user.on-rocm"]["llamacpp_backend"] == "vulkan"
    again = steps(ojai(*rocm, "--json"))
    assert all(s["status"] == "satisfied" for s in again.values()), again


def test_rollback_of_the_second_backend_removes_its_link_and_leaves_current(
        machine, tmp_path, fake_github: FakeGitHub, fake_hub: FakeHub, llama_server_bin: Path):
    root, rocm, vulkan = a_box(machine, tmp_path, fake_github, fake_hub, llama_server_bin)
    for setup in (rocm, vulkan):
        applied = ojai(*setup, "--apply", "--yes")
        assert applied.exit_code == 0, applied.output
    undone = ojai("rollback", "--root", root, "--yes")
    assert undone.exit_code == 0, undone.output
    assert not os.path.lexists(root / "opt/ojai/llama.cpp/vulkan")
    assert os.readlink(root / "opt/ojai/llama.cpp/current") == "b1311-gfx1150"
    assert (root / "opt/ojai/routes/on-rocm.sh").is_file()
    assert not (root / "opt/ojai/routes/on-vulkan.sh").exists()
