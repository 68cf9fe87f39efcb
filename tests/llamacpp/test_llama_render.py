"""Rendering routes into llama-server arguments, and refusing what a binary cannot do.

Every argument list rendered for the upstream dialect below (:data:`UPSTREAM_CASES`) is also
handed to the real upstream llama-server (build 11434) with model files that do not exist:
it must get past argument parsing and fail on the model, never on an argument.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.server import free_port

from ojai_setup.domain.render import Route, UnsupportedRoute, plain_arm_args, render_args
from ojai_setup.formats.llama_help import Dialect, parse_help, parse_version

DATA = Path(__file__).parents[1] / "data" / "llama-help"

MAIN = "/srv/models/Qwen3.6-27B-UD-Q4_K_XL.gguf"
GEMMA = "/srv/models/gemma-4-26B-A4B-it-UD-Q4_K_M.gguf"
SIDECAR = "/srv/models/mtp-gemma-4-26B-A4B-it.gguf"


def _dialect(help_file: str, version_text: str | None = None) -> Dialect:
    text = (DATA / help_file).read_text(encoding="utf-8")
    return parse_help(text, version=parse_version(version_text) if version_text else None)


UPSTREAM = _dialect("upstream-b11434-cpu-help.txt",
                    (DATA / "upstream-b11434-cpu-version.txt").read_text(encoding="utf-8"))
OLD = _dialect("2025-10-windows-cuda-rtx4060-genai-electron.txt", "version: 6020 (a1b2c3d)")
CUDA13_EXCERPT = _dialect("2026-05-server-cuda13-spec-type-error-usage-excerpt.txt")
#: a complete upstream build of May 2026 whose --spec-type did not know draft-mtp yet (the
#: docker excerpt shows its list)
WITHOUT_MTP = UPSTREAM.model_copy(update={"spec_types": CUDA13_EXCERPT.spec_types})
#: the options of an earlier upstream build, as its docs/speculative.md shows them: one
#: --spec-type at a time, one set of n-gram knobs for every map type
ONE_TYPE_EXCERPT = _dialect("upstream-docs-speculative-067318e-options.txt")
ONE_TYPE = UPSTREAM.model_copy(update={
    "spec_types": ONE_TYPE_EXCERPT.spec_types, "spec_type_list": ONE_TYPE_EXCERPT.spec_type_list,
    "options": (*(o for o in UPSTREAM.options if not o.names[0].startswith("--spec-ngram")),
                *(o for o in ONE_TYPE_EXCERPT.options if o.names[0].startswith("--spec-ngram")))})
DRAFT = "/srv/models/gemma-3-270m-q4_k_m.gguf"

BASE = ["--model", MAIN, "--alias", "qwen", "--host", "127.0.0.1", "--port", "8080"]

UPSTREAM_CASES: dict[str, tuple[Route, list[str]]] = {
    "plain": (Route(name="qwen", model=MAIN), [*BASE, "--spec-type", "none"]),
    "mtp heads in the main file": (
        Route(name="qwen", model=MAIN, spec_type="draft-mtp", draft_n_max=2, ctx_size=16384,
              flash_attn="on", n_gpu_layers="all"),
        [*BASE, "--ctx-size", "16384", "--n-gpu-layers", "all", "--flash-attn", "on",
         "--spec-type", "draft-mtp", "--spec-draft-n-max", "2"],
    ),
    "mtp sidecar": (
        Route(name="gemma4", model=GEMMA, draft_model=SIDECAR, spec_type="draft-mtp",
              draft_n_max=3, draft_n_min=0, draft_cache_type_k="q8_0",
              draft_cache_type_v="q8_0", port=13306),
        ["--model", GEMMA, "--alias", "gemma4", "--host", "127.0.0.1", "--port", "13306",
         "--spec-draft-model", SIDECAR, "--spec-type", "draft-mtp", "--spec-draft-n-max", "3",
         "--spec-draft-n-min", "0", "--spec-draft-type-k", "q8_0", "--spec-draft-type-v", "q8_0"],
    ),
    "classic draft model, all options": (
        Route(name="qwen", model=MAIN, draft_model="/srv/models/Qwen3-0.6B-Q8_0.gguf",
              spec_type="draft-simple", draft_n_max=8, draft_n_min=1, cache_type_k="q8_0",
              cache_type_v="q4_0", flash_attn="auto", ctx_size=8192, parallel=2,
              n_gpu_layers=99, load_mode="none"),
        [*BASE, "--ctx-size", "8192", "--parallel", "2", "--n-gpu-layers", "99",
         "--flash-attn", "auto", "--cache-type-k", "q8_0", "--cache-type-v", "q4_0",
         "--load-mode", "none", "--spec-draft-model", "/srv/models/Qwen3-0.6B-Q8_0.gguf",
         "--spec-type", "draft-simple", "--spec-draft-n-max", "8", "--spec-draft-n-min", "1"],
    ),
    "ngram self-speculation, mmap+mlock, flash attention off": (
        Route(name="qwen", model=MAIN, spec_type="ngram-mod", load_mode="mmap+mlock",
              flash_attn="off"),
        [*BASE, "--flash-attn", "off", "--load-mode", "mmap+mlock", "--spec-type", "ngram-mod"],
    ),
    "self-draft with its own GPU layers and cache types, lazy mode": (
        Route(name="qwen", model=DRAFT, draft_model=DRAFT, spec_type="draft-simple",
              draft_n_max=4, draft_n_gpu_layers="all", draft_cache_type_k="q8_0",
              draft_cache_type_v="q8_0", lazy_mode="off"),
        ["--model", DRAFT, *BASE[2:], "--lazy-mode", "off", "--spec-draft-model", DRAFT,
         "--spec-type", "draft-simple", "--spec-draft-n-max", "4", "--spec-draft-ngl", "all",
         "--spec-draft-type-k", "q8_0", "--spec-draft-type-v", "q8_0"],
    ),
    "ngram-simple with its n and m": (
        Route(name="qwen", model=MAIN, spec_type="ngram-simple", ngram={"size-n": 3, "size-m": 8}),
        [*BASE, "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
         "--spec-ngram-simple-size-m", "8"],
    ),
    "ngram-map-k with its n, m and hits": (
        Route(name="qwen", model=MAIN, spec_type="ngram-map-k",
              ngram={"size-n": 4, "size-m": 16, "min-hits": 2}),
        [*BASE, "--spec-type", "ngram-map-k", "--spec-ngram-map-k-size-n", "4",
         "--spec-ngram-map-k-size-m", "16", "--spec-ngram-map-k-min-hits", "2"],
    ),
    "ngram-map-k4v": (
        Route(name="qwen", model=MAIN, spec_type="ngram-map-k4v", ngram={"size-m": 8}),
        [*BASE, "--spec-type", "ngram-map-k4v", "--spec-ngram-map-k4v-size-m", "8"],
    ),
    "ngram-mod with its n-match, n-min and n-max": (
        Route(name="qwen", model=MAIN, spec_type="ngram-mod",
              ngram={"n-match": 24, "n-min": 48, "n-max": 64}),
        [*BASE, "--spec-type", "ngram-mod", "--spec-ngram-mod-n-min", "48",
         "--spec-ngram-mod-n-max", "64", "--spec-ngram-mod-n-match", "24"],
    ),
    "ngram-cache": (
        Route(name="qwen", model=MAIN, spec_type="ngram-cache"),
        [*BASE, "--spec-type", "ngram-cache"],
    ),
    "chained: MTP heads and ngram-mod": (
        Route(name="qwen", model=MAIN, spec_type="draft-mtp,ngram-mod", draft_n_max=2,
              ngram={"n-max": 16}),
        [*BASE, "--spec-type", "draft-mtp,ngram-mod", "--spec-draft-n-max", "2",
         "--spec-ngram-mod-n-max", "16"],
    ),
}


@pytest.mark.parametrize("case", list(UPSTREAM_CASES))
def test_upstream_rendering(case: str) -> None:
    route, expected = UPSTREAM_CASES[case]
    assert render_args(route, UPSTREAM) == expected


def test_heads_in_main_file_have_no_draft_flag() -> None:
    args = render_args(UPSTREAM_CASES["mtp heads in the main file"][0], UPSTREAM)
    assert "--spec-draft-model" not in args and "-md" not in args


def test_old_build_uses_its_own_spelling() -> None:
    route = Route(name="qwen", model=MAIN, draft_model="/srv/models/draft.gguf",
                  spec_type="draft-simple", draft_n_max=16, draft_n_min=2, load_mode="mlock",
                  draft_cache_type_k="q8_0")
    assert render_args(route, OLD) == [
        "--model", MAIN, "--alias", "qwen", "--host", "127.0.0.1", "--port", "8080",
        "--no-mmap", "--mlock", "--model-draft", "/srv/models/draft.gguf", "--draft-max", "16",
        "--draft-min", "2", "--cache-type-k-draft", "q8_0"]


def test_flash_attention_as_a_bare_flag() -> None:
    bare = UPSTREAM.model_copy(update={"flash_attn": "flag"})
    on = render_args(Route(name="q", model=MAIN, flash_attn="on"), bare)
    off = render_args(Route(name="q", model=MAIN, flash_attn="off"), bare)
    assert "--flash-attn" in on and "--flash-attn" not in off
    assert on[on.index("--flash-attn") + 1:] == ["--spec-type", "none"]
    with pytest.raises(UnsupportedRoute, match="not auto"):
        render_args(Route(name="q", model=MAIN, flash_attn="auto"), bare)


# -- refusals --------------------------------------------------------------------------------
def test_turbo3_cache_is_refused_on_upstream() -> None:
    route = Route(name="gemma4", model=GEMMA, cache_type_k="turbo3", cache_type_v="turbo3")
    with pytest.raises(UnsupportedRoute) as exc:
        render_args(route, UPSTREAM)
    assert exc.value.flag == "--cache-type-k"
    message = str(exc.value)
    assert "turbo3" in message and "build 11434" in message and "q8_0" in message


def test_draft_mtp_refused_on_a_build_without_it() -> None:
    route = Route(name="qwen", model=MAIN, spec_type="draft-mtp")
    with pytest.raises(UnsupportedRoute, match="does not know speculative type 'draft-mtp'") as e:
        render_args(route, WITHOUT_MTP)
    assert e.value.flag == "--spec-type"
    with pytest.raises(UnsupportedRoute, match="has no --spec-type") as e:
        render_args(route, OLD)
    assert "6020" in str(e.value)


def test_draft_file_refused_on_a_build_without_a_draft_flag() -> None:
    no_draft = UPSTREAM.model_copy(update={"options": tuple(
        o for o in UPSTREAM.options if "--spec-draft-model" not in o.names)})
    route = Route(name="gemma4", model=GEMMA, draft_model=SIDECAR, spec_type="draft-mtp")
    with pytest.raises(UnsupportedRoute, match="has no --spec-draft-model") as exc:
        render_args(route, no_draft)
    assert exc.value.flag == "--spec-draft-model"
    assert "build 11434" in str(exc.value)


def test_fork_mtp_head_is_named_in_the_refusal() -> None:
    fork = WITHOUT_MTP.model_copy(update={"options": (*WITHOUT_MTP.options, *parse_help(
        "--mtp-head FNAME                        MTP head\n").options)})
    with pytest.raises(UnsupportedRoute, match="fork with --mtp-head"):
        render_args(Route(name="g", model=GEMMA, draft_model=SIDECAR, spec_type="draft-mtp"), fork)


def test_removed_flag_is_reported_as_removed() -> None:
    removed_only = UPSTREAM.model_copy(update={"options": tuple(
        o for o in UPSTREAM.options if "--spec-draft-n-max" not in o.names)})
    route = Route(name="q", model=MAIN, spec_type="draft-mtp", draft_n_max=2)
    with pytest.raises(UnsupportedRoute, match="removed --draft-max"):
        render_args(route, removed_only)


@pytest.mark.parametrize(("route", "match"), [
    (Route(name="q", model=MAIN, load_mode="dio"), "no --no-mmap/--mlock equivalent"),
    (Route(name="q", model=MAIN, n_gpu_layers="auto"), "does not accept 'auto'"),
    (Route(name="q", model=MAIN, spec_type="draft-mtp"), "has no --spec-type"),
])
def test_old_build_refusals(route: Route, match: str) -> None:
    with pytest.raises(UnsupportedRoute, match=match):
        render_args(route, OLD)


def test_unknown_load_mode_refused_on_upstream() -> None:
    with pytest.raises(UnsupportedRoute, match="does not know load mode 'mmap-ish'"):
        render_args(Route(name="q", model=MAIN, load_mode="mmap-ish"), UPSTREAM)


def test_partial_dialect_is_refused() -> None:
    with pytest.raises(UnsupportedRoute, match="usage excerpt"):
        render_args(Route(name="q", model=MAIN), CUDA13_EXCERPT)


@pytest.mark.parametrize(("fields", "match"), [
    ({"draft_model": SIDECAR}, "needs a spec_type"),
    ({"spec_type": "draft-simple"}, "needs a draft_model"),
    ({"spec_type": "ngram-mod", "draft_model": SIDECAR}, "drafts without a model file"),
    ({"draft_n_max": 2}, "need a spec_type"),
    ({"spec_type": "draft-mtp", "draft_n_max": 2, "draft_n_min": 3}, "larger than"),
    ({"draft_cache_type_k": "q8_0"}, "need a draft_model"),
    ({"spec_type": "ngram-simple", "draft_n_max": 4}, "does not read draft_n_max"),
    ({"spec_type": "ngram-simple", "ngram": {"size-x": 4}}, "unknown n-gram knob"),
    ({"ngram": {"size-n": 4}}, "need an ngram-\\* spec_type"),
    ({"spec_type": "none,ngram-mod"}, "cannot be chained"),
    ({"spec_type": "ngram-mod", "draft_n_gpu_layers": 99}, "need a draft_model"),
    ({"name": "a,b"}, "pattern"),
    ({"port": 0}, "greater than or equal"),
])
def test_route_validation(fields: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        Route(**{"name": "q", "model": MAIN, **fields})


# -- drafting kinds, read from the help --------------------------------------------------
def test_the_help_says_whether_spec_type_takes_a_list() -> None:
    assert UPSTREAM.spec_type_list  # "comma-separated list of types of speculative decoding"
    assert CUDA13_EXCERPT.spec_type_list
    assert not ONE_TYPE_EXCERPT.spec_type_list  # "type of speculative decoding to use when ..."
    assert ONE_TYPE_EXCERPT.spec_types == ("none", "ngram-cache", "ngram-simple", "ngram-map-k",
                                           "ngram-map-k4v", "ngram-mod")
    assert UPSTREAM.spec_type_allowed("draft-mtp,ngram-mod")
    assert not UPSTREAM.spec_type_allowed("draft-mtp,ngram-foo")
    assert not ONE_TYPE.spec_type_allowed("ngram-simple,ngram-mod")


def test_chained_types_refused_where_the_help_takes_one_type() -> None:
    route = Route(name="qwen", model=MAIN, spec_type="ngram-simple,ngram-mod")
    with pytest.raises(UnsupportedRoute, match="takes one speculative type, not the list") as e:
        render_args(route, ONE_TYPE)
    assert e.value.flag == "--spec-type"
    assert render_args(route, UPSTREAM)[-2:] == ["--spec-type", "ngram-simple,ngram-mod"]


def test_ngram_knobs_are_read_from_the_help() -> None:
    assert UPSTREAM.ngram_knobs("ngram-simple") == {
        "size-n": "--spec-ngram-simple-size-n", "size-m": "--spec-ngram-simple-size-m",
        "min-hits": "--spec-ngram-simple-min-hits"}
    assert UPSTREAM.ngram_knobs("ngram-mod") == {
        "n-min": "--spec-ngram-mod-n-min", "n-max": "--spec-ngram-mod-n-max",
        "n-match": "--spec-ngram-mod-n-match"}
    assert set(UPSTREAM.ngram_knobs("ngram-map-k")) == {"size-n", "size-m", "min-hits"}
    assert UPSTREAM.ngram_knobs("ngram-cache") == {}
    # the earlier build's one shared set, and its --spec-ngram-size-n that b11434 removed
    assert ONE_TYPE.ngram_knobs("ngram-map-k")["size-n"] == "--spec-ngram-size-n"
    assert UPSTREAM.is_removed("--spec-ngram-size-n")
    args = render_args(Route(name="q", model=MAIN, spec_type="ngram-simple",
                             ngram={"size-n": 3}), ONE_TYPE)
    assert args[-2:] == ["--spec-ngram-size-n", "3"]


@pytest.mark.parametrize(("route", "match"), [
    (Route(name="q", model=MAIN, spec_type="ngram-mod", ngram={"size-n": 3}),
     "has no n-gram knob 'size-n' for ngram-mod"),
    (Route(name="q", model=MAIN, spec_type="ngram-cache", ngram={"size-m": 8}),
     "has no n-gram knob 'size-m' for ngram-cache"),
    (Route(name="q", model=MAIN, draft_model=DRAFT, spec_type="draft-simple", draft_ctx_size=512),
     "has no --spec-draft-ctx-size"),
    (Route(name="q", model=MAIN, lazy_mode="sometimes"),
     "does not know lazy mode 'sometimes' \\(allowed: on, auto, off\\)"),
])
def test_drafting_refusals_on_upstream(route: Route, match: str) -> None:
    with pytest.raises(UnsupportedRoute, match=match):
        render_args(route, UPSTREAM)


def test_lazy_mode_refused_on_a_build_without_it() -> None:
    assert OLD.lazy_modes is None and UPSTREAM.lazy_modes == ("on", "auto", "off")
    with pytest.raises(UnsupportedRoute, match="has no --lazy-mode"):
        render_args(Route(name="q", model=MAIN, lazy_mode="on"), OLD)


def test_plain_turns_drafting_off_the_way_the_binary_says() -> None:
    assert UPSTREAM.drafting_off() == ("--spec-type", "none")
    # a build with a bare --no-spec-type
    no_spec = parse_help((DATA / "upstream-b11434-cpu-help.txt").read_text() +
                         "--no-spec-type                          disable speculative decoding\n")
    assert no_spec.no_spec_type == "flag"
    assert render_args(Route(name="q", model=MAIN), no_spec)[-1] == "--no-spec-type"
    # a build without speculation has nothing to turn off
    assert OLD.drafting_off() == () and render_args(Route(name="q", model=MAIN), OLD)[-1] == "8080"


@pytest.mark.parametrize("case", [c for c in UPSTREAM_CASES if c != "plain"])
def test_plain_arm_of_a_drafted_route(case: str) -> None:
    """The benchmark's plain arm: the drafted route's own arguments, drafting taken out and off."""
    route, _ = UPSTREAM_CASES[case]
    drafted = render_args(route, UPSTREAM)
    plain = render_args(route.model_copy(update={
        "spec_type": "none", "draft_model": None, "draft_n_max": None, "draft_n_min": None,
        "draft_cache_type_k": None, "draft_cache_type_v": None, "draft_n_gpu_layers": None,
        "ngram": {}}), UPSTREAM)
    assert plain_arm_args(drafted, UPSTREAM) == plain


def test_route_words_name_the_drafting_kind() -> None:
    assert [UPSTREAM_CASES[c][0].drafting for c in (
        "plain", "mtp sidecar", "classic draft model, all options", "ngram-simple with its n and m",
        "chained: MTP heads and ngram-mod")] == [
        "none", "MTP", "draft model", "n-gram (ngram-simple)", "MTP + n-gram (ngram-mod)"]


def test_route_listens_on_localhost_by_default() -> None:
    assert Route(name="q", model=MAIN).host == "127.0.0.1"


# -- the real binary's parser ----------------------------------------------------------------
ARGUMENT_ERRORS = ("error while handling argument", "invalid argument", "usage:",
                   "to show complete usage")


@pytest.mark.slow
@pytest.mark.parametrize("case", list(UPSTREAM_CASES))
def test_real_binary_accepts_rendered_args(case: str, llama_server_bin: Path,
                                           tmp_path: Path) -> None:
    route, _ = UPSTREAM_CASES[case]
    models = tmp_path / "models"  # exists, but holds no model files
    models.mkdir()
    route = route.model_copy(update={
        "model": str(models / Path(route.model).name),
        "draft_model": str(models / Path(route.draft_model).name) if route.draft_model else None,
        "port": free_port(),
    })
    args = render_args(route, UPSTREAM)
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.run([os.fspath(llama_server_bin), *args], capture_output=True, text=True,
                          timeout=120, env=env, stdin=subprocess.DEVNULL)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    for marker in ARGUMENT_ERRORS:
        assert marker not in out, out
    assert f"failed to open GGUF file '{route.model}'" in out, out
    assert "exiting due to model loading error" in out, out


# -- a build that drafts by default (llama.cpp PR #28391) --------------------------------------
#: the help of build 11434 with PR #28391's three options (tests/data/llama-help/SOURCES.md)
DEFAULT_NGRAM = _dialect("pr28391-default-ngram-mod-help.txt")
#: Debian sid's llama.cpp-tools, build 11669, as it prints its help
DEBIAN = parse_help((Path(__file__).parents[1] / "data" / "captures" / "debian-sid" /
                     "llama-server-help.txt").read_text(encoding="utf-8"))


def drafted_kinds(args: list[str], dialect: Dialect) -> set[str]:
    """The types a server given ``args`` drafts with, by the rules its help states: it starts
    from its default types; ``--spec-type none`` clears them; any other ``--spec-type`` adds to
    the defaults where the build has some (PR #28391) and replaces them where it has none
    (b11434, 11669); ``--no-spec-type TYPE`` removes TYPE, a bare ``--no-spec-type`` all."""
    kinds = set(dialect.spec_type_default)
    for i, arg in enumerate(args):
        value = args[i + 1] if i + 1 < len(args) else ""
        if arg == "--spec-type":
            given = set(value.split(","))
            kinds = set() if given == {"none"} else (kinds | given if dialect.spec_type_default
                                                     else given)
        elif arg == "--no-spec-type":
            if dialect.no_spec_type == "value":
                assert not value.startswith("-"), f"--no-spec-type would read {value!r} as its type"
                kinds -= set(value.split(","))
            else:
                kinds = set()
    return kinds


def test_the_help_says_what_drafts_by_default_and_how_to_remove_it() -> None:
    assert DEFAULT_NGRAM.spec_type_default == ("ngram-mod",)
    assert DEFAULT_NGRAM.no_spec_type == "value"
    assert DEFAULT_NGRAM.option("--no-spec-type").takes_value == "required"
    assert DEFAULT_NGRAM.option("--flash-attn").takes_value == "optional"
    assert "drafts by default: ngram-mod (added to any --spec-type)" in DEFAULT_NGRAM.summary_lines()
    for real in (UPSTREAM, DEBIAN):
        assert real.spec_type_default == () and real.no_spec_type is None


@pytest.mark.parametrize("dialect", [UPSTREAM, DEBIAN, DEFAULT_NGRAM],
                         ids=["b11434", "debian-11669", "pr28391"])
@pytest.mark.parametrize("case", list(UPSTREAM_CASES))
def test_each_route_drafts_exactly_its_kinds(case: str, dialect: Dialect) -> None:
    """Plain routes draft nothing and drafted routes exactly what they name, on the real builds
    and on one that drafts ngram-mod by default, where --spec-type draft-mtp alone would draft
    ngram-mod as well."""
    route, _ = UPSTREAM_CASES[case]
    args = render_args(route, dialect)
    want = set() if route.spec_type == "none" else set(route.spec_types)
    assert drafted_kinds(args, dialect) == want, args


def test_the_default_chain_is_left_out_where_the_route_does_not_name_it() -> None:
    route, _ = UPSTREAM_CASES["mtp heads in the main file"]
    args = render_args(route, DEFAULT_NGRAM)
    at = args.index("--no-spec-type")
    assert args[at:at + 2] == ["--no-spec-type", "ngram-mod"]
    chained, _ = UPSTREAM_CASES["chained: MTP heads and ngram-mod"]
    assert "--no-spec-type" not in render_args(chained, DEFAULT_NGRAM)
    assert render_args(Route(name="q", model=MAIN), DEFAULT_NGRAM)[-2:] == ["--spec-type", "none"]


def test_no_spec_type_with_a_value_turns_off_the_defaults_where_none_is_no_type() -> None:
    no_none = DEFAULT_NGRAM.model_copy(update={
        "spec_types": tuple(t for t in DEFAULT_NGRAM.spec_types if t != "none")})
    args = render_args(Route(name="q", model=MAIN), no_none)
    assert args[-2:] == ["--no-spec-type", "ngram-mod"] and drafted_kinds(args, no_none) == set()


def test_a_build_that_drafts_by_default_with_no_way_out_is_refused() -> None:
    stuck = DEFAULT_NGRAM.model_copy(update={
        "no_spec_type": None,
        "options": tuple(o for o in DEFAULT_NGRAM.options if "--no-spec-type" not in o.names)})
    with pytest.raises(UnsupportedRoute, match="adds draft-mtp to its default ngram-mod"):
        render_args(UPSTREAM_CASES["mtp heads in the main file"][0], stuck)


def test_every_flag_is_given_a_value_exactly_when_its_help_shows_one() -> None:
    # a build whose --alias were a bare flag would read the route's name as an argument
    bare_alias = parse_help((DATA / "upstream-b11434-cpu-help.txt").read_text().replace(
        "-a,    --alias STRING  ", "-a,    --alias         "))
    assert bare_alias.option("--alias").takes_value == "no"
    with pytest.raises(UnsupportedRoute, match="--alias: .* takes no value \\(model alias\\)"):
        render_args(Route(name="q", model=MAIN), bare_alias)
    # and one whose --no-spec-type needs a type but lists no default types cannot be given bare
    typed = parse_help((DATA / "upstream-b11434-cpu-help.txt").read_text().replace(
        "none,draft-simple,", "draft-simple,") +
        "--no-spec-type TYPE                     types to remove\n")
    assert typed.drafting_off() == ()


def test_plain_arm_on_a_build_that_drafts_by_default() -> None:
    route, _ = UPSTREAM_CASES["mtp sidecar"]
    plain = plain_arm_args(render_args(route, DEFAULT_NGRAM), DEFAULT_NGRAM)
    assert "--no-spec-type" not in plain and plain[-2:] == ["--spec-type", "none"]
    assert drafted_kinds(plain, DEFAULT_NGRAM) == set()
