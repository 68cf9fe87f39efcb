"""The correctness gate's arithmetic: does a backend compute what the CPU computes?

A backend under test and a CPU reference (the same build's CPU backend on the same GGUF) are
each asked, over one fixed text, for the next-token distribution at every position with the
true text as the prefix (teacher forcing; :mod:`ojai_setup.facts.distributions` reads them
from llama-server). This module compares the two lists; it does no I/O.

- **top-1 agreement**: the share of positions where both put the same token first.
- **mean KL divergence** ``KL(reference || test)`` in nats, per position, over the reference's
  top-K tokens plus one bucket for the rest of the vocabulary (llama-server returns the top K
  probabilities, not the whole distribution). A token of the reference's top K that the test
  did not list is given the smaller of the test's least listed probability and its unlisted
  mass (an upper bound on what it can hold, so the KL is not overstated). Coarse-graining
  never raises a KL divergence, so the figure is at most the full one when both lists share
  their tokens.

Thresholds (:data:`MIN_AGREEMENT`, :data:`MAX_MEAN_KL`), from measurements on the real Gemma 3
270M Q4_K_M with llama.cpp b11434's CPU build over this text (305 positions; ``python
benchmarks/gate.py``): legitimate changes of kernels and cache on the same file stay far inside
them (1 thread instead of 2: agreement 99.3 %, mean KL 0.0005 nats; a q8_0 KV cache: 94.8 %,
0.005; flash attention off: 93.8 %, 0.005; a 16-token batch: identical), while a copy of the file with one
layer's ``ffn_down`` blocks reversed falls to 43 % and 0.82 nats, and every layer's to 0 % and
3 nats. The public HIP failures on these iGPUs (perplexity 250,459 against 384 on the CPU;
1334 against 6.8) are a cross-entropy gap of 6.5 and 5.3 nats per token, over 100 times the
KL threshold (:func:`crossentropy_gap`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from ojai_setup.formats.llama_help import Dialect

#: how many of the most likely tokens each position reports
TOP_K = 20
#: the gate passes at or above this share of positions whose most likely token agrees
MIN_AGREEMENT = 0.80
#: ... and at or below this mean KL divergence per position (nats)
MAX_MEAN_KL = 0.05
#: a probability the arithmetic treats as zero (a KL term is then ``p * ln(p / FLOOR)``)
FLOOR = 1e-9

#: one position's distribution: (token id, probability) pairs, most likely first; empty when
#: the server gave no usable probabilities (NaN, nothing listed)
TopK = tuple[tuple[int, float], ...]

#: The fixed text the gate reads: prose, numbers, a list and code, so that the distributions
#: cover more than one kind of text. Changing it changes every figure: keep it fixed.
TEXT = """\
The lighthouse on the northern cape was built in 1874 from granite quarried two miles inland, \
and for ninety years a keeper climbed its hundred and twelve steps every evening to light the \
lamp. The logbook records the weather at six in the morning and six at night, the ships that \
passed, and the oil that was burned: about four gallons on a calm night, nearly six in a gale.

When the light was automated in 1964, the last keeper, Margaret Hale, wrote a single line \
under her final entry: "Wind west, moderate. Sea slight. All well." The museum in the old \
store room now keeps the logbook beside the brass lens, which weighs almost two tonnes.

To check a measurement, repeat it under the same conditions and compare the results:

1. Record the inputs exactly, including the version of every program involved.
2. Run the same procedure twice and note any difference between the two runs.
3. Only then change one thing at a time, and measure again.

def mean(values):
    total = 0.0
    for value in values:
        total += value
    return total / len(values)

print(mean([3.5, 4.0, 4.5]))  # prints 4.0

In the end, a result that cannot be repeated is not yet a result; it is a question that \
deserves a second, more careful look.
"""


class GateFigures(BaseModel):
    """How a backend's distributions compare with the reference's over the fixed text."""

    model_config = ConfigDict(frozen=True)

    positions: int  # positions compared
    agreement: float  # share of positions whose most likely token agrees (0..1)
    mean_kl: float  # nats per position, KL(reference || test)
    max_kl: float
    #: positions where the backend gave no usable distribution (NaN, empty): counted as
    #: disagreeing, with the KL of a test that put FLOOR on every token the reference lists
    unusable: int = 0
    min_agreement: float = MIN_AGREEMENT
    max_mean_kl: float = MAX_MEAN_KL

    @property
    def passed(self) -> bool:
        return (self.positions > 0 and self.agreement >= self.min_agreement
                and self.mean_kl <= self.max_mean_kl)

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "FAIL"

    def sentence(self, *, thresholds: bool = True) -> str:
        """``top-1 agreement 99.7 % (needs 80 %), mean KL 0.0004 nats (at most 0.05) over 300
        positions``; without ``thresholds``, the figures alone."""
        needs = f" (needs {self.min_agreement * 100:.0f} %)" if thresholds else ""
        at_most = f" (at most {self.max_mean_kl})" if thresholds else ""
        text = (f"top-1 agreement {self.agreement * 100:.1f} %{needs}, "
                f"mean KL {self.mean_kl:.4f} nats{at_most} over {self.positions} positions")
        if self.unusable:
            text += f"; {self.unusable} positions without usable probabilities"
        return text


def _usable(dist: TopK) -> bool:
    return bool(dist) and all(isinstance(p, float) and math.isfinite(p) and p >= 0.0 for _, p in dist)


def position_kl(reference: TopK, test: TopK) -> float:
    """``KL(reference || test)`` in nats over the reference's listed tokens plus one bucket for
    everything else (see the module's docstring for the test's unlisted tokens)."""
    listed = {tok: p for tok, p in test}
    test_rest = max(0.0, 1.0 - sum(listed.values()))
    unlisted = min(min(listed.values(), default=FLOOR), test_rest) if listed else FLOOR
    kl, q_used = 0.0, 0.0
    for tok, p in reference:
        q = listed.get(tok, unlisted)
        q = max(q, FLOOR)
        q_used += q
        if p > 0:
            kl += p * math.log(p / q)
    p_rest = max(0.0, 1.0 - sum(p for _, p in reference))
    q_rest = max(FLOOR, 1.0 - q_used)
    if p_rest > 0:
        kl += p_rest * math.log(p_rest / q_rest)
    return max(kl, 0.0)


def compare(reference: Sequence[TopK], test: Sequence[TopK], *,
            min_agreement: float = MIN_AGREEMENT, max_mean_kl: float = MAX_MEAN_KL) -> GateFigures:
    """The figures for two lists of per-position distributions over the same tokens.

    Positions where the reference itself has no usable distribution are left out (the
    reference is then broken, which :func:`compare` cannot judge); the lists must be equally
    long."""
    if len(reference) != len(test):
        raise ValueError(f"the reference has {len(reference)} positions and the test {len(test)}")
    agree, kls, unusable = 0, [], 0
    for ref, got in zip(reference, test, strict=True):
        if not _usable(ref):
            continue
        if not _usable(got):
            unusable += 1
            kls.append(position_kl(ref, ()))
            continue
        agree += ref[0][0] == max(got, key=lambda tp: tp[1])[0]
        kls.append(position_kl(ref, got))
    n = len(kls)
    return GateFigures(positions=n, agreement=agree / n if n else 0.0,
                       mean_kl=sum(kls) / n if n else math.inf, max_kl=max(kls, default=math.inf),
                       unusable=unusable, min_agreement=min_agreement, max_mean_kl=max_mean_kl)


def crossentropy_gap(ppl_test: float, ppl_reference: float) -> float:
    """The per-token cross-entropy gap (nats) that two perplexities on the same text imply:
    ``ln(ppl_test / ppl_reference)``, a lower bound of the mean KL the test would show."""
    return math.log(ppl_test / ppl_reference)


class Where(BaseModel):
    """What a failing backend ran on, from the facts (every field may be unknown)."""

    backend: str | None = None  # hip, vulkan, cpu, ...
    build: str | None = None  # the binary's version line
    binary: str | None = None
    gpu_target: str | None = None
    kernel: str | None = None
    firmware: str | None = None  # the GPU firmware package and its version


def other_backend(backend: str | None) -> str:
    """Which backend to use instead of one that failed the gate."""
    if backend in ("hip", "rocm"):
        return "the Vulkan build (--llamacpp nightly --backend vulkan) or the CPU"
    if backend == "vulkan":
        return "the ROCm/HIP build (--backend hip) or the CPU"
    if backend == "cpu":
        return "another build of llama.cpp (this CPU build disagrees with its own CPU reference)"
    return "another backend (Vulkan or ROCm/HIP), or the CPU"


def finding(route: str, figures: GateFigures, where: Where) -> str:
    """The sentence a failing backend's finding shows: what failed, on what, and what to use."""
    parts = [f"backend {where.backend or 'unknown'}",
             f"build {where.build or 'unknown'}",
             f"GPU {where.gpu_target or 'unknown'}",
             f"kernel {where.kernel or 'unknown'}",
             f"firmware {where.firmware or 'unknown'}"]
    return (f"route {route}: the backend does not compute what the CPU computes on the same "
            f"file ({figures.sentence()}); {', '.join(parts)}"
            + (f" ({where.binary})" if where.binary else "")
            + f". Do not serve it: use {other_backend(where.backend)}.")


#: the context the gate's own servers get: the text and a margin (the figures do not depend on
#: the context size; a small one keeps the CPU reference's memory small)
GATE_CTX = 1024


def _set(args: list[str], names: tuple[str, ...], value: str | None) -> list[str]:
    """``args`` with the option ``names`` (any spelling) set to ``value``, or removed (None)."""
    out, i, done = [], 0, False
    while i < len(args):
        if args[i] in names and i + 1 < len(args):
            if value is not None and not done:
                out += [args[i], value]
                done = True
            i += 2
            continue
        out.append(args[i])
        i += 1
    if value is not None and not done:
        out += [names[0], value]
    return out


def gate_args(args: list[str], dialect: "Dialect") -> list[str]:
    """A route's llama-server arguments (without the binary) as the gate runs them: drafting
    off, one slot, a small context, and ``--swa-full`` where the help has it (a sliding-window
    model's cache then keeps every position, so the prompt cache grows by one token per request
    instead of re-evaluating from a checkpoint; the attention mask is the same); the backend and
    every other setting as the route has them."""
    from ojai_setup.domain.render import plain_arm_args

    out = plain_arm_args(list(args), dialect)
    out = _set(out, ("--parallel", "-np"), "1")
    out = _set(out, ("--ctx-size", "-c"), str(GATE_CTX))
    if dialect.has("--swa-full") and "--swa-full" not in out:
        out.append("--swa-full")
    return out


def reference_args(args: list[str], dialect: "Dialect") -> list[str]:
    """The same build's CPU backend on the same file: :func:`gate_args` with no device to
    offload to and the weights memory-mapped. ``--device none`` where the help has it (with it, no layer, KV cache or
    operation goes to a GPU); older builds: ``-ngl 0`` and, where the help lists them,
    ``--no-kv-offload`` and ``--no-op-offload`` (a large batch's matrix products are otherwise
    still sent to the GPU)."""
    out = gate_args(args, dialect)
    out = _set(out, ("--n-gpu-layers", "-ngl", "--gpu-layers"), "0")
    # weights memory-mapped: the page cache can give them back, where a copy read into memory
    # beside a GPU route's could not
    if dialect.load_modes is not None and "mmap" in dialect.load_modes:
        out = _set(out, ("--load-mode", "-lm"), "mmap")
    out = [a for a in out if a not in ("--no-mmap", "--mlock")]
    if dialect.has("--device"):
        return _set(out, ("--device", "-dev"), "none")
    for flag in ("--no-kv-offload", "--no-op-offload"):
        if dialect.has(flag) and flag not in out:
            out.append(flag)
    return out
