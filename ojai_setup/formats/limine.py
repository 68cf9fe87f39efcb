"""limine-entry-tool's command line settings, read from text (pure).

CachyOS boots Limine, whose entries ``limine-update`` (limine-entry-tool) writes into
``limine.conf``. The command line of the default entries is ``KERNEL_CMDLINE[default]``,
assigned in bash syntax in ``/etc/limine-entry-tool.conf``, the drop-ins
``/etc/limine-entry-tool.d/*.conf`` (in glob order) and last ``/etc/default/limine``, which
overrides them. From the header limine-entry-tool writes into ``/etc/default/limine``:
``+=`` appends to the command line of the same key, ``=`` replaces it; when no file sets it,
the tool takes ``/etc/kernel/cmdline`` or ``/proc/cmdline`` instead, and ignores both as soon
as any ``+=`` is there. So a drop-in that only appends must never be the only setting: it
would boot with nothing but its own parameters.

Only literal values are understood: ``KERNEL_CMDLINE[default]+="..."`` or ``'...'`` on one
line, without ``$``, backquotes or backslashes inside; anything else is refused with
:class:`~ojai_setup.formats.kernel_cmdline.CmdlineFormatError`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from ojai_setup.formats.kernel_cmdline import CmdlineFormatError, _params

ENTRY_TOOL_CONF = "/etc/limine-entry-tool.conf"
DROPIN_DIR = "/etc/limine-entry-tool.d"
DEFAULT_FILE = "/etc/default/limine"
#: ojai's own drop-in (sorted after the usual NN- names)
OJAI_DROPIN = f"{DROPIN_DIR}/99-ojai.conf"

_LINE = re.compile(r"""^[ \t]*(?:export[ \t]+)?KERNEL_CMDLINE\[(?P<key>[^\]]*)\][ \t]*(?P<op>\+?=)""")


class Assignment(NamedTuple):
    path: str
    key: str  # "default", "fallback", a kernel name
    append: bool
    start: int  # the quoted value's inside, as offsets in the file's text
    end: int


def assignments(text: str, source: str) -> list[Assignment]:
    """Every ``KERNEL_CMDLINE[...]`` assignment of one file, in order."""
    out: list[Assignment] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        m = _LINE.match(body)
        if m:
            rest = body[m.end():]
            quote = rest[:1]
            close = rest.find(quote, 1) if quote in ("'", '"') else -1
            inner = rest[1:close] if close > 0 else ""
            tail = rest[close + 1:].strip() if close > 0 else rest
            if (close < 0 or (tail and not tail.startswith("#"))
                    or (quote == '"' and re.search(r"[$`\\]", inner))):
                raise CmdlineFormatError(
                    f"{source}: line {text.count(chr(10), 0, pos) + 1} sets KERNEL_CMDLINE with "
                    "something other than one quoted literal; ojai cannot follow it. Write the "
                    "parameters as KERNEL_CMDLINE[default]+=\"...\" and run ojai again")
            start = pos + m.end() + 1
            out.append(Assignment(source, m["key"].strip("\"'"), m["op"] == "+=", start,
                                  start + len(inner)))
        pos += len(line)
    return out


class Token(NamedTuple):
    text: str
    path: str
    start: int
    end: int


def default_cmdline(files: Sequence[tuple[str, str]]) -> tuple[list[Token], bool]:
    """The command line of the default entries after reading ``files`` in order, each
    parameter with where it is written, and whether any file sets it at all."""
    tokens: list[Token] = []
    seen = False
    for path, text in files:
        for a in assignments(text, path):
            if a.key != "default":
                continue
            seen = True
            new = [Token(p.text, path, p.start, p.end) for p in _params(text, a.start, a.end)]
            tokens = tokens + new if a.append else new
    return tokens, seen
