"""What AMD's ``amd-ttm --set`` does to the initramfs, by its version: the rows of
``checks/tables/amd-ttm.toml``, each with its source.

ojai's modprobe route (``--ttm-via modprobe``) takes amd-ttm's way (``options ttm pages_limit=``
in /etc/modprobe.d); where amd-ttm is installed too, the plan says what it would rebuild, so an
owner who runs it later knows whether the initramfs follows (:func:`note`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ojai_setup.formats.machine import version_tuple

TABLE = "amd-ttm.toml"

#: where a distribution's or pip's amd-debug-tools keeps its metadata (the folder name carries
#: the version: ``amd_debug_tools-0.2.17.dist-info``, Ubuntu's file list)
DIST_INFO = ("/usr/lib/python3*/dist-packages/amd_debug_tools-*.dist-info",
             "/usr/lib/python3*/site-packages/amd_debug_tools-*.dist-info",
             "/usr/local/lib/python3*/dist-packages/amd_debug_tools-*.dist-info",
             "/usr/local/lib/python3*/site-packages/amd_debug_tools-*.dist-info")


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    min: str | None = None
    max: str | None = None
    rebuilds: str
    source: str

    def covers(self, version: str) -> bool:
        v = version_tuple(version)
        return ((self.min is None or v >= version_tuple(self.min))
                and (self.max is None or v <= version_tuple(self.max)))


@cache
def rows(path: Path | None = None) -> tuple[Row, ...]:
    from ojai_setup.core.resources import read_toml

    if path is None:
        from ojai_setup.domain.profiles import checks_dir

        path = checks_dir() / "tables" / TABLE
    data = read_toml(path)
    return tuple(Row.model_validate(r) for r in data.get("row", []))


def version_of(dist_info: str) -> str:
    """``0.2.22`` from ``.../amd_debug_tools-0.2.22.dist-info``."""
    return Path(dist_info).name.removeprefix("amd_debug_tools-").removesuffix(".dist-info")


def note(version: str) -> str:
    """What the plan says of amd-ttm ``version``, with the row's source."""
    row = next((r for r in rows() if r.covers(version)), None)
    if row is None:
        return (f"amd-ttm {version} is installed here; what it does to the initramfs after "
                "`amd-ttm --set` is not known for this version (checks/tables/amd-ttm.toml)")
    return (f"amd-ttm {version} is installed here; after `amd-ttm --set` it {row.rebuilds} "
            f"({row.source})")
