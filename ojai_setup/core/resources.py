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
    from ojai_setup.core.names import closest, folded

    name = next((e for e in EXAMPLES if folded(e) == folded(name)), name)
    if name not in EXAMPLES:

        near = closest(name, list(EXAMPLES))
        maybe = f"did you mean {' or '.join(near)}? " if near else ""
        raise FileNotFoundError(f"no example machine {name!r}; {maybe}(known: {', '.join(EXAMPLES)})")
    for candidate in (_PKG / "_data" / "examples" / name, _PKG.parent / "tests" / "machines" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"example machine {name!r} is missing from this installation")


@cache
def _example_folders() -> dict[Path, str]:
    """Each bundled example machine's folder, resolved, and its name (looked up once: the fix
    of every doctor finding names the machine)."""
    found: dict[Path, str] = {}
    for name in EXAMPLES:
        try:
            found[example_root(name).resolve()] = name
        except (FileNotFoundError, OSError):
            continue
    return found


def example_name(root: Path) -> str | None:
    """The name of the bundled example machine whose folder ``root`` is, or None."""
    try:
        here = root.resolve()
    except OSError:
        return None
    return _example_folders().get(here)
