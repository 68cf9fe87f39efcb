"""The environment doctor runs in: its own module, so that every reader of the machine
(:mod:`ojai_setup.facts.collect`, :mod:`ojai_setup.facts.lemonade`) can ask for it without
importing another."""

from __future__ import annotations

import os

from ojai_setup.core.paths import ENVIRON_CAPTURE
from ojai_setup.core.root import Root
from ojai_setup.formats import machine as parsers


def environment(root: Root) -> dict[str, str]:
    """The environment doctor runs in (on a captured machine: the captured one)."""
    if root.is_host:
        return dict(os.environ)
    try:
        text = root.read_text(ENVIRON_CAPTURE)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return parsers.parse_environ(text) if text else {}


def environment_unknown(root: Root) -> str | None:
    """Why the environment cannot be known (a capture without a record of it), or None."""
    if root.is_host or root.exists(ENVIRON_CAPTURE):
        return None
    return f"this capture has no record of the environment ({ENVIRON_CAPTURE})"
