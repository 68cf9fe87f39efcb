"""The whole deployment against the memory it may use: which routes fit, alone and together.

A catalog model is served by two llama-server routes on the GPU, each a process with its own
copy of the weights and its own KV cache: ``<model>-mtp`` (one slot, the MTP draft head loaded)
and ``<model>`` (``PLAIN_SLOTS`` slots sharing ``slots x context`` cells, no draft). Both come
out of the GPU budget (the TTM limit). Each is fitted with its real context and slots
(:func:`~ojai_setup.domain.catalog.fit`), then the pair: when both fit alone but not at once,
the plan says so and their systemd units conflict (``Conflicts=``), so that starting one stops
the other. The FastFlowLM route runs on the NPU, whose buffers are ordinary system memory
(the amdxdna driver's, not TTM's): it is fitted into the RAM the GPU budget leaves (less the
system's share) and runs beside either GPU route.

The sizes are the catalog's until the files are downloaded; then the weights are the files'
sizes and the KV layout is read from the main GGUF's metadata (:func:`kv_layout`) the way
llama.cpp's loader reads it.
"""

from __future__ import annotations

from typing import NamedTuple

from ojai_setup.core.units import gib_text
from ojai_setup.domain.catalog import CacheType, Fit, Footprint, KvLayout, Route, fit
from ojai_setup.domain.routes import route_names
from ojai_setup.formats.gguf import ModelInfo

#: slots of the plain route (``--parallel``)
PLAIN_SLOTS = 4
#: bytes per element of llama.cpp's recurrent state (``r`` and ``s`` caches are f32)
_STATE_ELEMENT = 4


#: architectures whose files carry no sliding-window pattern: llama.cpp makes all but every
#: n-th layer slide (``src/models/gemma3.cpp``: ``load_swa_pattern(ml, 6)``)
_SWA_EVERY = {"gemma3": 6,
              # every other layer, the first sliding (src/models/openai-moe.cpp: load_swa_pattern(ml, 2))
              "gpt-oss": 2}


def kv_layout(info: ModelInfo) -> KvLayout | None:
    """The KV cache layout of a main model from its GGUF metadata, or None when the metadata
    does not say enough (then the catalog's layout is used).

    As llama.cpp's loader reads it: ``head_count_kv`` per layer (or one for all);
    ``key_length``/``value_length`` (default: ``embedding_length / head_count``) and their
    ``_swa`` variants; ``sliding_window_pattern`` marks the sliding layers; the last
    ``shared_kv_layers`` reuse earlier caches (Gemma 4); in hybrid models (``qwen35``) every
    ``full_attention_interval``-th layer (default 4) is attention and the others keep a
    recurrent state of ``(conv_kernel - 1) * (inner + 2 * groups * state) + state * inner``
    floats, MTP layers (the last ``nextn_predict_layers``) being attention cached only when
    drafting (``mtp_layers``). Where layers of one
    kind differ in heads, the largest is taken (an upper bound).
    """
    n = info.block_count
    if not n:
        return None
    heads = info.head_count_kv
    if len(heads) == 1:
        heads = heads * n
    if len(heads) != n:
        return None
    default_dim = (info.embedding_length // info.head_count
                   if info.embedding_length and info.head_count else None)
    k_full = info.key_length or default_dim
    v_full = info.value_length or k_full
    if not k_full or not v_full:
        return None
    k_swa = info.key_length_swa or k_full
    v_swa = info.value_length_swa or v_full
    pattern = info.sliding_window_pattern
    sliding = [bool(pattern[i]) if i < len(pattern) else False for i in range(n)]
    every = _SWA_EVERY.get(info.architecture)
    if not pattern and every and info.sliding_window:
        sliding = [i % every < every - 1 for i in range(n)]
    if any(sliding) and not info.sliding_window:
        return None
    hybrid = info.full_attention_interval is not None or info.ssm_state_size is not None
    interval = info.full_attention_interval or 4
    trunk = n - info.nextn_predict_layers
    recurrent = [hybrid and i < trunk and (i + 1) % interval != 0 for i in range(n)]
    own_cache = n - info.shared_kv_layers
    full = [i for i in range(min(own_cache, trunk)) if not sliding[i] and not recurrent[i]
            and heads[i]]
    mtp = [i for i in range(trunk, own_cache) if not sliding[i] and heads[i]]
    swa = [i for i in range(own_cache) if sliding[i] and not recurrent[i] and heads[i]]
    state = 0
    if any(recurrent):
        parts = (info.ssm_conv_kernel, info.ssm_inner_size, info.ssm_state_size,
                 info.ssm_group_count)
        conv, inner, d_state, groups = parts
        if conv is None or inner is None or d_state is None or groups is None:
            return None
        per_layer = max(conv - 1, 0) * (inner + 2 * groups * d_state) + d_state * inner
        state = sum(recurrent) * per_layer * _STATE_ELEMENT
    return KvLayout(
        full_layers=len(full), full_kv_heads=max((heads[i] for i in full + mtp), default=0),
        full_head_dim=max(k_full, v_full) if full or mtp else 0, mtp_layers=len(mtp),
        swa_layers=len(swa), swa_kv_heads=max((heads[i] for i in swa), default=0),
        swa_head_dim=max(k_swa, v_swa) if swa else 0,
        swa_window=(info.sliding_window or 0) if swa else 0, state_bytes=state)


def footprint_from_files(route: Route, main_bytes: int, main_info: ModelInfo | None,
                         draft_bytes: int | None) -> Footprint:
    """The route's footprint from its downloaded files: their sizes, and the KV layout of the
    main file's metadata (the catalog's when the metadata lacks it). An MTP sidecar adds its
    weights but no KV cache: it reads the main model's. A separate draft model adds its
    weights and a KV cache of its own (the main file's layout when it drafts for itself)."""
    layout = kv_layout(main_info) if main_info is not None else None
    draft = draft_bytes if draft_bytes is not None else (route.draft.size if route.draft else 0)
    source = "the GGUF files" if layout is not None else "the files' sizes, the catalog's KV layout"
    draft_kv = route.draft_kv or ((layout or route.kv) if route.self_draft else None)
    return Footprint(main_bytes=main_bytes, draft_bytes=draft, kv=layout or route.kv,
                     overhead_bytes=route.overhead_bytes, draft_n_max=route.draft_n_max,
                     source=source, draft_kv=draft_kv)


_gib = gib_text


class Deployment(NamedTuple):
    """The GPU routes of one catalog model fitted to the GPU budget, alone and together."""

    budget_bytes: int
    #: the drafted route; None for an embedding model, served by its plain route alone
    mtp: Fit | None
    #: the plain route at the context it gets (``PLAIN_SLOTS`` x the route's, or the largest
    #: that fits alone); None when not even the smallest context fits
    plain: Fit | None
    #: the plain route's context as asked (slots x the route's context)
    plain_asked_ctx: int
    source: str
    #: routes (by name) whose units must conflict, each with the routes it cannot run beside
    conflicts: dict[str, tuple[str, ...]]

    @property
    def together_bytes(self) -> int:
        return ((self.mtp.need_bytes if self.mtp else 0)
                + (self.plain.need_bytes if self.plain else 0))

    @property
    def together(self) -> bool:
        """Both GPU routes fit the budget at once (an embedding model's one route: it fits)."""
        return self.plain is not None and self.together_bytes <= self.budget_bytes

    def sentence(self, *, units: bool = False) -> str:
        """What the plan says about memory: each route's need and which run together
        (``units``: systemd units are written, and say so)."""
        if self.mtp is None:  # an embedding model: its plain route alone
            if self.plain is None:
                return (f"not even ctx {PLAIN_SLOTS * 1024} ({PLAIN_SLOTS} slots) fits the "
                        f"{_gib(self.budget_bytes)} GPU budget (sizes from {self.source})")
            return (f"{self.plain.route} at ctx {self.plain.ctx_size} ({self.plain.slots} slots) "
                    f"needs {_gib(self.plain.need_bytes)} of the {_gib(self.budget_bytes)} GPU "
                    f"budget (sizes from {self.source})")
        parts = [f"{self.mtp.route} at ctx {self.mtp.ctx_size} needs {_gib(self.mtp.need_bytes)}"]
        if self.plain is not None:
            parts.append(f"{self.plain.route} at ctx {self.plain.ctx_size} ({self.plain.slots} "
                         f"slots) {_gib(self.plain.need_bytes)}")
        head = (", ".join(parts) + f" of the {_gib(self.budget_bytes)} GPU budget (sizes from "
                f"{self.source})")
        if not self.mtp.fits:
            head += f"; {self.mtp.route} does not fit ({_gib(self.mtp.shortfall_bytes)} short)"
        if self.plain is None:
            return head + f"; the plain route is left out: not even ctx {PLAIN_SLOTS * 1024} fits"
        if self.together:
            return head + f"; both run at once ({_gib(self.together_bytes)})"
        if self.mtp.fits and self.plain.fits:
            return (head + f"; each runs alone, not both at once ({_gib(self.together_bytes)})"
                    + ("; their units conflict (starting one stops the other)" if units else ""))
        return head

    def warnings(self) -> tuple[str, ...]:
        out = []
        if self.plain is not None and self.plain.ctx_size < self.plain_asked_ctx:
            out.append(f"{self.plain.route}: {self.plain_asked_ctx} tokens ({PLAIN_SLOTS} slots) "
                       f"do not fit the GPU budget; it gets ctx {self.plain.ctx_size}, the "
                       "largest that does")
        if (self.plain is not None and self.mtp is not None and not self.together
                and self.mtp.fits and self.plain.fits):
            out.append(f"{self.mtp.route} and {self.plain.route} cannot run at the same time "
                       f"({_gib(self.together_bytes)} of {_gib(self.budget_bytes)}): start one "
                       "or the other")
        return tuple(out)


def fit_gpu_routes(route: Route, budget_bytes: int, *, footprint: Footprint | None = None,
                   cache_type: CacheType = "f16", slots: int = PLAIN_SLOTS) -> Deployment:
    """Fit the MTP route (1 slot, draft loaded) and the plain route (``slots`` slots of the
    route's context, no draft; less when that does not fit alone) to ``budget_bytes``, then
    the two together."""
    size = footprint or route.footprint()
    mtp_name, plain_name = route_names(route.name, route.drafted_suffix)
    mtp = None if route.embedding else fit(route, route.context_size, budget_bytes,
                                           cache_type=cache_type, footprint=size, name=mtp_name)
    asked = route.context_size * slots
    plain: Fit | None = fit(route, asked, budget_bytes, cache_type=cache_type, slots=slots,
                            draft=False, footprint=size, name=plain_name)
    if plain is not None and not plain.fits:
        plain = (fit(route, plain.max_ctx, budget_bytes, cache_type=cache_type, slots=slots,
                     draft=False, footprint=size, name=plain_name)
                 if plain.max_ctx is not None else None)
    deployment = Deployment(budget_bytes=budget_bytes, mtp=mtp, plain=plain,
                            plain_asked_ctx=asked, source=size.source, conflicts={})
    if plain is not None and mtp is not None and not deployment.together:
        return Deployment(budget_bytes=budget_bytes, mtp=mtp, plain=plain, plain_asked_ctx=asked,
                          source=size.source,
                          conflicts={mtp_name: (plain_name,), plain_name: (mtp_name,)})
    return deployment
