"""The ``ojai`` commands ojai tells a person to run, whole: with the machine they act on
(``--root DIR``, or ``--example NAME`` for a bundled example) so that a copied command acts
on the machine the person was looking at (names matched as a person types them: core.names)."""

from __future__ import annotations

import shlex
from pathlib import Path

from ojai_setup.core.names import closest, did_you_mean, folded  # noqa: F401 (their home before)


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
