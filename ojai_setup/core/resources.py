"""Where the data shipped with ojai lives: ``templates/`` and ``checks/``.

From a wheel they are inside the package (``ojai_setup/_data/<name>``); from a source checkout
they are the top-level folders of the repository.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent


@cache
def data_dir(name: str) -> Path:
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"ojai's {name}/ folder is missing from this installation")


#: bundled example machines (test machines shipped in the wheel for newcomers)
EXAMPLES = ("ojai-fresh", "ojai-applied", "ojai-rebooted", "strix-halo-dkms")


def example_root(name: str) -> Path:
    """The root directory of a bundled example machine."""
    if name not in EXAMPLES:
        raise FileNotFoundError(f"no example machine {name!r} (known: {', '.join(EXAMPLES)})")
    for candidate in (_PKG / "_data" / "examples" / name, _PKG.parent / "tests" / "machines" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"example machine {name!r} is missing from this installation")
