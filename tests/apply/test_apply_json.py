"""``ojai setup --apply --json``: one JSON document (``ojai.apply/1``) saying what the apply
changed, which follow-up commands ran and whether a reboot is needed, for programs that drive
ojai (the Ansible collection under ansible/)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ojai_setup.cli import app

NO_LLAMA = ["--llamacpp", "none", "--no-npu"]


def ojai(*args: str):
    return CliRunner().invoke(app, list(args))


def test_apply_json_reports_files_follow_ups_and_reboot(machine):
    root = machine("ojai-fresh")
    result = ojai("setup", "--root", str(root), "--apply", "--yes", "--json", *NO_LLAMA)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # one document: the plan is not printed before it
    assert report["schema"] == "ojai.apply/1"
    assert report["changed"] is True
    assert report["files_changed"] == ["/etc/default/grub"]
    assert report["handlers"] == [{"name": "update-grub", "command": "update-grub"}]
    assert report["reboot_required"] is True
    assert report["reboot_reasons"] == ["the kernel reads the TTM limit only at boot"]
    assert [a["step"] for a in report["actions"]] == ["gpu-memory"]
    assert report["actions"][0]["changed"] is True
    assert report["exit_code"] == 0
    assert (root / report["journal"].lstrip("/")).is_file()

    again = ojai("setup", "--root", str(root), "--apply", "--yes", "--json", *NO_LLAMA)
    assert again.exit_code == 0, again.output
    second = json.loads(again.stdout)
    assert second["changed"] is False
    assert second["files_changed"] == [] and second["handlers"] == []
    assert second["reboot_required"] is False
    assert second["journal"] is None


def test_apply_json_of_a_saved_plan(machine, tmp_path):
    root = machine("strix-halo-dkms")
    plan = tmp_path / "plan.json"
    dry = ojai("setup", "--root", str(root), "--json", "--out", str(plan), *NO_LLAMA)
    assert dry.exit_code == 2, dry.output
    shown = json.loads(dry.stdout)
    written = [a["path"] for s in shown["steps"] for a in s["actions"] if a["kind"] == "write_file"]
    assert written == ["/etc/default/grub", "/etc/modprobe.d/ttm.conf"]

    result = ojai("setup", "--root", str(root), "--apply", "--plan", str(plan), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["files_changed"] == written
    assert [h["name"] for h in report["handlers"]] == ["update-grub", "initramfs"]
    assert report["handlers"][1]["command"] == "update-initramfs -u -k 6.14.0-1014-oem"
    assert report["reboot_required"] is True


def test_apply_json_names_follow_ups_owed_by_an_earlier_apply(machine):
    root = machine("ojai-fresh")
    exit_code = root / ".ojai/commands/update-grub/exit_code"
    exit_code.write_text("1\n")
    failed = ojai("setup", "--root", str(root), "--apply", "--yes", "--json", *NO_LLAMA)
    assert failed.exit_code == 1
    assert "`update-grub` failed with exit code 1" in failed.stderr
    report = json.loads(failed.stdout)  # how the apply ended, as data
    assert report["exit_code"] == 1 and "`update-grub` failed" in report["error"]
    assert report["files_changed"] == ["/etc/default/grub"]
    assert report["owed"] == [{"name": "update-grub", "command": "update-grub"}]
    assert report["follow_ups_failed"][0]["command"] == "update-grub"
    assert report["finish_command"] == f"ojai setup --root {root} {' '.join(NO_LLAMA)} --apply"
    assert report["undo_command"] == f"ojai rollback --root {root}"

    exit_code.write_text("0\n")
    again = ojai("setup", "--root", str(root), "--apply", "--json", *NO_LLAMA)
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert report["actions"] == [] and report["files_changed"] == []
    assert report["handlers"] == [{"name": "update-grub", "command": "update-grub"}]
    assert report["changed"] is True
