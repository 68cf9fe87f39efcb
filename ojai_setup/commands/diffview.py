"""Unified diffs for people: every line whole, the changed words marked.

Lines are never cropped or folded by the renderer: each diff line is printed as one line and the
terminal wraps what is wider than it, so a long ``GRUB_CMDLINE_LINUX_DEFAULT`` stays complete
at any width, piped or not. With colour, removed and added lines are red and green, and within
a removed/added pair the words that differ are shown in reverse video.
"""

from __future__ import annotations

import difflib
import re

from rich.text import Text

_WORDS = r"\s+|[^\s]+"

REMOVED, ADDED, HUNK, HEADER = "red", "green", "cyan", "bold"
CHANGED = "reverse"


def _pair(old: str, new: str) -> tuple[Text, Text]:
    """A removed and an added line with the words that differ between them marked."""
    a, b = re.findall(_WORDS, old[1:]), re.findall(_WORDS, new[1:])
    left, right = Text("-", style=REMOVED), Text("+", style=ADDED)
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        same = op == "equal"
        left.append("".join(a[i1:i2]), style=REMOVED if same else f"{REMOVED} {CHANGED}")
        right.append("".join(b[j1:j2]), style=ADDED if same else f"{ADDED} {CHANGED}")
    return left, right


def diff_lines(diff: str) -> list[Text]:
    """The lines of a unified diff as styled text, changed words marked in -/+ pairs."""
    lines = diff.splitlines()
    out: list[Text] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(("---", "+++")):
            out.append(Text(line, style=HEADER))
        elif line.startswith("@@"):
            out.append(Text(line, style=HUNK))
        elif line.startswith("-"):
            # a run of removals followed by as many additions: pair them up word by word
            j = i
            while j < len(lines) and lines[j].startswith("-") and not lines[j].startswith("---"):
                j += 1
            k = j
            while k < len(lines) and lines[k].startswith("+") and not lines[k].startswith("+++"):
                k += 1
            removed, added = lines[i:j], lines[j:k]
            if len(removed) == len(added):
                pairs = [_pair(o, n) for o, n in zip(removed, added, strict=True)]
                out.extend(p[0] for p in pairs)
                out.extend(p[1] for p in pairs)
            else:
                out.extend(Text(x, style=REMOVED) for x in removed)
                out.extend(Text(x, style=ADDED) for x in added)
            i = k
            continue
        elif line.startswith("+"):
            out.append(Text(line, style=ADDED))
        else:
            out.append(Text(line))
        i += 1
    return out
