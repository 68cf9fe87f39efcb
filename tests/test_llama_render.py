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

from ojai_setup.domain.render import Route, UnsupportedRoute, render_args
from ojai_setup.formats.llama_help import Dialect, parse_help, parse_version

DATA = Path(__file__).parent / "data" / "llama-help"

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

BASE = ["--model", MAIN, "--alias", "qwen", "--host", "127.0.0.1", "--port", "8080"]

UPSTREAM_CASES: dict[str, tuple[Route, list[str]]] = {
    "plain": (Route(name="qwen", model=MAIN), BASE),
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
    assert on[-1] == "--flash-attn" and "--flash-attn" not in off
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
    ({"name": "a,b"}, "pattern"),
    ({"port": 0}, "greater than or equal"),
])
def test_route_validation(fields: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        Route(**{"name": "q", "model": MAIN, **fields})


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
