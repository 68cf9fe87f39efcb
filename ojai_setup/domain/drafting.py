"""The kinds of drafting a llama-server does, one row each, as ``--spec-type`` names them
(upstream build 11434, common/arg.cpp and common/speculative.cpp): the draft heads and draft
models (``draft-*``), which read ``--spec-draft-n-max``, and n-gram drafting from the text itself
(``ngram-*``), each type reading its own knobs after ``--spec-<type>-``. The catalog, the
launch-script renderer, bench and tune read their lists from here.
"""

from __future__ import annotations

from typing import NamedTuple


class DraftingKind(NamedTuple):
    name: str
    #: it drafts with a model: a draft file, or MTP heads inside the main file
    model_drafted: bool
    #: it drafts from a separate model file, which must be given
    needs_file: bool
    #: it may take a separate model file (MTP heads may also live in the main file)
    may_take_file: bool
    #: the n-gram knobs it reads, as the help names them after ``--spec-<type>-``
    knobs: tuple[str, ...]
    #: the flag that sets how many tokens it drafts (None: it drafts up to 8 by itself)
    length_flag: str | None
    #: what plans and reports call it: ``MTP``, ``draft model``, ``n-gram (ngram-simple)``
    words: str
    #: what bench calls the arm that drafts with it alone: ``MTP``, else the type's name
    arm: str


def _head(name: str, *, needs_file: bool, words: str | None = None,
          arm: str | None = None) -> DraftingKind:
    return DraftingKind(name, True, needs_file, True, (), "--spec-draft-n-max",
                        words or name, arm or name)


def _ngram(name: str, knobs: tuple[str, ...], length_flag: str | None) -> DraftingKind:
    return DraftingKind(name, False, False, False, knobs, length_flag, f"n-gram ({name})", name)


_SIZE = ("size-n", "size-m", "min-hits")

#: every ``--spec-type`` value of build 11434 that drafts, in the order the help lists them
DRAFTING_KINDS: dict[str, DraftingKind] = {k.name: k for k in (
    _head("draft-mtp", needs_file=False, words="MTP", arm="MTP"),
    _head("draft-simple", needs_file=True, words="draft model"),
    _head("draft-eagle3", needs_file=True),
    _head("draft-dflash", needs_file=True),
    _head("draft-dspark", needs_file=True),
    _ngram("ngram-simple", _SIZE, "--spec-ngram-simple-size-m"),
    _ngram("ngram-map-k", _SIZE, "--spec-ngram-map-k-size-m"),
    _ngram("ngram-map-k4v", _SIZE, "--spec-ngram-map-k4v-size-m"),
    _ngram("ngram-mod", ("n-min", "n-max", "n-match"), "--spec-ngram-mod-n-max"),
    _ngram("ngram-cache", (), None),
)}


def is_ngram_type(spec_type: str) -> bool:
    """One ``--spec-type`` value drafts from the text itself (n-gram), not with a model; a type
    of a newer build is placed by its family's prefix, as build 11434 names them."""
    row = DRAFTING_KINDS.get(spec_type)
    return (not row.model_drafted) if row is not None else spec_type.startswith("ngram-")


def is_model_type(spec_type: str) -> bool:
    """One ``--spec-type`` value drafts with a model (a draft head or a draft model file)."""
    row = DRAFTING_KINDS.get(spec_type)
    return row.model_drafted if row is not None else spec_type.startswith("draft-")


def words_of(spec_type: str) -> str:
    """What plans and reports call one ``--spec-type`` value (its own name when not known)."""
    row = DRAFTING_KINDS.get(spec_type)
    if row is not None:
        return row.words
    return f"n-gram ({spec_type})" if is_ngram_type(spec_type) else spec_type


def arm_of(spec_type: str) -> str:
    """What bench calls an arm drafting with one ``--spec-type`` value alone."""
    row = DRAFTING_KINDS.get(spec_type)
    return row.arm if row is not None else spec_type


KNOWN_TYPES = tuple(DRAFTING_KINDS)
NGRAM_TYPES = tuple(k.name for k in DRAFTING_KINDS.values() if not k.model_drafted)
#: the knobs each n-gram type reads (``ngram-cache`` none)
NGRAM_TYPE_KNOBS = {k.name: k.knobs for k in DRAFTING_KINDS.values() if not k.model_drafted}
#: speculative types that draft from a separate model file
NEEDS_DRAFT_FILE = frozenset(k.name for k in DRAFTING_KINDS.values() if k.needs_file)
#: speculative types that may take a sidecar file (MTP heads may also live in the main file)
MAY_TAKE_DRAFT_FILE = frozenset(k.name for k in DRAFTING_KINDS.values() if k.may_take_file)
#: speculative types that draft with a model (a file, or heads inside the main file) and read
#: ``--spec-draft-n-max``; the ``ngram-*`` types read their own knobs instead
MODEL_DRAFTED = frozenset(k.name for k in DRAFTING_KINDS.values() if k.model_drafted)
