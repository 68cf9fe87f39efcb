"""The machine's tuned route settings (``ojai tune``), read through the root."""

from __future__ import annotations

from ojai_setup.core.paths import TUNED_FILE
from ojai_setup.core.root import Root
from ojai_setup.formats.tuning import Tuning, TuningError, parse_tuning


def load_tuning(root: Root) -> Tuning:
    """``/etc/ojai/tuned.toml`` of the machine; empty when there is none."""
    if not root.exists(TUNED_FILE):
        return Tuning()
    source = str(root.resolve(TUNED_FILE))
    try:
        text = root.read_text(TUNED_FILE)
    except (OSError, UnicodeDecodeError) as exc:
        raise TuningError(f"{source}: cannot read: {exc}") from None
    return parse_tuning(text, source)
