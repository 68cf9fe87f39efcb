"""The ``ojai`` commands ojai tells a person to run, whole: with the machine they act on
(``--root DIR``, or ``--example NAME`` for a bundled example) so that a copied command acts
on the machine the person was looking at, and names matched as a person types them."""

from __future__ import annotations

import re
import shlex
from pathlib import Path


def machine_options(root: str | Path) -> list[str]:
    """The options that name the machine ``root`` on ojai's command line: none for this
    computer (``/``), ``--example NAME`` for a bundled example, else ``--root DIR``."""
    from ojai_setup.core.resources import example_name

    if str(root) == "/":
        return []
    name = example_name(Path(root))
    return ["--example", name] if name else ["--root", str(root)]


def ojai_command(root: str | Path, command: str, *words: str) -> str:
    """``ojai COMMAND`` with the machine's options and ``words``, shell-quoted:
    ``ojai verify --root /tmp/box --route gemma-4-12b-mtp``. A word that is a placeholder
    (``NAME``) is left as it is."""
    return shlex.join(["ojai", *command.split(), *machine_options(root), *words])


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
