"""Names matched as a person types them: case and separators ignored, the closest offered.
Their own module, so that both :mod:`ojai_setup.core.commandline` and
:mod:`ojai_setup.core.resources` use them without importing each other."""

from __future__ import annotations

import re


def folded(name: str) -> str:
    """``name`` as matched: case and separators (``-``, ``_``, ``.``, space) ignored."""
    return re.sub(r"[-_.\s]+", "", name).lower()


def closest(name: str, known: list[str], n: int = 3) -> list[str]:
    """The names of ``known`` closest to ``name`` (case and separators ignored), best first."""
    import difflib

    by_fold: dict[str, str] = {}
    for k in known:
        by_fold.setdefault(folded(k), k)
    want = folded(name)
    # a name that holds what was typed, or is held by it, first (``gemma426b`` is the start
    # of ``gemma426ba4b``); then the closest by difflib's ratio
    near = sorted((f for f in by_fold if want and (want in f or f in want)),
                  key=lambda f: (abs(len(f) - len(want)), f))
    near += [f for f in difflib.get_close_matches(want, list(by_fold), n=n, cutoff=0.6)
             if f not in near]
    return list(dict.fromkeys(by_fold[f] for f in near))[:n]


def did_you_mean(name: str, known: list[str]) -> str:
    """``; did you mean a or b?`` for the names closest to ``name``, or ``""``."""
    near = closest(name, known)
    return f"; did you mean {' or '.join(near)}?" if near else ""
