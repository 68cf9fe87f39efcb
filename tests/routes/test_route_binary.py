"""Each route names its own backend's build: with a ROCm nightly behind ``current`` and a Vulkan
build installed beside it, the build ``ojai tune`` chose for a route (``binary`` in
/etc/ojai/tuned.toml) is the one its launch scripts run, rendered as a Vulkan build's (no HSA
override, no ROCm library path); a chosen build that is gone is said, and the routes keep
``current``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.gguf_files import attention_model
from support.stand_ins import give_llama_server
from typer.testing import CliRunner

from ojai_setup.cli import app

BASE = "/opt/ojai/llama.cpp"
VULKAN = f"{BASE}/b7000-vulkan/llama-server"


def _two_backends(root: Path) -> None:
    rocm = give_llama_server(root, "gfx1150")  # current -> b1311-gfx1150
    folder = root / "opt/ojai/llama.cpp/b7000-vulkan"
    folder.mkdir()
    shutil.copy2(rocm, folder / "llama-server")
    (folder / "ojai-install.json").write_text(json.dumps({"tag": "b7000", "family": "vulkan",
                                                         "backend": "vulkan"}))


def _tuned(root: Path, binary: str) -> None:
    (root / "etc/ojai").mkdir(parents=True, exist_ok=True)
    (root / "etc/ojai/tuned.toml").write_text(
        '[routes."mine-q4_k_m"]\ndrafting = false\nreason = "vulkan plain fastest at depth 8192"\n'
        f'date = "2026-12-05T20:00:00+00:00"\nbinary = "{binary}"\n')


def _routes(root: Path) -> dict:
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none", "--no-npu",
                                      "--json", "--model", "/srv/models/Mine-Q4_K_M.gguf"])
    data = json.loads(result.stdout)
    return next(s for s in data["steps"] if s["step"] == "routes")


def _scripts(step: dict) -> dict[str, str]:
    return {a["path"]: a["after"] for a in step["actions"] if a.get("path", "").endswith(".sh")}


def test_a_route_runs_the_build_tune_chose_for_it(machine):
    root = machine("ojai-fresh")
    _two_backends(root)
    attention_model(root / "srv/models/Mine-Q4_K_M.gguf", arch="llama", block_count=4,
                    payload_bytes=1 << 20)
    before = _scripts(_routes(root))
    assert before and all(f"exec {BASE}/current/llama-server" in s for s in before.values()), before

    _tuned(root, VULKAN)
    step = _routes(root)
    scripts = _scripts(step)
    assert set(scripts) == set(before)
    for text in scripts.values():
        assert f"exec {VULKAN}" in text and "/current/" not in text, text
        assert "HSA_OVERRIDE_GFX_VERSION" not in text and "LD_LIBRARY_PATH" not in text
    assert "the build ojai tune chose for this route" in step["sentence"], step["sentence"]

    _tuned(root, f"{BASE}/b6999-vulkan/llama-server")  # chosen, then removed
    gone = _routes(root)
    assert all(f"exec {BASE}/current/llama-server" in s for s in _scripts(gone).values())
    said = " ".join(gone.get("warnings", [])) + gone["sentence"]
    assert "which is not on this machine" in said, gone
