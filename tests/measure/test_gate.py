"""The correctness gate's arithmetic, its reading of llama-server's answers, the reference's
command line per dialect, and the launch defaults (flash attention, load mode) per dialect."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ojai_setup.domain.gate import (
    MAX_MEAN_KL,
    MIN_AGREEMENT,
    Where,
    compare,
    crossentropy_gap,
    finding,
    gate_args,
    position_kl,
    reference_args,
)
from ojai_setup.domain.launch_defaults import decide
from ojai_setup.domain.render import Route, render_args
from ojai_setup.facts.distributions import parse_top
from ojai_setup.formats.llama_help import Dialect, parse_help, parse_version

HELP = Path(__file__).parents[1] / "data" / "llama-help"


def _dialect(name: str = "upstream-b11434-cpu-help.txt") -> Dialect:
    version = parse_version((HELP / "upstream-b11434-cpu-version.txt").read_text())
    return parse_help((HELP / name).read_text(), version=version)


def _without(dialect: Dialect, *names: str) -> Dialect:
    """The dialect of an older build that lacks ``names``."""
    return dialect.model_copy(update={
        "options": tuple(o for o in dialect.options if not set(o.names) & set(names)),
        "load_modes": None if "--load-mode" in names else dialect.load_modes,
        "flash_attn": None if "--flash-attn" in names else dialect.flash_attn})


def test_a_distribution_against_itself_is_zero_and_a_different_one_is_not() -> None:
    p = ((5, 0.6), (7, 0.3), (9, 0.05))
    assert position_kl(p, p) == pytest.approx(0.0, abs=1e-12)
    q = ((7, 0.6), (5, 0.3), (9, 0.05))
    # over {5, 7, 9, rest}: 0.6 ln 2 + 0.3 ln 0.5 = 0.3 ln 2
    assert position_kl(p, q) == pytest.approx(0.3 * math.log(2), rel=1e-9)


def test_a_token_the_test_did_not_list_gets_at_most_its_unlisted_mass() -> None:
    p = ((1, 0.5), (2, 0.5))
    q = ((1, 0.9),)  # token 2 unlisted: at most min(0.9, 0.1) = 0.1
    assert position_kl(p, q) == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1))


def test_identical_lists_pass_and_a_wrong_backend_fails() -> None:
    ref = [((i, 0.7), (i + 1, 0.2)) for i in range(300)]
    same = compare(ref, ref)
    assert (same.agreement, same.mean_kl, same.passed, same.verdict) == (1.0, 0.0, True, "pass")
    wrong = [((i + 3, 0.9), (i, 0.01)) for i in range(300)]
    figures = compare(ref, wrong)
    assert figures.agreement == 0.0 and figures.mean_kl > 1.0
    assert not figures.passed and figures.verdict == "FAIL"


def test_agreement_alone_fails_a_backend_below_the_threshold() -> None:
    ref = [((i, 0.5), (i + 1, 0.45)) for i in range(100)]
    flipped = [((i + 1, 0.5), (i, 0.45)) if i % 4 == 0 else ((i, 0.5), (i + 1, 0.45))
               for i in range(100)]
    figures = compare(ref, flipped)
    assert figures.agreement == pytest.approx(0.75) and figures.mean_kl < MAX_MEAN_KL
    assert figures.agreement < MIN_AGREEMENT and not figures.passed


def test_positions_without_probabilities_count_against_the_backend() -> None:
    ref = [((1, 0.9),)] * 10
    figures = compare(ref, [((1, 0.9),)] * 5 + [()] * 5)
    assert figures.unusable == 5 and figures.agreement == 0.5 and not figures.passed
    with pytest.raises(ValueError):
        compare(ref, ref[:3])


def test_the_public_failures_are_orders_of_magnitude_over_the_kl_threshold() -> None:
    for bad, good in ((250_459, 384), (1334, 6.8)):
        assert crossentropy_gap(bad, good) > 100 * MAX_MEAN_KL


def test_reading_top_logprobs_and_nan() -> None:
    entry = {"id": 3, "top_logprobs": [{"id": 3, "logprob": math.log(0.75)},
                                       {"id": 4, "logprob": math.log(0.25)}]}
    got = parse_top(entry)
    assert [t for t, _ in got] == [3, 4]
    assert [p for _, p in got] == pytest.approx([0.75, 0.25])
    assert parse_top({"top_probs": [{"id": 1, "prob": 1.0}]}) == ((1, 1.0),)
    assert parse_top({"top_logprobs": [{"id": 1, "logprob": "nan"}]}) == ()
    assert parse_top({"top_logprobs": [{"id": 1, "logprob": None}]}) == ((1, 0.0),)


def test_the_reference_is_the_same_binary_with_nothing_offloaded() -> None:
    d = _dialect()
    route = ["-m", "/m/x.gguf", "--host", "127.0.0.1", "--port", "8080", "-ngl", "all",
             "-fa", "on", "--load-mode", "none", "-c", "32768", "-np", "4",
             "--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]
    test = gate_args(route, d)
    assert "--spec-draft-n-max" not in test and test[test.index("-np") + 1] == "1"
    assert test[test.index("-c") + 1] == "1024" and test[test.index("-ngl") + 1] == "all"
    ref = reference_args(route, d)
    assert ref[ref.index("-ngl") + 1] == "0" and ref[ref.index("--device") + 1] == "none"
    # everything else as the route has it
    assert ref[ref.index("-fa") + 1] == "on" and ref[ref.index("-m") + 1] == "/m/x.gguf"
    assert ref[ref.index("--load-mode") + 1] == "mmap" and test[test.index("--load-mode") + 1] == "none"
    older = _without(d, "--device", "--load-mode")
    ref = reference_args([a if a not in ("--load-mode", "none") else "--no-mmap" for a in route
                          if a != "none"], older)
    assert "--device" not in ref and ref[ref.index("-ngl") + 1] == "0"
    assert "--no-kv-offload" in ref and "--no-op-offload" in ref and "--no-mmap" not in ref


def test_a_failing_backend_names_what_it_ran_on_and_the_other_backend() -> None:
    figures = compare([((1, 0.9),)] * 4, [((2, 0.9),)] * 4)
    text = finding("qwen-mtp", figures, Where(backend="hip", build="b1325", gpu_target="gfx1150",
                                              kernel="6.17.0-1012-oem", firmware="linux-firmware 20251125"))
    for part in ("backend hip", "build b1325", "GPU gfx1150", "kernel 6.17.0-1012-oem",
                 "firmware linux-firmware 20251125", "Vulkan", "agreement 0.0 %"):
        assert part in text


def _value(args: list[str], *names: str) -> str | None:
    return next((args[i + 1] for i, a in enumerate(args[:-1]) if a in names), None)


@pytest.mark.parametrize("gpu", [True, False])
def test_launch_defaults_in_b11434(gpu: bool) -> None:
    d = _dialect()
    launch = decide(d, gpu=gpu)
    args = render_args(Route(name="r", model="/m.gguf", flash_attn=launch.flash_attn,
                             load_mode=launch.load_mode, n_gpu_layers=launch.gpu_layers), d)
    assert _value(args, "--flash-attn", "-fa") == "on"
    assert _value(args, "--load-mode", "-lm") == ("none" if gpu else None)
    if gpu:
        assert _value(args, "--n-gpu-layers", "-ngl", "--gpu-layers") == "all"
        assert "llama.cpp#15018" in launch.sentence()


def test_launch_defaults_in_an_older_build_and_overrides() -> None:
    older = _dialect("2025-10-windows-cuda-rtx4060-genai-electron.txt")
    launch = decide(older, gpu=True)
    args = render_args(Route(name="r", model="/m.gguf", flash_attn=launch.flash_attn,
                             load_mode=launch.load_mode), older)
    assert "--no-mmap" in args and "--load-mode" not in args and "--no-mmap" in launch.sentence()
    # the catalog's settings, then the command line's, win over ojai's defaults
    d = _dialect()
    assert decide(d, gpu=True, catalog_flash_attn="off").flash_attn == "off"
    chosen = decide(d, gpu=True, catalog_load_mode="mmap", load_mode="mlock", flash_attn="auto")
    assert (chosen.flash_attn, chosen.load_mode) == ("auto", "mlock")
    assert "as --load-mode asks" in chosen.sentence()
    no_fa = _without(d, "--flash-attn", "-fa")
    assert decide(no_fa, gpu=True).flash_attn is None


def test_the_corrupted_copy_moves_only_the_chosen_tensors_blocks(tmp_path) -> None:
    """The wrong backend of the real-model tests: the tensor table read directly agrees with
    gguf's own reader, and the copy differs from the file only in the chosen tensor, whose
    blocks are in reverse order."""
    import gguf
    import numpy as np
    from support.corrupt_gguf import corrupt_copy, tensor_table
    from support.tiny_models import write_llama_model

    model = write_llama_model(tmp_path / "tiny.gguf", 64, 2, seed=7)
    reader = gguf.GGUFReader(model)
    assert [(t.name, int(t.data_offset), int(t.n_bytes)) for t in reader.tensors] == \
        [(name, offset, size) for name, _, offset, size in tensor_table(model)]
    copy = tmp_path / "copy.gguf"
    assert corrupt_copy(model, copy, r"^blk\.1\.ffn_down\.weight$") == ["blk.1.ffn_down.weight"]
    changed = gguf.GGUFReader(copy)
    for before, after in zip(reader.tensors, changed.tensors, strict=True):
        if before.name == "blk.1.ffn_down.weight":
            assert np.array_equal(np.asarray(after.data).ravel(), np.asarray(before.data).ravel()[::-1])
        else:
            assert np.array_equal(np.asarray(after.data), np.asarray(before.data)), before.name
    assert model.read_bytes()[:int(reader.tensors[0].data_offset)] == \
        copy.read_bytes()[:int(reader.tensors[0].data_offset)]
