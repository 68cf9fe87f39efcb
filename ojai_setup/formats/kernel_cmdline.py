"""Kernel parameters in plain command line text, read and edited by key.

The boot paths other than GRUB's defaults file keep the command line as plain text:

- ``/etc/kernel/cmdline``, which ``kernel-install`` puts into the loader entry or the UKI it
  builds (its lines joined with blanks; systemd >= 256 drops lines that start with ``#``,
  "kernel-install(uki): filter comments from cmdline", systemd's
  ``src/kernel-install/test-kernel-install.sh``);
- the ``options`` line(s) of a Boot Loader Specification entry (``loader/entries/*.conf``);
- the quoted value of a limine-entry-tool assignment (``KERNEL_CMDLINE[default]+="..."``);
- kernelstub's ``kernel_options`` list.

Everything here is pure: text in, text out. Parameters are split the way the kernel splits
``/proc/cmdline`` (:func:`ojai_setup.formats.kernel_params.parse_cmdline`), keys compared the way the
kernel compares them (``-`` equals ``_``), and an edit touches only the bytes of the
parameters it changes, so everybody else's parameters stay exactly as they were.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from ojai_setup.core.errors import InputError
from ojai_setup.formats.kernel_params import param_key, same_key

#: per-boot parameters a boot loader adds itself: never copied into a configuration file
#: (kernel-install's 90-loaderentry.install skips the same two when it falls back to
#: /proc/cmdline)
PER_BOOT = ("BOOT_IMAGE", "initrd")

_SAFE = re.compile(r"[A-Za-z0-9_.,:/+@%=-]+")


class CmdlineFormatError(InputError):
    """A command line text ojai will not edit (what is wrong, and how to go on)."""


class Param(NamedTuple):
    text: str
    start: int  # offset in the text
    end: int


def _params(text: str, start: int = 0, end: int | None = None) -> list[Param]:
    """The parameters of ``text[start:end]`` with their offsets in ``text``."""
    end = len(text) if end is None else end
    out: list[Param] = []
    i = start
    while i < end:
        if text[i].isspace():
            i += 1
            continue
        j, quoted = i, False
        while j < end and (quoted or not text[j].isspace()):
            if text[j] == '"':
                quoted = not quoted
            j += 1
        if quoted:
            raise CmdlineFormatError(f"a quote opened at offset {i} is never closed")
        out.append(Param(text[i:j], i, j))
        i = j
    return out


def _lines(text: str, comments: bool) -> list[tuple[int, int]]:
    """(start, end) of each line that carries parameters."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if not (comments and body.lstrip().startswith("#")):
            spans.append((pos, pos + len(body)))
        pos += len(line)
    return spans


def params_of(text: str, *, comments: bool = True) -> list[Param]:
    """Every parameter of a command line text (``#`` lines skipped when ``comments``)."""
    if "\r" in text:
        raise CmdlineFormatError("it has CRLF line ends (the kernel would get a stray "
                                 "carriage return); convert it to LF line ends")
    return [p for a, b in _lines(text, comments) for p in _params(text, a, b)]


def tokens_of(text: str, *, comments: bool = True) -> list[str]:
    """The parameters the kernel gets from the text, in order."""
    return [p.text for p in params_of(text, comments=comments)]


def without_per_boot(tokens: Sequence[str]) -> list[str]:
    """``tokens`` less what a boot loader adds on its own (``BOOT_IMAGE=``, ``initrd=``)."""
    return [t for t in tokens if not any(same_key(param_key(t), k) for k in PER_BOOT)]


def _matches(token: str, keys: Sequence[str]) -> bool:
    return any(same_key(param_key(token), k) for k in keys)


def edit_params(text: str, key: str, value: str, drop_keys: Sequence[str] = (), *,
                comments: bool = True, source: str = "the command line") -> str:
    """``text`` with exactly one ``key=value`` and none of ``drop_keys``.

    The last existing ``key`` parameter (the one the kernel honours) is rewritten in place,
    earlier ones and every ``drop_keys`` parameter are removed with the blank before them;
    without one, ``key=value`` is appended to the last line that carries parameters (or to
    the text). Nothing else changes. Raises :class:`CmdlineFormatError` for text it cannot
    edit safely.
    """
    if "\r" in text:
        raise CmdlineFormatError(f"{source}: it has CRLF line ends (the kernel would get a "
                                 "stray carriage return); convert it to LF line ends")
    out = edit_regions(text, _lines(text, comments), key, value, drop_keys, source=source,
                       empty=f"{key}={value}\n")
    check_edit(tokens_of(out, comments=comments), key, value, drop_keys, source=source)
    return out


def edit_regions(text: str, regions: Sequence[tuple[int, int]], key: str, value: str,
                 drop_keys: Sequence[str] = (), *, source: str, empty: str | None = None) -> str:
    """:func:`edit_params` on the parts ``text[start:end]`` that carry parameters (an entry's
    ``options`` values, a quoted shell value); the new parameter goes at the end of the last
    region. ``empty``: the whole text to return when there is no region at all."""
    wanted = f"{key}={value}"
    if not _SAFE.fullmatch(wanted):
        raise CmdlineFormatError(f"{source}: {wanted!r} would need quoting")
    try:
        params = [p for a, b in regions for p in _params(text, a, b)]
    except CmdlineFormatError as exc:
        raise CmdlineFormatError(f"{source}: {exc}; fix it and run ojai again") from None
    hits = [p for p in params if same_key(param_key(p.text), key)]
    keep = hits[-1] if hits else None
    remove = [p for p in params if (p in hits and p is not keep) or _matches(p.text, drop_keys)]
    starts = {a for a, _ in regions}
    changes: list[tuple[int, int, str]] = []
    if keep is not None and keep.text != wanted:
        changes.append((keep.start, keep.end, wanted))
    for p in remove:
        start = p.start
        while start > 0 and start not in starts and text[start - 1] in " \t":
            start -= 1
        if start in starts:  # first in its region: take the blank after it instead
            end = p.end
            while end < len(text) and text[end] in " \t":
                end += 1
            changes.append((p.start, end, ""))
        else:
            changes.append((start, p.end, ""))
    if keep is None:
        carrying = [r for r in regions if text[r[0]:r[1]].strip()]
        if carrying:
            end = carrying[-1][1]
            while end > carrying[-1][0] and text[end - 1] in " \t":
                end -= 1
            changes.append((end, end, " " + wanted))
        elif regions:
            end = regions[-1][1]
            changes.append((end, end, wanted))
        elif empty is not None and not text.strip():
            return empty
        else:
            raise CmdlineFormatError(f"{source}: has no place for kernel parameters; add "
                                     f"{wanted} yourself")
    out = text
    for start, end, new in sorted(changes, key=lambda c: (c[0], c[1]), reverse=True):
        out = out[:start] + new + out[end:]
    return out


def check_edit(tokens: Sequence[str], key: str, value: str, drop_keys: Sequence[str],
               *, source: str) -> None:
    """Raise unless ``tokens`` hold exactly one ``key=value`` and none of ``drop_keys``."""
    wanted = f"{key}={value}"
    if [t for t in tokens if same_key(param_key(t), key)] != [wanted] or any(
            _matches(t, drop_keys) for t in tokens):
        raise CmdlineFormatError(f"{source}: ojai could not plan an edit that leaves exactly "
                                 f"one {wanted}; edit it yourself and run ojai again")


def expected_after(tokens: Sequence[str], key: str, value: str,
                   drop_keys: Sequence[str] = ()) -> list[str]:
    """The parameters an edit by :func:`edit_params` leaves (for checking its result)."""
    wanted = f"{key}={value}"
    hits = [i for i, t in enumerate(tokens) if same_key(param_key(t), key)]
    out: list[str] = []
    for i, t in enumerate(tokens):
        if hits and i == hits[-1]:
            out.append(wanted)
        elif same_key(param_key(t), key) or _matches(t, drop_keys):
            continue
        else:
            out.append(t)
    if not hits:
        out.append(wanted)
    return out
