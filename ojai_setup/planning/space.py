"""Whether what a plan downloads, unpacks and builds fits on disk, all of it together.

Each step says what it stores where (:attr:`StepResult.space`). Steps whose folders are on
one filesystem share its free space, so their needs are added up in plan order, with a margin
(:func:`margin`): what the estimates miss, and room for the rest of the system (a disk left
full stops logging, package updates and the servers themselves). The first step that does not
fit is blocked in the dry run, before anything is fetched, with what it needs, what the earlier
steps on that filesystem take and what is free; later steps there are counted without it.
"""

from __future__ import annotations

from collections.abc import Callable

from ojai_setup.core.units import MIB, size_text
from ojai_setup.facts.disk import Filesystem
from ojai_setup.planning.result import SpaceNeed, StepResult

#: the share of the needed bytes added for what the estimates miss
MARGIN_FRACTION = 0.05
#: and room for the rest of the system: a hundredth of the filesystem, at most this
SYSTEM_ROOM_MAX = 256 * MIB


def margin(need: int, filesystem_size: int) -> int:
    """The bytes kept free beyond ``need`` on a filesystem of ``filesystem_size`` bytes."""
    return int(need * MARGIN_FRACTION) + min(SYSTEM_ROOM_MAX, filesystem_size // 100)


#: the filesystem a machine folder is on (:func:`ojai_setup.facts.disk.filesystem` of it under
#: the root); an OSError when it cannot tell
Lookup = Callable[[str], Filesystem]


class DiskLedger:
    """The space the steps planned so far take, by filesystem; :meth:`admit` each result in
    plan order."""

    def __init__(self, lookup: Lookup) -> None:
        self._lookup = lookup
        self._taken: dict[int, list[tuple[str, SpaceNeed]]] = {}

    def admit(self, result: StepResult) -> StepResult:
        """``result``, counted; or, when its space needs do not fit beside what the earlier
        steps take, that step blocked with the reason (and nothing of it counted)."""
        if result.status != "change" or not result.space:
            return result
        adds: list[tuple[int, SpaceNeed]] = []
        for need in result.space:
            try:
                fs = self._lookup(need.folder)
            except OSError as exc:
                return StepResult.blocked(result.step, f"cannot tell the free space in "
                                          f"{need.folder}: {exc.strerror or exc}",
                                          reads=result.reads)
            earlier = self._taken.get(fs.device, []) + [(result.step, n) for d, n in adds
                                                        if d == fs.device]
            total = sum(n.bytes for _, n in earlier) + need.bytes
            keep = margin(total, fs.size)
            if total + keep > fs.free:
                return StepResult.blocked(result.step,
                                          _sentence(need, earlier, total, keep, fs.free),
                                          reads=result.reads)
            adds.append((fs.device, need))
        for device, need in adds:
            self._taken.setdefault(device, []).append((result.step, need))
        return result


def _sentence(need: SpaceNeed, earlier: list[tuple[str, SpaceNeed]], total: int, keep: int,
              free: int) -> str:
    said = f"not enough disk space in {need.folder} for {need.what}: "
    said += (need.detail or f"it needs {size_text(need.bytes)}")
    if earlier:
        said += ("; the filesystem also takes " + ", ".join(
            f"{size_text(n.bytes)} for {n.what} ({step} step)" for step, n in earlier)
            + f", {size_text(total)} in all")
    said += (f"; with a margin of {size_text(keep)} (a twentieth more, and room for the "
             f"system) that is {size_text(total + keep)}, and {size_text(free)} is free; "
             "free some space")
    return said + (f", {need.fix}" if need.fix else "") + " and plan again"
