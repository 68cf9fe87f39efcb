"""``ojai setup --plan FILE`` without ``--apply``: the saved plan exactly as the dry run showed
it, then whether it is still fresh for this machine; every hint that says to plan again quotes
the whole command the plan was made with (``--root`` and options, shell-quoted)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.model.settings import OPTIONS as OPTIONS_OF_FIELDS, Settings

#: a plan made with options: every one must come back in the hints
OPTIONS = ["--profile", "ojai", "--gpu-memory", "40", "--llamacpp", "none", "--host", "localhost",
           "--port", "9000", "--no-npu"]


def ojai(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def saved(machine, tmp_path):
    root = machine("ojai-fresh")
    plan = tmp_path / "my plan.json"  # a name that needs quoting
    made = ojai("setup", "--root", str(root), "--out", str(plan), *OPTIONS)
    assert made.exit_code == 2, made.output
    return root, plan, made


def test_a_saved_plan_is_shown_as_the_dry_run_showed_it_and_is_fresh(saved):
    root, plan, made = saved
    before = snapshot(root)
    shown = ojai("setup", "--root", str(root), "--plan", str(plan))
    assert shown.exit_code == 2, shown.output  # fresh: the plan's own exit code
    assert shown.stdout.startswith(made.stdout), (made.stdout, shown.stdout)
    tail = " ".join(shown.stdout[len(made.stdout):].split())
    assert "fresh: nothing it read or writes changed since" in tail, tail
    made_with = shlex.join(["ojai", "setup", "--root", str(root), *OPTIONS, "--out", str(plan)])
    assert made_with in tail, tail
    assert shlex.join(["ojai", "setup", "--root", str(root), "--apply", "--plan", str(plan)]) in tail
    assert "'" in made_with  # the plan's name has a space: it is quoted
    assert snapshot(root) == before  # showing changes nothing
    # the note after --out says how to show it and how to apply it, whole
    note = " ".join(made.stderr.split())
    assert shlex.join(["ojai", "setup", "--root", str(root), "--plan", str(plan)]) in note, note


def test_a_plan_made_stale_by_a_change_of_the_machine_says_what_changed(saved):
    root, plan, made = saved
    dropin = root / "etc/default/grub.d/50-cloudimg-settings.cfg"
    dropin.parent.mkdir(parents=True)
    dropin.write_text('GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT '
                      'ttm.pages_limit=10485760"\n')
    shown = ojai("setup", "--root", str(root), "--plan", str(plan))
    assert shown.exit_code == 1, shown.output
    assert shown.stdout.startswith(made.stdout)  # still shown as it was saved
    tail = " ".join(shown.stdout[len(made.stdout):].split())
    assert "stale: it no longer matches this machine" in tail, tail
    assert "the machine's facts changed since the plan was made" in tail
    # the step that differs is named, with what it would do now
    assert "gpu-memory: change in the saved plan, satisfied now" in tail, tail
    assert "50-cloudimg-settings.cfg" in tail
    redo = shlex.join(["ojai", "setup", "--root", str(root), *OPTIONS, "--out", str(plan)])
    assert f"Make and review a new plan with: {redo}" in tail, tail
    # the command it quotes makes the plan again with the same settings
    args = shlex.split(redo)[1:]
    again = ojai(*args)
    assert again.exit_code == 0, again.output  # the drop-in already sets a limit: nothing to do
    assert Settings(**json.loads(plan.read_text())["settings"]) == Settings(
        profile="ojai", gpu_memory_gib=40, llamacpp="none", port=9000, host="localhost", npu=False)


def test_a_stale_plan_refused_by_apply_quotes_the_whole_command(saved):
    root, plan, _ = saved
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_TIMEOUT=0", "GRUB_TIMEOUT=5"))
    refused = ojai("setup", "--root", str(root), "--apply", "--plan", str(plan))
    assert refused.exit_code == 1
    err = " ".join(refused.stderr.split())
    assert err.startswith("error: saved plan is stale: /etc/default/grub changed"), err
    redo = shlex.join(["ojai", "setup", "--root", str(root), *OPTIONS, "--out", str(plan)])
    assert f"run `{redo}` again and review it" in err, err


def test_json_shows_the_saved_plan_and_its_freshness(saved):
    root, plan, _ = saved
    dry = json.loads(ojai("setup", "--root", str(root), "--json", *OPTIONS).stdout)
    fresh = json.loads(ojai("setup", "--root", str(root), "--plan", str(plan), "--json").stdout)
    assert fresh["schema"] == "ojai.setup/1"
    status = fresh.pop("saved_plan")
    assert status["fresh"] is True and status["changes"] == [] and status["steps_differ"] == []
    assert status["made_with"] == shlex.join(
        ["ojai", "setup", "--root", str(root), *OPTIONS, "--out", str(plan)])
    assert status["apply_command"] == shlex.join(
        ["ojai", "setup", "--root", str(root), "--apply", "--plan", str(plan)])
    # the same document as a dry run made now, but for the time it was made
    for doc in (dry, fresh):
        doc.pop("created")
    assert fresh == dry
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace("GRUB_TIMEOUT=0", "GRUB_TIMEOUT=5"))
    result = ojai("setup", "--root", str(root), "--plan", str(plan), "--json")
    assert result.exit_code == 1
    stale = json.loads(result.stdout)
    assert stale["exit_code"] == 1 and stale["saved_plan"]["fresh"] is False
    assert any(c.startswith("/etc/default/grub changed") for c in stale["saved_plan"]["changes"])


def test_a_damaged_saved_plan_is_a_clear_error(tmp_path, machine):
    root = machine("ojai-fresh")
    bad = tmp_path / "plan.json"
    bad.write_text('{"format": "ojai-plan", "format_version": 1')
    result = ojai("setup", "--root", str(root), "--plan", str(bad))
    assert result.exit_code == 1
    assert "not a valid plan file" in result.stderr and "Traceback" not in result.output


def test_settings_give_back_their_options_for_every_field(tmp_path, machine):
    """Every setting comes back as the option that sets it: ojai parses the options
    :meth:`Settings.options` writes into an equal Settings."""
    key = tmp_path / "key"
    key.write_text("k" * 32 + "\n")
    catalog = tmp_path / "catalog.toml"
    catalog.write_text("")
    every = Settings(profile="strix-halo", gpu_memory_gib=40, ttm_via="modprobe", llamacpp="source",
                     llamacpp_tag="b1311", llamacpp_src=str(tmp_path / "src dir"),
                     llamacpp_ref="b11434", llamacpp_backend="cpu", gpu_target="gfx1150,gfx1151",
                     cmake_defines=("GGML_NATIVE=OFF", "GGML_CUDA_FA=OFF"), accept_slower=True,
                     model="gemma-4-12b", extra_models=("gpt-oss-20b",), models_max=1,
                     models_dir=str(tmp_path / "models"),
                     user_catalog=str(catalog), host="0.0.0.0", port=9000, systemd=True,
                     npu=False, lemonade_downloads=True, lemonade="release", lemonade_tag="v11.7.0", power="performance",
                     api_key_file=str(key), flash_attn="off", load_mode="mlock")
    assert sorted(f for f, _ in OPTIONS_OF_FIELDS) == sorted(Settings.model_fields)
    default = Settings()
    assert all(getattr(every, f) != getattr(default, f) for f in Settings.model_fields), \
        "a field was left at its default: the test would not see its option"
    root = machine("ojai-fresh")
    out = tmp_path / "plan.json"
    args = shlex.split(every.command("--out", str(out), root=str(root)))
    assert args[:4] == ["ojai", "setup", "--root", str(root)]
    ojai(*args[1:])
    assert Settings(**json.loads(out.read_text())["settings"]) == every


def test_a_fresh_plan_with_a_blocked_step_is_offered_for_what_it_can_apply(machine, tmp_path):
    """Once a blocked step kept a fresh plan from being applied at all; now the apply leaves it
    out (and what waits for it) and applies the rest, and the saved plan says so. A plan whose
    every change is blocked is still not offered."""
    root = machine("ojai-fresh")
    plan = tmp_path / "plan.json"
    # no ACPI platform profile on this machine: --power performance is blocked
    made = ojai("setup", "--root", str(root), "--out", str(plan), "--llamacpp", "none",
                "--power", "performance")
    assert made.exit_code == 1, made.output
    shown = ojai("setup", "--root", str(root), "--plan", str(plan))
    assert shown.exit_code == 1
    tail = " ".join(shown.stdout[len(made.stdout):].split())
    assert ("power is blocked: an apply leaves it out and applies the rest. Apply exactly it "
            f"with: ojai setup --root {root} --apply --plan {plan}") in tail, tail
    assert ojai("setup", "--root", str(root), "--apply", "--plan", str(plan)).exit_code == 3
    again = tmp_path / "again.json"
    assert ojai("setup", "--root", str(root), "--out", str(again), "--llamacpp", "none",
                "--power", "performance").exit_code == 1
    shown = ojai("setup", "--root", str(root), "--plan", str(again))
    tail = " ".join(shown.stdout.split())
    assert "but a step is blocked, so it cannot be applied" in tail, tail
    assert "--apply --plan" not in tail


def test_options_given_with_a_saved_plan_are_said_to_change_nothing(saved):
    root, plan, made = saved
    shown = ojai("setup", "--root", str(root), "--plan", str(plan), "--port", "7000")
    assert shown.exit_code == 2
    assert shown.stdout.startswith(made.stdout)
    assert "--port 7000 given here changed nothing" in " ".join(shown.stderr.split())
