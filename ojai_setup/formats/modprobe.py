"""Read and edit ``options <module> key=value`` lines in ``modprobe.d`` files by key.

Pure functions on text, read the way kmod (libkmod-config.c) reads them:

- a backslash before a line break joins the next line on, with nothing in between; a
  backslash before any other character stands for that character;
- a (joined) line whose first character is ``#`` is a comment;
- ``options MODULE OPTIONS...``: words are separated by spaces and tabs, module names treat
  ``-`` and ``_`` alike, and the options are split the way the kernel splits parameters
  (whitespace outside ``"`` quotes);
- files named ``*.conf`` are read from :data:`MODPROBE_DIRS` in order of their file name
  (:func:`kmod_order`); a name already seen in an earlier directory hides later ones. Every
  ``options`` line for a module is passed on, in that order, so for a key given twice the last
  one wins, and ``ttm.pages_limit=`` on the kernel command line comes after all of them.

A change here reaches ``ttm``/``amdttm`` only when the module is next loaded; when it is loaded
from the initramfs, that has to be rebuilt for the kernel that will boot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from typing import NamedTuple

from ojai_setup.core.errors import InputError
from ojai_setup.formats.kernel_params import SAFE_KEY, SAFE_VALUE, param_key, param_value

MODPROBE_DIRS = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/usr/lib/modprobe.d",
    "/lib/modprobe.d",
)

_BLANK = " \t"


class ModprobeEditError(InputError):
    """A modprobe.d file cannot be edited safely; the message says why and what to do."""


class _Unit(NamedTuple):
    """One character of a joined line and its span in the file's text."""

    char: str
    start: int
    end: int


class ModuleOption(NamedTuple):
    """One ``key=value`` word of an ``options`` line; ``start``/``end`` index the file text."""

    text: str
    start: int
    end: int

    @property
    def key(self) -> str:
        return param_key(self.text)

    @property
    def value(self) -> str | None:
        """The value the kernel sees (quotes stripped); None for a bare flag."""
        return param_value(self.text)


class OptionsLine(NamedTuple):
    """One ``options`` line (possibly continued over several physical lines)."""

    line: int
    module: str  # normalised: "-" -> "_"
    start: int  # offset of the first character of the logical line
    end: int  # offset just after its line break (or the end of the text)
    options: tuple[ModuleOption, ...]


class OptionSetting(NamedTuple):
    """Where a module option is set: which file, which line, what value."""

    path: str
    line: int
    module: str
    key: str
    value: str | None
    text: str


def _norm(name: str) -> str:
    return name.replace("-", "_")


def _logical_lines(text: str) -> list[tuple[int, int, int, list[_Unit]]]:
    """(first line number, start, end, units) for every line as kmod joins them."""
    lines: list[tuple[int, int, int, list[_Unit]]] = []
    i, n, lineno = 0, len(text), 1
    while i < n:
        start, first_line = i, lineno
        units: list[_Unit] = []
        while i < n:
            c = text[i]
            if c == "\n":
                i += 1
                lineno += 1
                break
            if c == "\\":
                if i + 1 < n and text[i + 1] == "\n":
                    i += 2
                    lineno += 1
                    continue
                if i + 1 < n:
                    units.append(_Unit(text[i + 1], i, i + 2))
                i += 2
                continue
            units.append(_Unit(c, i, i + 1))
            i += 1
        lines.append((first_line, start, min(i, n), units))
    return lines


def _split(units: list[_Unit], *, quotes: bool) -> list[tuple[str, int, int]]:
    """Words of a unit list (whitespace separated; ``"`` groups when ``quotes``)."""
    words: list[tuple[str, int, int]] = []
    current: list[_Unit] = []
    in_quote = False
    for u in units:
        if u.char in _BLANK and not in_quote:
            if current:
                words.append(("".join(x.char for x in current), current[0].start, current[-1].end))
                current = []
            continue
        if quotes and u.char == '"':
            in_quote = not in_quote
        current.append(u)
    if current:
        words.append(("".join(x.char for x in current), current[0].start, current[-1].end))
    return words


def parse_modprobe_conf(text: str, source: str = "modprobe.d") -> list[OptionsLine]:
    """Every ``options`` line of one modprobe.d file. ``source`` names it in errors."""
    if "\r" in text:
        line = text.count("\n", 0, text.index("\r")) + 1
        raise ModprobeEditError(
            f"{source}: line {line} ends in CRLF (a carriage return), which kmod would pass on "
            f"as part of an option value. Convert the file to LF line ends (`sed -i 's/\\r$//' "
            f"{source}`) and run ojai again."
        )
    found: list[OptionsLine] = []
    for first_line, start, end, units in _logical_lines(text):
        if not units or units[0].char == "#":
            continue
        head = _split(units, quotes=False)
        if len(head) < 2 or head[0][0] != "options":
            continue
        rest = [u for u in units if u.start >= head[1][2]]
        options = tuple(ModuleOption(t, s, e) for t, s, e in _split(rest, quotes=True))
        found.append(OptionsLine(line=first_line, module=_norm(head[1][0]), start=start,
                                 end=end, options=options))
    return found


def module_option_settings(files: Iterable[tuple[str, str]], module: str,
                           key: str) -> list[OptionSetting]:
    """Every place that sets ``module``'s option ``key``, in the order kmod applies them.

    ``files`` is ``(path, text)`` pairs already in kmod's order (see :func:`kmod_order`); the
    effective value is the last setting's.
    """
    settings: list[OptionSetting] = []
    for path, text in files:
        for entry in parse_modprobe_conf(text, path):
            if entry.module != _norm(module):
                continue
            for opt in entry.options:
                if _norm(opt.key) == _norm(key):
                    settings.append(OptionSetting(path=path, line=entry.line, module=entry.module,
                                                  key=opt.key, value=opt.value, text=opt.text))
    return settings


def kmod_order(paths: Sequence[str]) -> list[str]:
    """The modprobe.d files kmod reads, in the order it reads them.

    ``paths`` are machine paths in any of :data:`MODPROBE_DIRS` (others are ignored). Only
    ``*.conf`` names not starting with ``.`` count; files are read by name, and a name in an
    earlier directory hides the same name in later ones.
    """
    chosen: dict[str, str] = {}
    for directory in MODPROBE_DIRS:
        for path in sorted(paths):
            p = PurePosixPath(path)
            if str(p.parent) == directory and p.suffix == ".conf" and not p.name.startswith("."):
                chosen.setdefault(p.name, path)
    return [chosen[name] for name in sorted(chosen)]


def _check(module: str, key: str, value: str | None) -> None:
    for what, name in (("module", module), ("option", key)):
        if not re.fullmatch(SAFE_KEY, name):
            raise ValueError(f"not a {what} name ojai writes: {name!r}")
    if value is not None and not re.fullmatch(SAFE_VALUE, value):
        raise ValueError(f"not an option value ojai writes: {value!r}")


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    out, last = [], len(text)
    for start, end, new in sorted(edits, reverse=True):
        out.append(text[end:last])
        out.append(new)
        last = start
    out.append(text[:last])
    return "".join(reversed(out))


def _drop_edits(text: str, entry: OptionsLine, drop: set[int],
                replace: dict[int, str]) -> list[tuple[int, int, str]]:
    """Edits that drop/replace options of one line; the whole line goes when none is left."""
    if len(drop) == len(entry.options):
        return [(entry.start, entry.end, "")]
    edits: list[tuple[int, int, str]] = []
    opts = entry.options
    for idx, opt in enumerate(opts):
        if idx in replace:
            edits.append((opt.start, opt.end, replace[idx]))
        elif idx in drop:
            prev_end = opts[idx - 1].end if idx > 0 else None
            if prev_end is not None:
                edits.append((prev_end, opt.end, ""))
            else:
                nxt = next(o for k, o in enumerate(opts) if k > idx and k not in drop)
                edits.append((opt.start, nxt.start, ""))
    return _merge(edits)


def _merge(edits: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Join touching deletions (a run of dropped options next to each other)."""
    merged: list[tuple[int, int, str]] = []
    for start, end, new in sorted(edits):
        if merged and not new and not merged[-1][2] and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]), "")
        else:
            merged.append((start, end, new))
    return merged


def set_module_option(text: str, module: str, key: str, value: str, *,
                      source: str = "modprobe.d") -> str:
    """Set ``key=value`` for ``module``: replace the first occurrence, drop the others (and
    any ``options`` line left empty), or add it to the module's first ``options`` line, or
    append ``options MODULE key=value`` when the file has none. Every other byte is kept.
    """
    _check(module, key, value)
    entries = [e for e in parse_modprobe_conf(text, source) if e.module == _norm(module)]
    wanted = f"{key}={value}"
    hits = [(e, idx) for e in entries for idx, o in enumerate(e.options)
            if _norm(o.key) == _norm(key)]
    if not hits:
        if entries and entries[0].options:
            return _apply(text, [(entries[0].options[-1].end, entries[0].options[-1].end,
                                  " " + wanted)])
        sep = "" if not text or text.endswith("\n") else "\n"
        return text + sep + f"options {module} {wanted}\n"
    (first_entry, first_idx), rest = hits[0], hits[1:]
    if not rest and first_entry.options[first_idx].text == wanted:
        return text
    edits: list[tuple[int, int, str]] = []
    for entry in entries:
        drop = {idx for e, idx in rest if e is entry}
        replace = {first_idx: wanted} if entry is first_entry else {}
        if drop or replace:
            edits.extend(_drop_edits(text, entry, drop, replace))
    return _apply(text, edits)


def remove_module_option(text: str, module: str, key: str, *,
                         source: str = "modprobe.d") -> str:
    """Remove every ``key`` option of ``module``; an ``options`` line left empty goes too."""
    _check(module, key, None)
    entries = [e for e in parse_modprobe_conf(text, source) if e.module == _norm(module)]
    edits: list[tuple[int, int, str]] = []
    for entry in entries:
        drop = {idx for idx, o in enumerate(entry.options) if _norm(o.key) == _norm(key)}
        if drop:
            edits.extend(_drop_edits(text, entry, drop, {}))
    return _apply(text, edits) if edits else text
