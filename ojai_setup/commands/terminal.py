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
from contextlib import contextmanager
from functools import cached_property
from typing import Any, ClassVar, Protocol

STYLES = {"pass": "green", "info": "cyan", "warn": "yellow", "fail": "bold red",
          "satisfied": "green", "change": "yellow", "blocked": "bold red",
          "waiting": "yellow"}
SYMBOLS = {"pass": "ok", "info": "info", "warn": "warn", "fail": "FAIL",
           "satisfied": "ok", "change": "change", "blocked": "BLOCKED",
           "waiting": "waits"}


class Report(Protocol):
    """What a command found or did, in both its renderings: :meth:`to_json` is the document
    ``--json`` prints (without its ``schema``, which :meth:`Terminal.show` puts first) and
    :meth:`render` prints it for a person through the terminal it is given."""

    #: the JSON document's name and version, ``ojai.<command>/<version>``
    schema: ClassVar[str]

    def to_json(self) -> dict: ...

    def render(self, term: Terminal) -> None: ...


def wrap(text, first: int, rest: int) -> list:
    """``text`` (rich ``Text``) cut at spaces into lines of at most ``first`` cells, then
    ``rest``; a word longer than a whole line (a long URL, a path, a command's argument) is
    never cut: it gets a line of its own, whole, and runs past the edge, so that it can be
    copied; a command in backticks counts as one word. A newline in ``text`` always ends a
    line."""
    import re

    plain, lines, width = text.plain, [], first
    for para in re.finditer(r"[^\n]*", plain):
        start = end = None
        # a command in backticks is one word: it is never cut, so it can be copied whole
        for word in re.finditer(r"`[^`\n]*`\S*|\S+", para.group()):
            s, e = para.start() + word.start(), para.start() + word.end()
            if start is not None and e - start <= width:
                end = e
                continue
            if start is not None:
                lines.append(text[start:end])
                width = rest
            if e - s > width:  # longer than a line: a line of its own, whole
                lines.append(text[s:e])
                start = None
                width = rest
                continue
            start, end = s, e
        if start is not None:
            lines.append(text[start:end])
            width = rest
    return lines


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

    def network_status(self):
        """How a request to the network is said while it waits: a spinner on the status line of
        a terminal (gone once it is answered); one line on stderr when it is a pipe or a log
        file (``ojai: asking HOST for WHAT ...``, so a log shows where a run waited); None
        under ``--json``."""
        if self.json_mode:
            return None
        if self.err_console.is_terminal:
            return lambda text: self.err_console.status(text, spinner="line")
        return self._log_request

    @contextmanager
    def _log_request(self, text: str):
        self._stderr.write(f"ojai: {text}\n")
        self._stderr.flush()
        yield

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

    def entry(self, label: Any, text: Any = "", *, indent: int = 0, hang: int | None = None,
              markup: bool = False) -> None:
        """``label`` (markup) then ``text`` from column ``indent``, wrapped at the terminal's
        width (``$COLUMNS`` or 80 in a pipe) so that every line after the first starts at
        column ``hang`` (default: where ``text`` starts): a hanging indent that keeps a long
        step or finding under its own head, in colour or not. ``text`` is plain unless
        ``markup``. A word longer than a line (a URL, a long path) is never cut: it gets a
        line of its own, whole, to be copied."""
        from rich.text import Text

        head = Text.from_markup(label) if isinstance(label, str) else label
        body = (Text.from_markup(text) if markup else Text(text)) if isinstance(text, str) else text
        start = indent + head.cell_len
        hang = start if hang is None else hang
        width = self.console.width
        pieces = wrap(body, max(10, width - start), max(10, width - hang)) or [Text()]
        lines = [Text(" " * indent).append(head).append(pieces[0])]
        lines.extend(Text(" " * hang).append(piece) for piece in pieces[1:])
        for line in lines:
            line.rstrip()
            self.console.print(line, soft_wrap=True, crop=False)

    def error(self, message: str) -> None:
        """``error: MESSAGE`` on stderr; on a terminal wrapped at its width by :func:`wrap`, so
        that a command in backticks, a path or a URL is never cut, not even between its words:
        it moves to a line of its own, whole, to be copied."""
        from rich.text import Text

        console = self.err_console
        if not console.is_terminal:
            console.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False)
            return
        head = Text.assemble(("error:", "bold red"), " ")
        for n, part in enumerate(message.split("\n")):
            body = part.lstrip(" ")
            lead = " " * (len(part) - len(body))  # an indented line (a command) keeps it
            first = head.cell_len if n == 0 else 0
            pieces = wrap(Text(body), max(10, console.width - first - len(lead)),
                          max(10, console.width - len(lead))) or [Text()]
            for k, piece in enumerate(pieces):
                line = (head.copy() if n == 0 and k == 0 else Text()).append(lead).append(piece)
                line.rstrip()
                console.print(line, soft_wrap=True, crop=False, highlight=False)

    def note(self, message: str) -> None:
        self.err_console.print(message, markup=False, highlight=False)

    def styled(self, status: str) -> str:
        return f"[{STYLES.get(status, '')}]{SYMBOLS.get(status, status)}[/]"

    def confirm(self, question: str) -> bool:
        from rich.prompt import Confirm

        try:
            return Confirm.ask(question, console=self.console, default=False)
        except KeyboardInterrupt:
            self.console.print()  # what is said next starts on a line of its own, not after ^C
            raise
        except EOFError:  # Ctrl-D, or the input ended: no
            self.console.print()
            return False

    def progress(self):
        """A progress reporter for long work (downloads, builds): rich bars, or silence."""
        from ojai_setup.core.progress import NullProgress, RichProgress

        if self.json_mode:
            return NullProgress()
        return RichProgress(self.err_console)


def reviewed(term: Terminal, question: str, *, unattended: str, declined: str) -> bool:
    """Whether the person at the terminal said yes to ``question``; without a terminal,
    ``unattended`` is the error, and ``declined`` the note when they say no."""
    if not term.interactive:
        term.error(unattended)
        return False
    if not term.confirm(question):
        term.note(declined)
        return False
    return True
