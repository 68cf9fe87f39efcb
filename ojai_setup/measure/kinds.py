"""The kinds of drafting a llama-server does, as ``--spec-type`` names them (build 11434):
draft heads and draft models (``draft-mtp``, ``draft-simple``, ``draft-eagle3``, ...), n-gram
drafting from the text itself (``ngram-simple``, ``ngram-map-k``, ``ngram-map-k4v``,
``ngram-mod``, ``ngram-cache``), and chains of them (``draft-simple,ngram-mod``).

Each kind reads its own length knob (common/arg.cpp and common/speculative.cpp of b11434):
draft heads ``--spec-draft-n-max``; ``ngram-simple``/``-map-k``/``-map-k4v`` their
``--spec-ngram-<type>-size-m`` (the drafted m-gram; ``-size-n`` is the lookup length);
``ngram-mod`` ``--spec-ngram-mod-n-max``; ``ngram-cache`` none (it drafts up to 8 tokens).
"""

from __future__ import annotations

import re

from ojai_setup.domain.drafting import (
    DRAFTING_KINDS,
    KNOWN_TYPES,
    NGRAM_TYPES,
    arm_of,
    is_model_type,
    is_ngram_type,
)

__all__ = ["KNOWN_TYPES", "NGRAM_TYPES", "canonical", "drafts", "has_head", "is_ngram",
           "knob_flag", "label", "parts", "version_of_build_info"]

NONE = "none"
SPEC_TYPE_FLAGS = ("--spec-type",)


def canonical(kind: str) -> str:
    """``kind`` (a ``--spec-type`` value, a comma chain) with each part as build 11434 spells
    it (case and separators ignored: ``ngram_mod`` is ``ngram-mod``). Raises ``ValueError``
    naming the part no build knows and the closest kinds."""
    from ojai_setup.core.commandline import closest, folded

    out = []
    for part in kind.split(","):
        part = part.strip()
        found = [k for k in KNOWN_TYPES if folded(k) == folded(part)]
        if not found:
            near = closest(part, list(KNOWN_TYPES))
            maybe = f"did you mean {' or '.join(near)}? " if near else ""
            raise ValueError(f"{part!r} is no kind of drafting; {maybe}(the kinds: "
                             f"{', '.join(KNOWN_TYPES)}, or a chain like draft-simple,ngram-mod)")
        out.append(found[0])
    return ",".join(out)


def parts(spec_type: str | None) -> tuple[str, ...]:
    if not spec_type:
        return ()
    return tuple(p.strip() for p in spec_type.split(",") if p.strip() and p.strip() != NONE)


def drafts(spec_type: str | None) -> bool:
    return bool(parts(spec_type))


def is_ngram(spec_type: str | None) -> bool:
    """Only n-gram drafting: no draft head, no draft model."""
    p = parts(spec_type)
    return bool(p) and all(is_ngram_type(x) for x in p)


def has_head(spec_type: str | None) -> bool:
    """A draft head or draft model among the kinds (the geometric acceptance model fits it)."""
    return any(is_model_type(x) for x in parts(spec_type))


def label(spec_type: str | None) -> str:
    """What the drafted arm is called for people: "MTP" for MTP heads, else the kind's name
    ("ngram-simple", "draft-simple,ngram-mod"); "drafted" when the kind is not known."""
    p = parts(spec_type)
    if not p:
        return "drafted"
    return arm_of(p[0]) if len(p) == 1 else ",".join(p)


def knob_flag(kind: str) -> str | None:
    """The flag that sets how many tokens ``kind`` (one ``--spec-type`` value) drafts."""
    row = DRAFTING_KINDS.get(kind)
    if row is None:  # a kind of a newer build: its family's flag, as build 11434 names it
        return "--spec-draft-n-max" if is_model_type(kind) else None
    return row.length_flag


_BUILD_INFO = re.compile(r"^b(?P<build>\d+)(?:-(?P<commit>[0-9A-Za-z]+))?$")


def version_of_build_info(build_info: str | None) -> str | None:
    """``/props``'s ``build_info`` as a version label: ``b11434-unknown`` is ``build 11434``
    (the binary knows its build, not its commit), ``b11434-abc1234`` ``build 11434 commit
    abc1234``; anything else is kept as it is."""
    if not build_info:
        return None
    m = _BUILD_INFO.match(build_info.strip())
    if not m:
        return build_info
    commit = m["commit"]
    return f"build {m['build']}" + (f" commit {commit}" if commit and commit != "unknown" else "")
