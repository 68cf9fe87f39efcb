"""The one writer the apply and the rollback replace files through (core/atomic.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ojai_setup.core.atomic import Replacement, copy_of, replace_symlink

REPO = Path(__file__).resolve().parents[2]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_replacement_refused_by_its_check_leaves_the_file_and_no_temp(tmp_path):
    target = tmp_path / "grub"
    target.write_text("old\n")

    def refuse(tmp: Path) -> None:
        assert tmp.read_bytes() == b"new\n" and tmp.parent == tmp_path
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        Replacement(target).commit(b"new\n", check=refuse)
    assert target.read_text() == "old\n"
    assert _leftovers(tmp_path) == []


def test_a_replacement_stopped_before_its_rename_leaves_the_file_and_no_temp(tmp_path):
    target = tmp_path / "grub"
    target.write_text("old\n")

    def stop() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Replacement(target).commit(b"new\n", before_rename=stop)
    assert target.read_text() == "old\n"
    assert _leftovers(tmp_path) == []


def test_a_replacement_copies_with_its_mode_and_names_its_temp_as_recovery_knows(tmp_path):
    source = tmp_path / "backup"
    source.write_bytes(b"kept\n")
    target = tmp_path / "dir" / "conf"
    target.parent.mkdir()
    new = Replacement(target)
    assert new.tmp.parent == target.parent
    assert new.tmp.name.startswith(".conf.") and new.tmp.name.endswith(".ojai-tmp")
    new.commit(copy_of(source), mode=0o644, owner=(os.getuid(), os.getgid()))
    assert target.read_bytes() == b"kept\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert _leftovers(target.parent) == []
    with pytest.raises(ValueError, match="already committed"):
        new.commit(b"again")


def test_a_link_is_replaced_whole(tmp_path):
    link = tmp_path / "current"
    link.symlink_to("b1")
    replace_symlink(link, "b2")
    assert os.readlink(link) == "b2"
    assert _leftovers(tmp_path) == []


def test_the_apply_and_the_rollback_rename_files_only_through_the_one_writer():
    """No hand-written temp/fsync/rename copy is left in the executor or the journal."""
    for module in ("apply/executor.py", "apply/journal.py"):
        text = (REPO / "ojai_setup" / module).read_text()
        assert "os.replace(" not in text and "mkstemp(" not in text, module
