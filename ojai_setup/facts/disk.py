"""Free space where models go (``OJAI_DISK_BUDGET_BYTES`` caps it) and what partial downloads hold."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ojai_setup.core.errors import UsageError

#: caps the free disk space a download may use (bytes); for tests and for careful people
DISK_BUDGET_ENV = "OJAI_DISK_BUDGET_BYTES"


_TRUE = {"1", "true", "yes", "on"}


def _disk_budget(explicit: int | None) -> int | None:
    if explicit is not None:
        return explicit
    raw = os.environ.get(DISK_BUDGET_ENV)
    if raw is None or not raw.strip():
        return None
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{DISK_BUDGET_ENV}={raw!r} is not a number of bytes") from None


def _existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def free_bytes(folder: Path, disk_budget: int | None = None) -> int:
    """Bytes a download into ``folder`` (or, while it does not exist, its nearest existing
    parent) may use: the free disk space, capped by ``disk_budget`` or ``OJAI_DISK_BUDGET_BYTES``."""
    free = shutil.disk_usage(_existing(folder)).free
    budget = _disk_budget(disk_budget)
    return free if budget is None else min(free, budget)


@dataclass(frozen=True)
class Filesystem:
    """The filesystem a folder is on (its nearest existing parent's, while it does not exist)."""

    device: int
    #: bytes free for ojai (capped as :func:`free_bytes` caps them)
    free: int
    size: int


def filesystem(folder: Path) -> Filesystem:
    """Which filesystem ``folder`` is on, how big it is and how much of it is free."""
    found = _existing(folder)
    usage = shutil.disk_usage(found)
    budget = _disk_budget(None)
    return Filesystem(device=os.stat(found).st_dev, size=usage.total,
                      free=usage.free if budget is None else min(usage.free, budget))


def partial_bytes(dest: Path) -> int:
    """Bytes already fetched by an interrupted download of ``dest`` (kept for resuming)."""
    return max((p.stat().st_size for p in dest.parent.glob(f".{dest.name}.*.partial")
                if p.is_file()), default=0) if dest.parent.is_dir() else 0


#: what a download or install of ``NAME`` leaves beside it, besides ``NAME`` itself: the
#: verified-digest and GGUF-info records of a model file, its partial download, and a
#: nightly's zip, unpack staging and retired install (see apply/hub.py, apply/archive.py)
LEFTOVER_PATTERNS = (".{name}.sha256", ".{name}.info.json", ".{name}.*.partial",
                     ".{name}.zip", ".{name}.zip.part", ".{name}.unpack", ".{name}.old",
                     ".{name}.build-*", "{name}.build.log")


def download_leftovers(dest: Path) -> list[Path]:
    """The files and folders ojai's download or install of ``dest`` left beside it (records,
    partial downloads, unpack staging), sorted."""
    if not dest.parent.is_dir():
        return []
    found: set[Path] = set()
    for pattern in LEFTOVER_PATTERNS:
        found.update(dest.parent.glob(pattern.format(name=dest.name)))
    return sorted(found)
