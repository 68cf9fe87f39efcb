"""Which hardware profiles ojai ships: the files of ``checks/``.

Kept apart from :mod:`ojai_setup.domain.check_engine` (which builds the profile models) so
that the command line can offer ``--profile`` choices without loading the checks.
"""

from __future__ import annotations

from pathlib import Path


def checks_dir() -> Path:
    from ojai_setup.core.resources import data_dir

    return data_dir("checks")


def profile_names(directory: Path | None = None) -> list[str]:
    """The profiles a machine can be detected as (``common`` is only included by others;
    ``generic`` is the fallback)."""
    directory = directory or checks_dir()
    return sorted(p.stem for p in directory.glob("*.toml") if p.stem not in ("common", "generic"))
