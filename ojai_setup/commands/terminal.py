"""All output goes through one :class:`Terminal`: rich for people, JSON for programs.

A command builds a :class:`Report` (what it found or did) and hands it to
:meth:`Terminal.show`, which prints the report's JSON document under ``--json`` and its rich
rendering otherwise; commands decide, reports render. Rich is imported only when something is
printed for a person, which keeps ``--json`` fast.
``NO_COLOR``, ``TERM=dumb`` and output that is not a terminal turn colour off.
"""

from __future__ import annotations

import json
import os
import sys
from functools import cached_property
from typing import Any, ClassVar, Protocol

STYLES = {"pass": "green", "info": "cyan", "warn": "yellow", "fail": "bold red",
          "satisfied": "green", "change": "yellow", "blocked": "bold red"}
SYMBOLS = {"pass": "ok", "info": "info", "warn": "warn", "fail": "FAIL",
           "satisfied": "ok", "change": "change", "blocked": "BLOCKED"}


class Report(Protocol):
    """What a command found or did, in both its renderings: :meth:`to_json` is the document
    ``--json`` prints (without its ``schema``, which :meth:`Terminal.show` puts first) and
    :meth:`render` prints it for a person through the terminal it is given."""

    #: the JSON document's name and version, ``ojai.<command>/<version>``
    schema: ClassVar[str]

    def to_json(self) -> dict: ...

    def render(self, term: Terminal) -> None: ...


class Terminal:
    def __init__(self, *, json_mode: bool = False, stdout=None, stderr=None) -> None:
        self.json_mode = json_mode
        self._stdout = stdout or sys.stdout
        self._stderr = stderr or sys.stderr

    @property
    def color(self) -> bool:
        if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
            return False
        return bool(getattr(self._stdout, "isatty", lambda: False)())

    @property
    def interactive_out(self) -> bool:
        return bool(getattr(self._stdout, "isatty", lambda: False)())

    @property
    def interactive(self) -> bool:
        return bool(getattr(sys.stdin, "isatty", lambda: False)()) and \
            bool(getattr(self._stdout, "isatty", lambda: False)())

    @cached_property
    def console(self):
        from rich.console import Console

        # the width is the terminal's (or $COLUMNS); output that is not a terminal is never
        # wrapped by ojai, so a pipe or a file gets every line whole
        return Console(file=self._stdout, no_color=not self.color, highlight=False,
                       force_terminal=self.color or None, emoji=False,
                       soft_wrap=not self.interactive_out)

    @cached_property
    def err_console(self):
        from rich.console import Console

        return Console(file=self._stderr, no_color=not self.color, highlight=False, emoji=False,
                       soft_wrap=not self.color)

    def show(self, report: Report) -> None:
        """The one way a command's result is printed: ``report``'s JSON document (``schema``
        first) under ``--json``, else its rich rendering."""
        if self.json_mode:
            self.emit_json(report.to_json(), schema=report.schema)
        else:
            report.render(self)

    # -- primitives --------------------------------------------------------------------------
    def emit_json(self, data: Any, schema: str | None = None) -> None:
        """Print ``data`` as JSON; ``schema`` (``ojai.<command>/<version>``) comes first."""
        if schema is not None:
            data = {"schema": schema, **data}
        self._stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console.print(*objects, **kwargs)

    def error(self, message: str) -> None:
        self.err_console.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)

    def note(self, message: str) -> None:
        self.err_console.print(message, markup=False, highlight=False)

    def styled(self, status: str) -> str:
        return f"[{STYLES.get(status, '')}]{SYMBOLS.get(status, status)}[/]"

    def confirm(self, question: str) -> bool:
        from rich.prompt import Confirm

        return Confirm.ask(question, console=self.console, default=False)

    def progress(self):
        """A progress reporter for long work (downloads, builds): rich bars, or silence."""
        from ojai_setup.core.progress import NullProgress, RichProgress

        if self.json_mode:
            return NullProgress()
        return RichProgress(self.err_console)
