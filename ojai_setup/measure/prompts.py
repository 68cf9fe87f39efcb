"""The prompts of a campaign: a built-in set of real tasks, or the user's own file.

A user file, for ``ojai bench`` and ``ojai tune`` alike, is either JSON lines (a ``.jsonl``
file, ``{"id": "...", "prompt": "..."}`` per line; ``id`` is optional) or plain text with one
prompt per paragraph: prompts separated by blank lines, so a prompt may hold several lines
(code, a list). ``ojai tune`` once read one prompt a line: a text file of several lines and no
blank line is still read that way by tune, with a line saying so (:func:`old_format_note`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ojai_setup.core.errors import InputError

__all__ = ["BUILTIN", "LONG_PROMPT", "Prompt", "PromptFileError", "load_prompts"]


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str


class PromptFileError(InputError):
    """A prompt file that cannot be used; the text names the file and the line."""


BUILTIN: tuple[Prompt, ...] = (
    Prompt("lru-cache", "Write a Python class LRUCache(capacity) with get(key) and put(key, value) "
           "methods that run in O(1) time, without functools. Then write pytest tests that cover "
           "eviction order, updating an existing key and a capacity of one."),
    Prompt("sql-report", "Given tables orders(id, customer_id, total, created_at) and "
           "customers(id, name, country), write one SQL query that returns, for each country, the "
           "number of customers who placed at least two orders in 2025 and their average order "
           "total, sorted by that average descending. Explain each clause briefly."),
    Prompt("bash-backup", "Write a bash script that backs up a directory given as its first "
           "argument into a timestamped .tar.zst under /var/backups, keeps only the seven newest "
           "archives, exits non-zero with a clear message on any error, and is safe with file "
           "names containing spaces. Use set -euo pipefail."),
    Prompt("explain-tcp", "Explain to a junior developer why a TCP connection can stay in "
           "TIME_WAIT after it closes, what problem that state prevents, and when tuning it is a "
           "bad idea. Use one short example with two hosts and concrete port numbers."),
    Prompt("refactor-js", "Refactor this JavaScript into small pure functions with clear names "
           "and add JSDoc comments:\n\nfunction p(d){let r=[];for(let i=0;i<d.length;i++){if(d[i]"
           ".a>10&&d[i].b!=null){r.push({n:d[i].n.trim().toLowerCase(),v:d[i].a*2+d[i].b})}}r.sort("
           "(x,y)=>y.v-x.v);return r.slice(0,5)}"),
)

#: the long generation: a task that keeps a model writing for thousands of tokens
LONG_PROMPT = Prompt(
    "long-design-doc",
    "Write a complete design document for a small key-value store with a write-ahead log, "
    "snapshots, compaction and a TCP protocol. Include the goals, the file formats byte by byte, "
    "the recovery procedure, the concurrency model, the full Python source code of every module, "
    "and a test plan with the code of the tests.",
)


def load_prompts(path: Path, *, lines: bool = False) -> tuple[Prompt, ...]:
    """The prompts of ``path``: JSON lines (``.jsonl``/``.json``) or text, one prompt per
    paragraph. With ``lines`` (``ojai tune``), a text file in tune's old format (several
    lines, no blank line between them) is read one prompt a line, as tune read it before;
    :func:`old_format_note` says when that happened."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptFileError(f"{path}: cannot read: {exc}") from None
    prompts: list[Prompt] = []
    if path.suffix in (".jsonl", ".json"):
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError as exc:
                raise PromptFileError(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(entry, dict) or not isinstance(entry.get("prompt"), str) \
                    or not entry["prompt"].strip():
                raise PromptFileError(f"{path}:{number}: expected {{\"id\": ..., \"prompt\": \"...\"}}")
            prompts.append(Prompt(str(entry.get("id") or f"p{len(prompts) + 1}"), entry["prompt"]))
    elif lines and _old_lines(text):
        for line in text.splitlines():
            if line.strip():
                prompts.append(Prompt(f"p{len(prompts) + 1}", line.strip()))
    else:
        for block in text.split("\n\n"):
            if block.strip():
                prompts.append(Prompt(f"p{len(prompts) + 1}", block.strip()))
    if not prompts:
        raise PromptFileError(f"{path}: no prompts in the file")
    ids = [p.id for p in prompts]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise PromptFileError(f"{path}: prompt ids must be unique; repeated: {', '.join(dup)}")
    return tuple(prompts)


def _old_lines(text: str) -> bool:
    """Whether ``text`` is in ``ojai tune``'s old format: several lines, none blank."""
    body = [line for line in text.strip().splitlines()]
    return len(body) > 1 and all(line.strip() for line in body)


def old_format_note(path: Path) -> str | None:
    """The line ``ojai tune`` prints when ``path`` is in its old format (one prompt a line),
    or None."""
    if path.suffix in (".jsonl", ".json"):
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not _old_lines(text):
        return None
    n = sum(1 for line in text.splitlines() if line.strip())
    return (f"note: {path}: read as {n} prompts, one a line (tune's old format); prompts are "
            "separated by blank lines now, as ojai bench reads them: put a blank line between "
            "them (this way will stop working)")
