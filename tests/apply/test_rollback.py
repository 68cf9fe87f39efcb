"""``ojai rollback`` is a reviewed change: it shows what it restores (diffs) and asks unless
``--yes``, runs the follow-up commands of what it restores, says a reboot is needed, and keeps
downloaded models unless ``--remove-downloads``. On copies of the test machines; the same
promise on a machine that really reboots is in test_vm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fake_hub import FakeHub, fake_hub  # noqa: F401 - fake_hub is a fixture
from support.gguf_files import gemma4_assistant, gemma4_main
from support.stand_ins import give_llama_server, route_toml
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.apply.journal import load_entry
from ojai_setup.facts.state import read_state

NO_LLAMA = ["--llamacpp", "none", "--no-npu"]
REPO = "ojai-test/tiny-gemma4-GGUF"
MAIN = "gemma-4-tiny-it-Q4_K_M.gguf"
DRAFT = "mtp-gemma-4-tiny-it.gguf"
MODELS = Path("var/lib/ojai/models") / REPO


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def applied(root: Path, *extra: object) -> None:
    result = ojai("setup", "--root", root, "--apply", "--yes", *NO_LLAMA, *extra)
    assert result.exit_code == 0, result.output


def test_rollback_shows_the_diff_and_refuses_without_a_terminal(machine):
    root = machine("ojai-fresh")
    grub = root / "etc/default/grub"
    original = grub.read_text()
    applied(root)
    edited = grub.read_text()
    result = ojai("rollback", "--root", root)
    assert result.exit_code == 1
    assert "restore /etc/default/grub" in result.stdout
    assert "--- /etc/default/grub (now)" in result.stdout
    assert "+++ /etc/default/grub (restored)" in result.stdout
    removed = [line for line in result.stdout.splitlines() if line.startswith("-GRUB_CMDLINE")]
    assert removed and "ttm.pages_limit=" in removed[0]
    assert "Then, as root:\n  update-grub\n" in result.stdout
    assert "A reboot is needed after rolling back" in result.stdout
    assert "refusing to roll back without review" in result.stderr
    assert grub.read_text() == edited != original


def test_rollback_yes_restores_runs_the_follow_ups_and_says_reboot(machine):
    root = machine("strix-halo-dkms")
    grub, conf = root / "etc/default/grub", root / "etc/modprobe.d/ttm.conf"
    before = grub.read_bytes(), conf.read_bytes()
    applied(root)
    assert (grub.read_bytes(), conf.read_bytes()) != before
    result = ojai("rollback", "--root", root, "--yes")
    assert result.exit_code == 0, result.output
    assert (grub.read_bytes(), conf.read_bytes()) == before
    # follow-ups by their commands, not their names
    assert "ran update-grub, update-initramfs -u -k " in " ".join(result.stdout.split())
    assert "Reboot now" in result.stdout
    entry = load_entry(_root(root), _last_rollback(root))
    assert [(h.name, h.exit_code) for h in entry.handlers] == [("update-grub", 0), ("initramfs", 0)]
    assert entry.reboot == ["the kernel reads the TTM limit only at boot"]
    # a second rollback has nothing left to undo
    again = ojai("rollback", "--root", root, "--yes")
    assert again.exit_code == 0 and "nothing to roll back" in again.stdout, again.output


def test_rollback_json_is_one_document_of_what_was_restored(machine):
    root = machine("strix-halo-dkms")
    grub, conf = root / "etc/default/grub", root / "etc/modprobe.d/ttm.conf"
    before = grub.read_bytes(), conf.read_bytes()
    applied(root)
    refused = ojai("rollback", "--root", root, "--json")  # no question asked on a JSON stream
    assert refused.exit_code == 1 and refused.stdout == ""
    hint = " ".join(refused.stderr.split())
    assert f"run `ojai rollback --root {root} --yes --json`" in hint, hint
    assert (grub.read_bytes(), conf.read_bytes()) != before
    result = ojai("rollback", "--root", root, "--yes", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert list(report)[0] == "schema" and report["schema"] == "ojai.rollback/1"
    assert sorted((f["path"], f["decision"]) for f in report["files"]) == [
        ("/etc/default/grub", "restore"), ("/etc/modprobe.d/ttm.conf", "restore")]
    assert sorted(report["restored"]) == ["/etc/default/grub", "/etc/modprobe.d/ttm.conf"]
    assert report["handlers_run"] == ["update-grub", "initramfs"]
    assert report["reboot_required"] is True and report["conflicts"] == []
    assert report["journal_id"] == _last_rollback(root)
    assert (grub.read_bytes(), conf.read_bytes()) == before


def test_rollback_refuses_a_file_changed_since_the_apply_before_asking(machine):
    root = machine("ojai-fresh")
    applied(root)
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text() + "# by hand\n")
    result = ojai("rollback", "--root", root, "--yes")
    assert result.exit_code == 1
    assert "changed since the apply" in result.stdout + result.stderr
    assert f"ojai rollback --root {root} --force" in " ".join(result.stderr.split())
    assert grub.read_text().endswith("# by hand\n")


@pytest.fixture
def catalog(tmp_path: Path, fake_hub: FakeHub) -> Path:
    folder = tmp_path / "published"
    main = gemma4_main(folder / MAIN, payload_bytes=4096)
    draft = gemma4_assistant(folder / DRAFT, payload_bytes=4096)
    fake_hub.add_path(REPO, MAIN, main)
    fake_hub.add_path(REPO, DRAFT, draft)
    path = tmp_path / "catalog.toml"
    path.write_text(route_toml("tiny-gemma", REPO, main, draft))
    return path


@pytest.fixture
def with_model(machine, catalog) -> Path:
    root = machine("ojai-fresh")
    give_llama_server(root)
    applied(root, "--catalog", catalog, "--model", "tiny-gemma")
    assert (root / MODELS / MAIN).is_file() and (root / MODELS / DRAFT).is_file()
    assert list((root / "opt/ojai/routes").glob("*.sh"))
    return root


def test_rollback_keeps_downloaded_models(with_model):
    root = with_model
    result = ojai("rollback", "--root", root, "--yes")
    assert result.exit_code == 0, result.output
    for name in (MAIN, DRAFT):
        assert (root / MODELS / name).is_file()
        assert f"keep /{MODELS / name}" in result.stdout
    assert "--remove-downloads" in result.stdout
    # the command to copy acts on this machine folder
    assert "".join(f"`ojai rollback --root {root} --remove-downloads` removes it".split()) in \
        "".join(result.stdout.split())
    assert not list((root / "opt/ojai/routes").glob("*.sh"))  # launch scripts are settings
    assert "ttm.pages_limit" not in (root / "etc/default/grub").read_text()


def test_rollback_remove_downloads_removes_them(with_model):
    root = with_model
    result = ojai("rollback", "--root", root, "--yes", "--remove-downloads")
    assert result.exit_code == 0, result.output
    for name in (MAIN, DRAFT):
        assert not (root / MODELS / name).exists()
        assert f"remove /{MODELS / name}" in result.stdout


def _root(path: Path):
    from ojai_setup.core.root import Root

    return Root(path)


def _last_rollback(root: Path) -> str:
    journal = root / "var/lib/ojai/journal"
    entries = [json.loads(p.read_text()) for p in sorted(journal.glob("*.json"))]
    rollbacks = [e["apply_id"] for e in entries if e["kind"] == "rollback"]
    assert rollbacks, "no rollback was journaled"
    assert read_state(_root(root)).last_apply is None
    return rollbacks[-1]
