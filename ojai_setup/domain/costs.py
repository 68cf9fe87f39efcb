"""What a source build costs in time and disk space (``build-costs.toml`` says how each figure
was obtained).

Pure: :func:`estimate` turns the measured figures, the backend and the GPU target(s) into one
phrase for the plan, per target (a build for two targets compiles the GPU code twice). Time
is measured as processor time (user + system of every compiler, from the install record's
``cpu_seconds``), which does not depend on the load the build ran under; the wall time on
``n`` free cores is about that divided by ``n``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ojai_setup.core.resources import read_toml
from ojai_setup.core.units import size_text
from ojai_setup.model.cmake import args_text

#: the cores the plan states the time for (the OJAI box has 24 threads; CI has 2)
REFERENCE_CORES = 2


@dataclass(frozen=True)
class Measured:
    key: str  # "cpu" or "hip gfx1150"
    cpu_seconds: float
    build_bytes: int
    install_bytes: int

    def minutes_on(self, cores: int) -> int:
        return max(1, round(self.cpu_seconds / cores / 60))


@cache
def measured() -> dict[str, Measured]:
    """The measured builds: ``cpu``, ``hip <target>``, and the same with extra CMake
    definitions (``[with."<the -D arguments, as the plan has them>"...]``) as
    ``<key> with <the -D arguments>``."""
    data = read_toml(Path(__file__).with_name("build-costs.toml"))
    found: dict[str, Measured] = {}
    for suffix, table in [("", data)] + [(f" with {args}", t)
                                         for args, t in data.get("with", {}).items()]:
        if "cpu" in table:
            found["cpu" + suffix] = Measured("cpu" + suffix, **table["cpu"])
        for target, fields in table.get("hip", {}).items():
            found[f"hip {target}{suffix}"] = Measured(f"hip {target}{suffix}", **fields)
    return found


def _find(table: dict[str, Measured], key: str, extra: tuple[str, ...]) -> tuple[Measured | None, bool]:
    """The figures of the build ``key`` with the definitions ``extra``, and whether they were
    measured with them (else those of the build without them, when measured)."""
    if extra and (m := table.get(f"{key} with {args_text(extra)}")) is not None:
        return m, True
    return table.get(key), not extra


def estimate(backend: str, gpu_target: str | None, extra: Iterable[str] = ()) -> str:
    """The expected build time and disk space, per target, as one phrase for the plan; with
    extra CMake definitions ``extra``, the figures measured with them, else those measured
    without them, and said so."""
    table = measured()
    extra = tuple(extra)
    targets = [t for t in (gpu_target or "").replace(";", ",").split(",") if t]
    keys = [f"hip {t}" for t in targets] if backend == "hip" else [backend]
    parts = []
    for key in keys:
        label = key.removeprefix("hip ")
        m, exact = _find(table, key, extra)
        if m is None:
            ref = table.get("hip gfx1150")
            parts.append(f"{label} not measured" + (
                f" (gfx1150: about {ref.minutes_on(REFERENCE_CORES)} min on {REFERENCE_CORES} "
                f"cores, {size_text(ref.build_bytes)})" if ref and backend == "hip" else ""))
            continue
        parts.append(f"{label}: about {m.minutes_on(REFERENCE_CORES)} min on "
                     f"{REFERENCE_CORES} cores ({round(m.cpu_seconds / 60)} min of compiler time, "
                     f"less with more cores), {size_text(m.build_bytes)} free while building, "
                     f"{size_text(m.install_bytes)} installed"
                     + ("" if exact else ", as measured without the extra definitions"))
    return "; ".join(parts)


def disk_need(backend: str, gpu_target: str | None, extra: Iterable[str] = ()) -> int | None:
    """The bytes a build needs free (its build folder and its install, as measured, the
    largest measured target standing in for one not measured); None when nothing is measured."""
    table = measured()
    targets = [t for t in (gpu_target or "").replace(";", ",").split(",") if t]
    keys = [f"hip {t}" for t in targets] if backend == "hip" else [backend]
    found = [_find(table, k, tuple(extra))[0] or table.get("hip gfx1150") for k in keys]
    known = [m for m in found if m is not None]
    if not known:
        return None
    return sum(m.build_bytes + m.install_bytes for m in known)
