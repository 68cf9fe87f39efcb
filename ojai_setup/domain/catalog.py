"""Matched checkpoint pairs: the routes ojai can serve, and whether one fits in memory.

A route is one served model configuration: a main GGUF plus its multi-token-prediction (MTP)
draft head, which is either a separate sidecar file (Gemma 4's ``gemma4-assistant``) or
``nextn`` layers inside the main file (Qwen3.6). A draft head only pays when it was trained
against that very main model, so every route names exact files from one repository.

The built-in routes live in ``catalog.toml`` next to this module. A user catalog (TOML, same
shape, e.g. ``~/.config/ojai/catalog.toml``) adds routes or overrides fields of built-in ones::

    [routes.gemma-4-26b-a4b]
    context_size = 65536            # only this field changes

    [routes.my-model]               # a new route: every required field
    title = "..."
    ...

Sizes and architecture numbers in the built-in catalog are best public knowledge; a route
with ``sizes_estimated = true`` says its byte counts are estimates. A file with a pinned
``sha256`` must also carry its exact ``size``.
"""

import math
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ojai_setup.core.errors import InputError
from ojai_setup.core.paths import GIB
from ojai_setup.formats.gguf import MtpKind

#: upstream llama.cpp KV cache types and their bytes per element (block size 32 for quants)
CACHE_TYPE_BYTES: dict[str, float] = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
}
CacheType = Literal["f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl"]

#: contexts are offered in steps of this many tokens
CONTEXT_STEP = 1024
#: llama.cpp's physical batch (``-ub``, 512 unless set): sliding-window layers keep this many
#: cells beyond their window
DEFAULT_UBATCH = 512
#: llama.cpp pads a stream's KV cells to this many
KV_PAD = 256


def _pad(cells: int) -> int:
    return -(-cells // KV_PAD) * KV_PAD

_NAME_RE = r"^[a-z0-9][a-z0-9._-]*$"
_REPO_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"
_SHA256_RE = r"^[0-9a-f]{64}$"


class CatalogError(InputError):
    """A catalog file is unreadable or one of its entries is invalid; the text says where."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelFile(_Model):
    """One file of a route, as named in its Hugging Face repository."""

    file: str = Field(min_length=1)
    #: bytes; an estimate when the route says ``sizes_estimated``
    size: int = Field(gt=0)
    #: the hub's LFS sha256, when pinned; otherwise the hub's value is fetched at download time
    sha256: str | None = Field(default=None, pattern=_SHA256_RE)

    @field_validator("file")
    @classmethod
    def _relative_posix(cls, value: str) -> str:
        p = PurePosixPath(value)
        if p.is_absolute() or ".." in p.parts or "\\" in value:
            raise ValueError("must be a path inside the repository (no leading '/', no '..')")
        return value


class KvLayout(_Model):
    """Architecture numbers that give the KV cache size for a context.

    Full-attention layers hold ``ctx`` tokens; sliding-window layers hold at most
    ``swa_window`` tokens. ``state_bytes`` is fixed per-sequence memory that does not grow
    with the context (the recurrent state of linear-attention layers).
    """

    full_layers: int = Field(ge=0)
    full_kv_heads: int = Field(ge=0)
    full_head_dim: int = Field(ge=0)
    swa_layers: int = Field(default=0, ge=0)
    swa_kv_heads: int = Field(default=0, ge=0)
    swa_head_dim: int = Field(default=0, ge=0)
    swa_window: int = Field(default=0, ge=0)
    state_bytes: int = Field(default=0, ge=0)
    #: full-attention layers of MTP heads inside the file: llama.cpp caches them only when it
    #: drafts with them (the draft context of ``--spec-type draft-mtp``)
    mtp_layers: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _swa_complete(self) -> "KvLayout":
        if self.swa_layers and not (self.swa_kv_heads and self.swa_head_dim and self.swa_window):
            raise ValueError("swa_layers needs swa_kv_heads, swa_head_dim and swa_window")
        return self

    def bytes_for(self, ctx_size: int, cache_type: CacheType = "f16", *, slots: int = 1,
                  ubatch: int = DEFAULT_UBATCH, draft: bool = False, rollback: int = 0) -> int:
        """KV cache bytes (K and V) of a llama-server started with ``--ctx-size ctx_size
        --parallel slots``, as llama.cpp (build 11434) allocates them.

        Each slot is one stream of ``ctx_size / slots`` cells, padded to 256
        (``llama-context.cpp``: ``n_ctx_seq``); a sliding-window layer keeps, per stream,
        ``window + ubatch`` cells padded to 256 but never more than the stream's
        (``llama-kv-cache-iswa.cpp``); the recurrent state (``state_bytes``) is per slot, and
        drafting with MTP keeps ``rollback`` (``--spec-draft-n-max``) more copies of it to roll
        back rejected drafts (``common.h``: ``need_n_rs_seq``). ``draft``: the MTP heads inside
        the file draft, so their ``mtp_layers`` are cached too.
        """
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        per_elem = CACHE_TYPE_BYTES[cache_type]
        cells = _pad(ctx_size // slots)
        swa_cells = _pad(min(cells, self.swa_window + ubatch)) if self.swa_layers else 0
        layers = self.full_layers + (self.mtp_layers if draft else 0)
        full = layers * 2 * self.full_kv_heads * self.full_head_dim * cells
        swa = self.swa_layers * 2 * self.swa_kv_heads * self.swa_head_dim * swa_cells
        return (math.ceil((full + swa) * slots * per_elem)
                + self.state_bytes * slots * (1 + rollback))


# Footprint and Fit are built (defer_build) when a route is first fitted: most runs fit none.
class Footprint(_Model):
    """What serving a route costs besides its context: the weights (main, and the MTP sidecar
    when it is loaded), the layout of its KV cache, and fixed overhead. From the catalog
    (:meth:`Route.footprint`) or, once downloaded, from the GGUF files themselves."""

    model_config = ConfigDict(defer_build=True)

    main_bytes: int = Field(ge=0)
    draft_bytes: int = Field(default=0, ge=0)
    kv: KvLayout
    overhead_bytes: int = Field(ge=0)
    #: where the numbers come from, for the plan's sentence
    source: str = "catalog"
    #: ``--spec-draft-n-max`` of the MTP route (recurrent states kept for rollback)
    draft_n_max: int = 0

    def weights(self, *, draft: bool = True) -> int:
        return self.main_bytes + (self.draft_bytes if draft else 0)

    def kv_bytes(self, ctx_size: int, cache_type: CacheType = "f16", *, slots: int = 1,
                 draft: bool = True) -> int:
        return self.kv.bytes_for(ctx_size, cache_type, slots=slots, draft=draft,
                                 rollback=self.draft_n_max if draft else 0)

    def need(self, ctx_size: int, cache_type: CacheType = "f16", *, slots: int = 1,
             draft: bool = True) -> int:
        return (self.weights(draft=draft) + self.kv_bytes(ctx_size, cache_type, slots=slots,
                                                          draft=draft) + self.overhead_bytes)


class Route(_Model):
    """One served model configuration: main file(s), MTP draft head, memory numbers."""

    name: str = Field(pattern=_NAME_RE)
    title: str = Field(min_length=1)
    repo: str = Field(pattern=_REPO_RE)
    revision: str = Field(default="main", min_length=1)
    #: the main model; several files when the GGUF is split (metadata is in the first)
    main: tuple[ModelFile, ...] = Field(min_length=1)
    #: the MTP sidecar, for ``mtp = "sidecar"`` only
    draft: ModelFile | None = None
    mtp: MtpKind
    #: Lemonade's checkpoint strings (a quant name or a file after the colon)
    lemonade_checkpoint: str = Field(min_length=1)
    lemonade_draft_checkpoint: str | None = None
    kv: KvLayout
    context_size: int = Field(gt=0)
    max_context: int = Field(gt=0)
    #: starting ``--spec-draft-n-max`` (the unsloth MTP guide suggests 2)
    draft_n_max: int = Field(default=2, ge=1)
    #: compute buffers and runtime overhead beyond weights and KV cache
    overhead_bytes: int = Field(default=GIB, ge=0)
    sizes_estimated: bool = False
    note: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> "Route":
        if self.mtp == "sidecar" and self.draft is None:
            raise ValueError("mtp = 'sidecar' needs a draft file")
        if self.mtp == "in_file" and self.draft is not None:
            raise ValueError("mtp = 'in_file' takes no draft file: the heads are inside the main file")
        if (self.draft is None) != (self.lemonade_draft_checkpoint is None):
            raise ValueError("lemonade_draft_checkpoint is given exactly when there is a draft file")
        if self.context_size > self.max_context:
            raise ValueError(f"context_size {self.context_size} exceeds max_context {self.max_context}")
        if self.sizes_estimated and any(f.sha256 for f in self.files()):
            raise ValueError("a file with a pinned sha256 needs its exact size: set sizes_estimated = false")
        return self

    def files(self) -> tuple[ModelFile, ...]:
        """Every file to download: main file(s), then the draft."""
        return self.main + ((self.draft,) if self.draft else ())

    @property
    def weights_bytes(self) -> int:
        return sum(f.size for f in self.files())

    def footprint(self) -> Footprint:
        """What serving this route costs besides its context, by the catalog's numbers."""
        return Footprint(main_bytes=sum(f.size for f in self.main),
                         draft_bytes=self.draft.size if self.draft else 0, kv=self.kv,
                         overhead_bytes=self.overhead_bytes, draft_n_max=self.draft_n_max,
                         source="catalog estimates" if self.sizes_estimated else "catalog")

    def memory_need(self, ctx_size: int, cache_type: CacheType = "f16", *, slots: int = 1,
                    draft: bool = True) -> int:
        """Bytes to serve this route at ``ctx_size``: weights + KV cache + overhead."""
        return self.footprint().need(ctx_size, cache_type, slots=slots, draft=draft)

    def main_path(self, models_dir: str) -> str:
        """Machine path of the (first) main file under ``models_dir``."""
        return model_path(models_dir, self.repo, self.main[0].file)

    def draft_path(self, models_dir: str) -> str | None:
        return model_path(models_dir, self.repo, self.draft.file) if self.draft else None


def model_path(models_dir: str, repo: str, file: str) -> str:
    """Where a repository file lives in the models folder: ``<models_dir>/<org>/<repo>/<file>``."""
    return str(PurePosixPath(models_dir) / repo / file)


class Catalog(_Model):
    routes: dict[str, Route]

    def get(self, name: str) -> Route:
        try:
            return self.routes[name]
        except KeyError:
            known = ", ".join(sorted(self.routes))
            raise CatalogError(f"no route named {name!r}; known routes: {known}") from None


# -- loading ---------------------------------------------------------------------------------

def _builtin_text() -> str:
    return Path(__file__).with_name("catalog.toml").read_text(encoding="utf-8")


def _parse_toml(text: str, source: str) -> dict[str, dict[str, Any]]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{source}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"routes"})
    if unknown:
        raise CatalogError(f"{source}: unknown top-level key(s) {', '.join(unknown)}; expected [routes.<name>] tables")
    routes = data.get("routes", {})
    if not isinstance(routes, dict) or not all(isinstance(v, dict) for v in routes.values()):
        raise CatalogError(f"{source}: routes: each route is a table, [routes.<name>]")
    return routes


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Tables merge key by key; any other value (including arrays) is replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _validate(name: str, raw: dict[str, Any], source: str) -> Route:
    try:
        return Route.model_validate({**raw, "name": name})
    except ValidationError as exc:
        from ojai_setup.core.problems import problems

        raise CatalogError(f"{source}: {problems(exc.errors(), prefix=f'routes.{name}.')} "
                           "(the shape of a route is in ojai_setup/domain/catalog.toml); fix "
                           "the route or remove it") from None


def load_catalog(user_file: Path | None = None) -> Catalog:
    """The built-in routes, with the routes of ``user_file`` (if given and present) on top.

    A user route with a built-in name overrides only the fields it sets; a new name adds a
    route. Raises :class:`CatalogError` naming the file and the field of the first bad entry.
    """
    builtin_source = "built-in catalog.toml"
    raw = _parse_toml(_builtin_text(), builtin_source)
    sources = {name: builtin_source for name in raw}
    if user_file is not None and user_file.is_file():
        try:
            text = user_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CatalogError(f"{user_file}: cannot read: {exc}") from None
        for name, entry in _parse_toml(text, str(user_file)).items():
            if not re.match(_NAME_RE, name):
                raise CatalogError(f"{user_file}: routes.{name}: route names are lower-case letters, digits, '.', '_' and '-'")
            raw[name] = _merge(raw[name], entry) if name in raw else entry
            sources[name] = str(user_file)
    return Catalog(routes={name: _validate(name, entry, sources[name]) for name, entry in raw.items()})


# -- memory fit ------------------------------------------------------------------------------

class Fit(_Model):
    """Whether a route fits a memory budget at a context size, and what would fit if not."""

    model_config = ConfigDict(defer_build=True)

    route: str
    ctx_size: int
    cache_type: CacheType
    budget_bytes: int
    weights_bytes: int
    kv_bytes: int
    overhead_bytes: int
    need_bytes: int
    fits: bool
    #: how many bytes are missing (0 when it fits)
    shortfall_bytes: int
    #: the largest context (a multiple of CONTEXT_STEP, up to the route's max) that fits; None
    #: when not even the smallest step does
    max_ctx: int | None
    #: other routes that fit at ``ctx_size``, smallest need first
    smaller_routes: tuple[str, ...] = ()
    #: llama-server slots (``--parallel``) sharing ``ctx_size``
    slots: int = 1
    #: where the sizes come from (:attr:`Footprint.source`)
    source: str = "catalog"

    def sentence(self) -> str:
        gib = lambda n: f"{n / GIB:.1f} GiB"  # noqa: E731
        where = f"ctx {self.ctx_size}" + (f" ({self.slots} slots)" if self.slots > 1 else "")
        head = (f"{self.route} at {where} needs {gib(self.need_bytes)} "
                f"(weights {gib(self.weights_bytes)}, KV {gib(self.kv_bytes)}, overhead "
                f"{gib(self.overhead_bytes)}) of {gib(self.budget_bytes)}")
        if self.fits:
            return head + ": fits."
        tail = [f"{gib(self.shortfall_bytes)} short"]
        if self.max_ctx is not None:
            tail.append(f"ctx {self.max_ctx} fits")
        if self.smaller_routes:
            tail.append("routes that fit: " + ", ".join(self.smaller_routes))
        if self.max_ctx is None and not self.smaller_routes:
            tail.append("no smaller context or listed route fits")
        return head + ": " + "; ".join(tail) + "."


def fit(route: Route, ctx_size: int, budget_bytes: int, *, cache_type: CacheType = "f16",
        alternatives: Iterable[Route] = (), slots: int = 1, draft: bool = True,
        footprint: Footprint | None = None, name: str | None = None) -> Fit:
    """Weights (main, and the draft unless ``draft=False``) + the KV cache of ``ctx_size``
    shared by ``slots`` + overhead, against ``budget_bytes``.

    ``footprint``: the route's sizes read from its files (default: the catalog's). ``name``:
    the served route's name in sentences (default: the catalog route's). ``alternatives``
    (e.g. the catalog's other routes) are checked at the same context when this route misses.
    ``max_ctx`` is then the largest context, ``slots`` times a multiple of CONTEXT_STEP and at
    most the route's ``max_context`` per slot, that fits.
    """
    if ctx_size <= 0:
        raise ValueError(f"context size must be positive, got {ctx_size}")
    size = footprint or route.footprint()
    kv = size.kv_bytes(ctx_size, cache_type, slots=slots, draft=draft)
    weights = size.weights(draft=draft)
    need = weights + kv + size.overhead_bytes
    fits = need <= budget_bytes
    smaller: tuple[str, ...] = ()
    if not fits:
        others = [(r.memory_need(ctx_size, cache_type, slots=slots, draft=draft), r.name)
                  for r in alternatives
                  if r.name != route.name and ctx_size // slots <= r.max_context]
        smaller = tuple(n for need_, n in sorted(others) if need_ <= budget_bytes)
    return Fit(
        route=name or route.name, ctx_size=ctx_size, cache_type=cache_type,
        budget_bytes=budget_bytes, weights_bytes=weights, kv_bytes=kv,
        overhead_bytes=size.overhead_bytes, need_bytes=need, fits=fits,
        shortfall_bytes=max(0, need - budget_bytes),
        max_ctx=_max_ctx(route, size, budget_bytes, cache_type, slots, draft),
        smaller_routes=smaller, slots=slots, source=size.source,
    )


def _max_ctx(route: Route, size: Footprint, budget_bytes: int, cache_type: CacheType,
             slots: int, draft: bool) -> int | None:
    """Largest ``slots`` x multiple of CONTEXT_STEP (at most ``route.max_context`` per slot)
    whose need fits."""
    lo, hi = 0, route.max_context // CONTEXT_STEP
    while lo < hi:  # need grows with the context, so bisect on the step count
        mid = (lo + hi + 1) // 2
        if size.need(mid * CONTEXT_STEP * slots, cache_type, slots=slots,
                     draft=draft) <= budget_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo * CONTEXT_STEP * slots if lo else None
