"""The kernel parameters a NixOS configuration gives: the quoted strings of every
``kernelParams = [ ... ]`` list (``boot.kernelParams`` or ``kernelParams`` inside ``boot = {``),
``++`` lists included. A reading, not an evaluation: parameters computed by Nix expressions are
not seen, so an absent value says "not found here", never "not configured"."""

from __future__ import annotations

import re

_LIST = re.compile(r"kernelParams\s*=\s*((?:\[[^\]]*\]\s*(?:\+\+\s*)?)+)", re.S)
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_COMMENT = re.compile(r"#[^\n]*|/\*.*?\*/", re.S)


def kernel_params(text: str) -> list[str]:
    """Every kernel parameter the literal ``kernelParams`` lists of ``text`` hold, in order
    (each quoted string split at spaces, as the kernel reads the joined command line)."""
    text = _COMMENT.sub("", text)
    out: list[str] = []
    for lists in _LIST.finditer(text):
        for string in _STRING.finditer(lists.group(1)):
            out.extend(string.group(1).split())
    return out
