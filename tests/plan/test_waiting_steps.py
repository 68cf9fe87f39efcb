"""A step is blocked only by what it needs: the steps that do not need a blocked one are planned
and applied (the boot edit without the network), the plan says which steps wait for which, and
an apply that leaves steps out says so in its last line and its exit status (3,
``ExitStatus.INCOMPLETE``). A limit NixOS already has (active, or in its configuration) is
satisfied, not blocked."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.status import ExitStatus
from tests.support.text import flat

MODEL = ["--model", "gemma-4-26b-a4b"]


def ojai(*args: object, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "80", **(env or {})})


@pytest.fixture
def offline() -> dict[str, str]:
    """GitHub's API and the Hub at an address where nothing listens (a port just closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = f"http://127.0.0.1:{port}"
    return {"OJAI_GITHUB_API": dead, "HF_ENDPOINT": dead}


def steps(result) -> dict[str, dict]:
    return {s["step"]: s for s in json.loads(result.stdout)["steps"]}


def test_the_nixos_limit_active_on_the_command_line_is_satisfied(machine):
    """strix-halo-z13-nixos boots with ttm.pages_limit=25165824 (96 GiB) on /proc/cmdline:
    the step was blocked ("add it to boot.kernelParams") although it is there."""
    root = machine("strix-halo-z13-nixos")
    plan = ojai("setup", "--root", root, "--llamacpp", "none", "--gpu-memory", 96, "--json")
    assert plan.exit_code == ExitStatus.OK, plan.output
    ttm = steps(plan)["gpu-memory"]
    assert ttm["status"] == "satisfied"
    assert ttm["sentence"].startswith("ttm.pages_limit=25165824 (96 GiB for the GPU) is active "
                                      "on /proc/cmdline")
    applied = ojai("setup", "--root", root, "--llamacpp", "none", "--gpu-memory", 96, "--apply")
    assert applied.exit_code == ExitStatus.OK, applied.output
    assert "nothing to do: every step is satisfied" in applied.stdout


def test_the_nixos_limit_in_its_configuration_is_satisfied(machine):
    root = machine("strix-halo-z13-nixos")
    config = root / "etc/nixos/configuration.nix"
    config.parent.mkdir(parents=True)
    config.write_text('{ config, pkgs, ... }:\n{\n  # boot.kernelParams = [ "ttm.pages_limit=1" ];\n'
                      '  boot.kernelParams = [ "quiet" ] ++ [ "ttm.pages_limit=26214400" ];\n}\n')
    plan = ojai("setup", "--root", root, "--llamacpp", "none", "--gpu-memory", 100, "--json")
    assert plan.exit_code == ExitStatus.OK, plan.output
    sentence = steps(plan)["gpu-memory"]["sentence"]
    assert "is configured in /etc/nixos/configuration.nix" in sentence
    assert "after `sudo nixos-rebuild boot` and a reboot" in sentence
    # another value there (or only a comment) is not the limit asked for: still blocked
    config.write_text('{ ... }:\n{\n  # boot.kernelParams = [ "ttm.pages_limit=26214400" ];\n}\n')
    plan = ojai("setup", "--root", root, "--llamacpp", "none", "--gpu-memory", 100, "--json")
    assert steps(plan)["gpu-memory"]["status"] == "blocked"


def test_without_the_network_the_boot_edit_is_applied_and_the_routes_wait(machine, offline):
    root = machine("ojai-fresh")
    plan = ojai("setup", "--root", root, *MODEL, "--json", env=offline)
    assert plan.exit_code == ExitStatus.FAILED, plan.output
    s = steps(plan)
    assert [s[n]["status"] for n in ("gpu-memory", "llama.cpp", "model", "routes")] == [
        "change", "blocked", "blocked", "blocked"]
    assert s["routes"]["waits_for"] == ["llama.cpp", "model"]
    assert s["routes"]["actions"] == []
    assert s["routes"]["sentence"].startswith(
        "waits for llama.cpp and model (blocked above); once they are fixed, it will write "
        "launch scripts for gemma-4-26b-a4b-mtp and gemma-4-26b-a4b")
    assert json.loads(plan.stdout)["summary"]["steps_waiting"] == 1

    shown = ojai("setup", "--root", root, *MODEL, env=offline)
    text = flat(shown.stdout)
    assert "waits routes: waits for llama.cpp and model (blocked above)" in text
    assert text.endswith("2 steps blocked and 1 waiting for them: left out until they are "
                         "fixed; a reboot follows.")

    applied = ojai("setup", "--root", root, *MODEL, "--apply", "--yes", env=offline)
    assert applied.exit_code == ExitStatus.INCOMPLETE == 3, applied.output
    assert "ttm.pages_limit=12582912" in (root / "etc/default/grub").read_text()
    assert not (root / "opt/ojai/routes/gemma-4-26b-a4b-mtp.sh").exists()
    assert flat(applied.stdout).endswith(
        f"ojai setup --root {root} --model gemma-4-26b-a4b --apply Applied what it could; not "
        "applied: llama.cpp is blocked; model is blocked; routes waits for llama.cpp and model.")
    # applying again changes nothing more and says the same
    again = ojai("setup", "--root", root, *MODEL, "--apply", "--yes", "--json", env=offline)
    assert again.exit_code == ExitStatus.FAILED, again.output
    assert "nothing can be applied: llama.cpp is blocked" in flat(again.stderr)


def test_a_saved_plan_carries_its_waiting_steps(machine, offline, tmp_path):
    root = machine("ojai-fresh")
    saved = tmp_path / "plan.json"
    made = ojai("setup", "--root", root, *MODEL, "--out", saved, env=offline)
    assert made.exit_code == ExitStatus.FAILED, made.output
    data = json.loads(saved.read_text())
    assert [s["waits_for"] for s in data["steps"] if s["step"] == "routes"] == [
        ["llama.cpp", "model"]]
    shown = ojai("setup", "--root", root, "--plan", saved, env=offline)
    assert "an apply leaves them out and applies the rest" in flat(shown.stdout)

    edited = tmp_path / "edited.json"
    for s in data["steps"]:
        if s["step"] == "routes":
            s["waits_for"] = ["model"]
    edited.write_text(json.dumps(data))
    refused = ojai("setup", "--root", root, "--apply", "--plan", edited, env=offline)
    assert refused.exit_code == ExitStatus.FAILED, refused.output
    assert ("step routes waits for model in the saved plan, for llama.cpp and model now"
            in flat(refused.stderr))
    assert "ttm.pages_limit" not in (root / "etc/default/grub").read_text()

    applied = ojai("setup", "--root", root, "--apply", "--plan", saved, env=offline)
    assert applied.exit_code == ExitStatus.INCOMPLETE, applied.output
    assert "ttm.pages_limit=12582912" in (root / "etc/default/grub").read_text()
