"""Choosing a backend and its drafting by measurement at the owner's context depth: the
arithmetic of ``ojai tune``'s backend x drafting x depth sweep (no I/O).

A *cell* is one llama-server build (a backend) served plain or drafted (its best drafting
setting from the drafting sweep), measured at one depth (that many tokens of context already
in the prompt): prompt processing and generation speed, the median of its runs.

The measurement's own noise comes from the same run: two identical plain servers of one
build answer the same requests, one after the other, and the relative gap of each pair's
generation speed is noise (:func:`noise_of`). A comparison counts only when it clears the
largest such gap:

- drafting is kept on a backend only when its drafted cell beats its plain cell at the depth
  by more than the noise (and the backend's long generation showed no collapse);
- another backend replaces the route's own only when it beats it by more than the noise;
- a backend that failed the correctness gate is never a candidate ("correct first, then
  fastest at this depth").

The limit for plain decoding is the bytes one token reads (the weights of the layers used,
:func:`ojai_setup.formats.gguf.weights_read_per_token`, and the KV cache of the positions before
it at the depth) over the memory bandwidth: no plain decoder on that memory is faster; drafting
can be, since one pass emits several tokens.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict


class Noise(BaseModel):
    """Two identical plain servers, paired: the relative gaps of their generation speeds."""

    model_config = ConfigDict(frozen=True)

    pairs: int
    median: float  # median |a / b - 1|
    max: float  # the largest gap: the bar a comparison must clear

    def sentence(self) -> str:
        return (f"two identical plain servers differed by a median {self.median * 100:.1f} %, "
                f"up to {self.max * 100:.1f} %, over {self.pairs} paired runs")


def noise_of(a: Sequence[float], b: Sequence[float]) -> Noise | None:
    """The noise of paired speeds ``a[i]``, ``b[i]`` of two identical servers; None without
    a usable pair."""
    gaps = [abs(x / y - 1.0) for x, y in zip(a, b, strict=False) if x and y and x > 0 and y > 0]
    if not gaps:
        return None
    return Noise(pairs=len(gaps), median=statistics.median(gaps), max=max(gaps))


class Cell(BaseModel):
    """One backend, plain or drafted, at one depth."""

    binary: str
    backend: str  # its label: vulkan, hip, cpu, or the binary's folder
    drafting: str  # "plain", or the drafted setting's label (``ngram-simple size-m 4``)
    depth: int
    runs: int = 0
    prompt_tps: float | None = None  # median prompt processing speed (tokens/s)
    gen_tps: float | None = None  # median generation speed (tokens/s)
    prompt_runs: list[float] = []
    gen_runs: list[float] = []
    error: str | None = None

    @property
    def plain(self) -> bool:
        return self.drafting == "plain"


def median_or_none(values: Sequence[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return statistics.median(values) if values else None


class Choice(BaseModel):
    """The cell chosen at one depth, and the sentence that says why."""

    binary: str | None = None
    drafted: bool = False
    depth: int
    gen_tps: float | None = None
    reason: str


def _speed(c: Cell) -> float:
    return c.gen_tps or 0.0


def _beats(a: float, b: float, bar: float) -> bool:
    return a > b * (1.0 + bar)


def choose(cells: Sequence[Cell], depth: int, *, own: str, allowed: dict[str, bool],
           drafting_ok: dict[str, bool], noise: Noise | None) -> Choice:
    """The cell to serve at ``depth``. ``allowed[binary]``: the backend passed the gate (or
    was not gated); ``drafting_ok[binary]``: its drafting may be chosen (no collapse in the
    long generation, a drafted setting measured). ``own`` is the route's own binary, the one
    kept unless another clears the noise."""
    bar = noise.max if noise is not None else 0.0
    at = [c for c in cells if c.depth == depth and c.gen_tps and allowed.get(c.binary)]
    if not at:
        return Choice(depth=depth, reason=f"nothing measured at depth {depth} on a backend "
                      "that passed the correctness gate")
    best: dict[str, Cell] = {}
    for binary in dict.fromkeys(c.binary for c in at):
        plain = next((c for c in at if c.binary == binary and c.plain), None)
        drafted = [c for c in at if c.binary == binary and not c.plain and drafting_ok.get(binary)]
        top = max(drafted, key=_speed, default=None)
        if top is not None and (plain is None or _beats(_speed(top), _speed(plain), bar)):
            best[binary] = top
        elif plain is not None:
            best[binary] = plain
    winner = max(best.values(), key=_speed)
    mine = best.get(own)
    how = f"{noise.max * 100:.1f} % noise" if noise is not None else "no noise measured"
    if mine is not None and winner.binary != own and not _beats(_speed(winner), _speed(mine), bar):
        reason = (f"{mine.backend} {mine.drafting} kept: {winner.backend} {winner.drafting} "
                  f"({_speed(winner):.1f} tokens/s) is not faster than {_speed(mine):.1f} "
                  f"tokens/s by more than the {how}")
        winner = mine
    else:
        others = [c for c in best.values() if c is not winner]
        vs = (", against " + ", ".join(f"{c.backend} {c.drafting} {_speed(c):.1f}" for c in others) + " tokens/s"
              if others else "")
        reason = (f"{winner.backend} {winner.drafting}: {_speed(winner):.1f} tokens/s at depth "
                  f"{depth}{vs} (comparisons clear the {how})")
    return Choice(binary=winner.binary, drafted=not winner.plain, depth=depth,
                  gen_tps=winner.gen_tps, reason=reason)


class Limit(BaseModel):
    """The box's limit for plain decoding: bytes a token reads over the memory bandwidth. A
    token reads the weights of the layers it uses (``bytes_per_token``) and, at a depth, the
    KV cache of every position before it (``kv_bytes``: depth -> bytes, from the model's KV
    layout and the route's cache type), so the limit falls with depth."""

    bytes_per_token: int
    bandwidth: float  # bytes per second
    source: str  # "measured: ..." or "given with --bandwidth"
    #: KV cache bytes a token reads at each depth of the sweep (empty: the layout is unknown)
    kv_bytes: dict[int, int] = {}

    @property
    def tokens_per_second(self) -> float:
        return self.bandwidth / self.bytes_per_token if self.bytes_per_token else 0.0

    def tokens_per_second_at(self, depth: int) -> float:
        """The limit at ``depth``: weights and that depth's KV cache over the bandwidth."""
        read = self.bytes_per_token + self.kv_bytes.get(depth, 0)
        return self.bandwidth / read if read else 0.0

    def sentence(self) -> str:
        text = (f"plain decoding limit {self.tokens_per_second:.1f} tokens/s: "
                f"{self.bytes_per_token / 1e6:.0f} MB of weights a token over "
                f"{self.bandwidth / 1e9:.1f} GB/s ({self.source})")
        deeper = [(d, kv) for d, kv in sorted(self.kv_bytes.items()) if d and kv]
        if deeper:
            text += "; with the KV cache read at depth: " + ", ".join(
                f"{self.tokens_per_second_at(d):.1f} at {d} (+{kv / 1e6:.0f} MB)"
                for d, kv in deeper)
        return text
