"""The one table of drafting kinds (domain/drafting.py) against the help of build 11434, which
names every ``--spec-type`` value and every n-gram knob flag."""

from __future__ import annotations

from pathlib import Path

from ojai_setup.measure import kinds
from ojai_setup.domain.drafting import DRAFTING_KINDS, NGRAM_TYPES
from ojai_setup.formats.llama_help import NGRAM_KNOBS, parse_help

HELP = Path(__file__).resolve().parents[2] / "ojai_setup/formats/reference-help-b11434.txt"


def test_every_kind_and_knob_flag_of_the_table_is_in_the_help_and_every_drafting_type_in_it():
    dialect = parse_help(HELP.read_text())
    assert dialect.spec_types is not None
    assert set(DRAFTING_KINDS) == set(dialect.spec_types) - {"none"}
    for kind in DRAFTING_KINDS.values():
        if not kind.model_drafted:
            assert set(dialect.ngram_knobs(kind.name)) == set(kind.knobs), kind.name
        if kind.length_flag is not None:
            assert dialect.has(kind.length_flag), kind.name
    assert {k for t in NGRAM_TYPES for k in DRAFTING_KINDS[t].knobs} == set(NGRAM_KNOBS)


def test_bench_reads_the_table():
    assert kinds.KNOWN_TYPES == tuple(DRAFTING_KINDS)
    assert [kinds.knob_flag(k) for k in DRAFTING_KINDS] == [
        "--spec-draft-n-max"] * 5 + ["--spec-ngram-simple-size-m", "--spec-ngram-map-k-size-m",
                                     "--spec-ngram-map-k4v-size-m", "--spec-ngram-mod-n-max", None]
    assert kinds.knob_flag("draft-newer") == "--spec-draft-n-max"


def test_plans_reports_and_bench_name_the_kinds_from_the_table():
    from ojai_setup.domain.catalog import load_catalog
    from ojai_setup.domain.render import drafting_kind

    assert drafting_kind("draft-mtp,ngram-mod") == "MTP + n-gram (ngram-mod)"
    assert drafting_kind("draft-simple") == "draft model"
    assert drafting_kind("none") == "none"
    assert [kinds.label(t) for t in ("draft-mtp", "draft-simple", "draft-mtp,ngram-mod", None)] \
        == ["MTP", "draft-simple", "draft-mtp,ngram-mod", "drafted"]
    # a kind of a newer build is placed by its family's prefix and keeps its own name
    assert drafting_kind("ngram-future,draft-future") == "n-gram (ngram-future) + draft-future"
    assert kinds.is_ngram("ngram-future") and kinds.has_head("draft-future")
    assert not kinds.is_ngram("draft-future,ngram-mod")
    # the catalog's words add where the heads live and a model drafting for itself
    drafting = {r.drafting for r in load_catalog(None).routes.values()}
    assert {"MTP sidecar", "MTP in-file"} <= drafting
