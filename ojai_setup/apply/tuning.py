"""Writing the machine's tuned route settings (``/etc/ojai/tuned.toml``)."""

from __future__ import annotations

from pathlib import Path

from ojai_setup.core.atomic import write_text
from ojai_setup.core.paths import TUNED_FILE
from ojai_setup.core.root import Root
from ojai_setup.facts.tuning import load_tuning
from ojai_setup.formats.tuning import RouteTuning, Tuning, TuningError, parse_tuning, render_tuning


def save_route_tuning(root: Root, route: str, tuning: RouteTuning) -> Path:
    """Set one route's tuned settings, keeping the others'; written whole, atomically."""
    current = load_tuning(root)
    updated = Tuning(routes={**current.routes, route: tuning})
    text = render_tuning(updated)
    if parse_tuning(text, TUNED_FILE) != updated:  # what is written reads back the same
        raise TuningError("internal error: the tuned settings do not read back as written")
    path = root.resolve(TUNED_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text, mode=0o644)
    return path
