"""The install layout both llama.cpp installers share: versioned folders swapped in by rename,
and a ``current`` link switched atomically (by a relative target, so that the link stays valid
inside a machine root)."""

from __future__ import annotations

import os
from pathlib import Path

from ojai_setup.core.atomic import ensure_dir
from ojai_setup.core.errors import ApplyError
from ojai_setup.core.paths import DIR_MODE


def check_link_slot(link: Path, error: type[ApplyError] = ApplyError) -> None:
    """Raise ``error`` when the link's place holds something that is not a symlink."""
    if link.exists() and not link.is_symlink():
        raise error(f"{link} exists and is not a symlink; move it away so ojai can manage it")


def switch_link(link: Path, target: Path, error: type[ApplyError] = ApplyError) -> bool:
    """Point the symlink ``link`` at ``target`` atomically; return whether it changed."""
    check_link_slot(link, error)
    rel = os.path.relpath(target, link.parent)
    if link.is_symlink() and os.readlink(link) == rel:
        return False
    ensure_dir(link.parent, DIR_MODE)
    tmp = link.parent / f".{link.name}.tmp-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(rel)
    os.replace(tmp, link)
    return True


def swap_in(stage: Path, dest: Path, retired: Path) -> None:
    """Rename ``stage`` to ``dest``; an existing ``dest`` is set aside at ``retired`` first and
    put back if the rename fails."""
    if dest.exists() or dest.is_symlink():
        os.rename(dest, retired)
    try:
        os.rename(stage, dest)
    except OSError:
        if retired.exists() or retired.is_symlink():
            os.rename(retired, dest)
        raise
