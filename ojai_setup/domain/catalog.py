"""Matched checkpoint pairs: the routes ojai can serve, and whether one fits in memory.

A route is one served model configuration: a main GGUF and how it drafts. Drafting comes in
the kinds upstream llama.cpp offers:

- a multi-token-prediction (MTP) draft head, either a separate sidecar file (Gemma 4's
  ``gemma4-assistant``, ``mtp = "sidecar"``) or ``nextn`` layers inside the main file
  (Qwen3.6, ``mtp = "in_file"``): ``spec_type = "draft-mtp"``;
- a separate draft model of the same vocabulary (``spec_type = "draft-simple"`` with a
  ``draft`` file, possibly the main file itself: self-draft), with its own GPU layers,
  context and KV cache types;
- n-gram drafting from the tokens already seen (``spec_type = "ngram-simple"``, ...), no draft
  file, tuned by the ``[routes.X.ngram]`` knobs;
- chained types, ``spec_type = "draft-mtp,ngram-mod"``, where the binary takes a list.

A route that names none of these is plain: the model has no draft. ojai then offers n-gram
drafting of kind :data:`OFFERED_NGRAM` for its drafted route (the binary's own knobs), beside
the plain route every model gets; ``ojai bench`` and ``ojai tune`` decide whether it pays.

A draft head only pays when it was trained against that very main model, so every route names
exact files from one repository (a separate draft model may come from ``draft_repo``).

The built-in routes live in ``catalog.toml`` next to this module. A user catalog (TOML, same
shape, e.g. ``~/.config/ojai/catalog.toml``) adds routes or overrides fields of built-in ones::

    [routes.gemma-4-26b-a4b]
    context_size = 65536            # only this field changes

    [routes.my-model]               # a new route: every required field
    title = "..."
    ...

Sizes and architecture numbers in the built-in catalog are best public knowledge; a route
with ``sizes_estimated = true`` says the byte counts of its files without a pinned ``sha256``
are estimates. A file with a pinned ``sha256`` carries its exact ``size``, and both are checked
when it is downloaded.
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
from ojai_setup.domain.drafting import NGRAM_TYPE_KNOBS, is_ngram_type, words_of
from ojai_setup.core.units import gib_text
from ojai_setup.formats.gguf import MtpKind, PairKind

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
    #: bytes; an estimate when the route says ``sizes_estimated`` and no ``sha256`` is pinned
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
    #: a separate draft model's own KV cache layout (it keeps a cache of the same context)
    draft_kv: KvLayout | None = None

    def weights(self, *, draft: bool = True) -> int:
        return self.main_bytes + (self.draft_bytes if draft else 0)

    def kv_bytes(self, ctx_size: int, cache_type: CacheType = "f16", *, slots: int = 1,
                 draft: bool = True) -> int:
        own = self.draft_kv.bytes_for(ctx_size, cache_type, slots=slots) if (
            draft and self.draft_kv is not None) else 0
        return own + self.kv.bytes_for(ctx_size, cache_type, slots=slots, draft=draft,
                                       rollback=self.draft_n_max if draft else 0)

    def need(self, ctx_size: int, cache_type: CacheType = "f16", *, slots: int = 1,
             draft: bool = True) -> int:
        return (self.weights(draft=draft) + self.kv_bytes(ctx_size, cache_type, slots=slots,
                                                          draft=draft) + self.overhead_bytes)


#: ``--spec-type`` values a catalog route may name (upstream build 11434's list, less none)
SPEC_TYPES = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
              "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


#: the n-gram kind offered to a plain route (no MTP heads, no draft file, no ``spec_type``):
#: ``ngram-mod`` is the kind upstream makes its default (llama.cpp PR #28391)
OFFERED_NGRAM = "ngram-mod"




class NgramKnobs(_Model):
    """The knobs n-gram drafting reads, named as the help names them after each type's prefix
    (``--spec-ngram-simple-size-n`` is ``size_n``; ``--spec-ngram-mod-n-max`` is ``n_max``)."""

    size_n: int | None = Field(default=None, ge=1)
    size_m: int | None = Field(default=None, ge=1)
    min_hits: int | None = Field(default=None, ge=1)
    n_min: int | None = Field(default=None, ge=0)
    n_max: int | None = Field(default=None, ge=1)
    n_match: int | None = Field(default=None, ge=1)

    def flags(self) -> dict[str, int]:
        """``{"size-n": 3, ...}``: the set knobs, by their flag names (render's ``ngram``)."""
        return {k.replace("_", "-"): v for k, v in self.model_dump().items() if v is not None}


class Route(_Model):
    """One served model configuration: main file(s), how it drafts, memory numbers."""

    name: str = Field(pattern=_NAME_RE)
    title: str = Field(min_length=1)
    repo: str = Field(pattern=_REPO_RE)
    revision: str = Field(default="main", min_length=1)
    #: the main model; several files when the GGUF is split (metadata is in the first)
    main: tuple[ModelFile, ...] = Field(min_length=1)
    #: the MTP sidecar (``mtp = "sidecar"``), or the separate draft model of ``draft-simple``
    #: (the main file itself for self-draft)
    draft: ModelFile | None = None
    #: the repository of a separate draft model, when it is not ``repo``
    draft_repo: str | None = Field(default=None, pattern=_REPO_RE)
    #: where the MTP heads are; None for a model without them
    mtp: MtpKind | None = None
    #: the drafted route's ``--spec-type`` (a comma list chains types); default: ``draft-mtp``
    #: with MTP heads, ``draft-simple`` with a draft file
    spec_type: str | None = None
    ngram: NgramKnobs | None = None
    #: the separate draft model's GPU layers (``-ngld``), context and KV cache type
    draft_gpu_layers: int | Literal["auto", "all"] | None = None
    draft_ctx_size: int | None = Field(default=None, gt=0)
    draft_cache_type: CacheType | None = None
    #: a separate draft model's own KV cache layout (self-draft: the main model's ``kv``)
    draft_kv: KvLayout | None = None
    #: Lemonade's checkpoint strings (a quant name or a file after the colon)
    lemonade_checkpoint: str = Field(min_length=1)
    lemonade_draft_checkpoint: str | None = None
    #: the machine folder holding the main file(s) when they are the owner's own, used where they
    #: are (``--model /path/file.gguf``); None: downloaded from ``repo`` into the models folder
    local_dir: str | None = None
    #: an embedding model: served plain with ``--embeddings`` only (it generates no tokens, so
    #: nothing drafts), as one route, ``<name>``
    embedding: bool = False
    kv: KvLayout
    context_size: int = Field(gt=0)
    max_context: int = Field(gt=0)
    #: starting ``--spec-draft-n-max`` (the unsloth MTP guide suggests 2)
    draft_n_max: int = Field(default=2, ge=1)
    #: compute buffers and runtime overhead beyond weights and KV cache
    overhead_bytes: int = Field(default=GIB, ge=0)
    sizes_estimated: bool = False
    #: a route that exists for ojai's own tests (a tiny model): `ojai models` lists it with --all
    for_tests: bool = False
    note: str = ""
    #: launch settings (``-fa``, ``--load-mode``) when not ojai's defaults
    #: (:mod:`ojai_setup.domain.launch_defaults`); ``ojai setup --flash-attn/--load-mode`` win
    flash_attn: Literal["on", "off", "auto"] | None = None
    load_mode: Literal["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "Route":
        if self.mtp == "sidecar" and self.draft is None:
            raise ValueError("mtp = 'sidecar' needs a draft file")
        if self.mtp == "in_file" and self.draft is not None:
            raise ValueError("mtp = 'in_file' takes no draft file: the heads are inside the main file")
        if self.local_dir is not None and (not self.local_dir.startswith("/") or self.draft):
            raise ValueError("local_dir is an absolute folder of main files, without a draft file")
        if self.embedding and (self.mtp or self.draft or self.spec_type or self.ngram):
            raise ValueError("an embedding model generates no tokens to draft: it takes no mtp, "
                             "draft, spec_type or ngram")
        types = self.spec_types
        unknown = [t for t in types if t not in SPEC_TYPES]
        if unknown:
            raise ValueError(f"spec_type: unknown type {unknown[0]!r} (known: {', '.join(SPEC_TYPES)})")
        if "draft-mtp" in types and self.mtp is None:
            raise ValueError("spec_type draft-mtp needs MTP heads: set mtp = 'sidecar' or 'in_file'")
        if self.mtp is not None and "draft-mtp" not in types:
            raise ValueError("a route with MTP heads drafts with them: spec_type must include draft-mtp")
        models = [t for t in types if not is_ngram_type(t)]
        if len(models) > 1:
            raise ValueError(f"spec_type {self.spec_type!r} chains {len(models)} model drafters; "
                             "chain one with n-gram types")
        if self.draft is not None and not models:
            raise ValueError(f"spec_type {self.spec_type!r} drafts without a model: drop the draft file")
        if self.draft is None and models and models[0] != "draft-mtp":
            raise ValueError(f"spec_type {models[0]} needs a draft file")
        if self.ngram is not None:
            read = {k for t in types for k in NGRAM_TYPE_KNOBS.get(t, ())}
            unread = sorted(set(self.ngram.flags()) - read)
            if unread:
                raise ValueError(f"ngram: {', '.join(k.replace('-', '_') for k in unread)} is read "
                                 f"by none of {self.spec_type_value} (ngram-simple/ngram-map-k* read "
                                 "size_n, size_m, min_hits; ngram-mod reads n_min, n_max, n_match)")
        if self.draft_repo is not None and (self.draft is None or self.mtp is not None):
            raise ValueError("draft_repo is for a separate draft model (spec_type draft-simple)")
        if self.pair_kind != "draft_model" and (self.draft_gpu_layers is not None
                                                or self.draft_ctx_size is not None
                                                or self.draft_cache_type is not None
                                                or self.draft_kv is not None):
            raise ValueError("draft_gpu_layers, draft_ctx_size, draft_cache_type and draft_kv are for a "
                             "separate draft model (spec_type draft-simple)")
        if (self.draft is None) != (self.lemonade_draft_checkpoint is None):
            raise ValueError("lemonade_draft_checkpoint is given exactly when there is a draft file")
        if self.context_size > self.max_context:
            raise ValueError(f"context_size {self.context_size} exceeds max_context {self.max_context}")
        return self

    @property
    def spec_types(self) -> tuple[str, ...]:
        """The drafted route's speculative types (:attr:`spec_type` or its default: MTP heads
        draft with ``draft-mtp``, a draft file with ``draft-simple``, and a plain route is
        offered :data:`OFFERED_NGRAM`)."""
        if self.embedding:
            return ()
        value = self.spec_type or ("draft-mtp" if self.mtp else "draft-simple" if self.draft
                                   else OFFERED_NGRAM)
        return tuple(t.strip() for t in value.split(",") if t.strip())

    @property
    def plain(self) -> bool:
        """The catalog names no drafting for this model (no MTP heads, no draft file, no
        ``spec_type``): its drafted route is the n-gram kind ojai offers."""
        return self.mtp is None and self.draft is None and not self.spec_type

    @property
    def spec_type_value(self) -> str:
        return ",".join(self.spec_types)

    @property
    def pair_kind(self) -> PairKind:
        """What the pairing proof checks: the MTP heads (``in_file``/``sidecar``), a separate
        ``draft_model``, or nothing (``ngram``: no draft model to pair)."""
        if self.mtp is not None:
            return self.mtp
        return "draft_model" if self.draft is not None else "ngram"

    @property
    def self_draft(self) -> bool:
        """The draft model is the main file itself."""
        return (self.draft is not None and self.mtp is None and self.draft_repo in (None, self.repo)
                and self.draft.file == self.main[0].file)

    @property
    def model_drafted(self) -> bool:
        """Drafting reads ``--spec-draft-n-max`` (an MTP head or a draft model drafts)."""
        return any(not is_ngram_type(t) for t in self.spec_types)

    @property
    def drafting(self) -> str:
        """What drafts, in a few words: ``MTP sidecar``, ``MTP in-file``, ``self-draft``,
        ``draft model``, ``n-gram (ngram-simple)``; chained types joined with `` + ``;
        ``embeddings`` for an embedding model, which does not draft."""
        if self.embedding:
            return "embeddings"
        words = []
        for t in self.spec_types:
            if t == "draft-mtp":
                words.append("MTP " + ("sidecar" if self.mtp == "sidecar" else "in-file"))
            elif t == "draft-simple" and self.self_draft:
                words.append("self-draft")
            else:
                words.append(words_of(t))
        return " + ".join(words)

    @property
    def drafted_suffix(self) -> str:
        """The drafted route's name is ``<model>-<suffix>``: ``mtp``, ``draft`` or ``ngram``."""
        return {"in_file": "mtp", "sidecar": "mtp", "draft_model": "draft"}.get(self.pair_kind, "ngram")

    def ngram_args(self) -> list[str]:
        """The n-gram knobs as upstream build 11434 spells them, for every type that reads
        each (for a server ojai does not probe, such as Lemonade's own)."""
        knobs = self.ngram.flags() if self.ngram else {}
        return [arg for t in self.spec_types for k in NGRAM_TYPE_KNOBS.get(t, ()) if k in knobs
                for arg in (f"--spec-{t}-{k}", str(knobs[k]))]

    def files(self) -> tuple[ModelFile, ...]:
        """Every file to download: main file(s), then the draft (once, when it is a main file)."""
        if self.draft is None or self.self_draft:
            return self.main
        return self.main + (self.draft,)

    def file_repo(self, f: ModelFile) -> str:
        """The repository ``f`` (one of :meth:`files`) comes from."""
        return self.draft_repo if (f is self.draft and self.draft_repo) else self.repo

    @property
    def weights_bytes(self) -> int:
        return sum(f.size for f in self.files())

    def footprint(self) -> Footprint:
        """What serving this route costs besides its context, by the catalog's numbers."""
        return Footprint(main_bytes=sum(f.size for f in self.main),
                         draft_bytes=self.draft.size if self.draft else 0, kv=self.kv,
                         draft_kv=self.draft_kv or (self.kv if self.self_draft else None),
                         overhead_bytes=self.overhead_bytes, draft_n_max=self.draft_n_max,
                         source="catalog estimates" if self.sizes_estimated else "catalog")

    def memory_need(self, ctx_size: int, cache_type: CacheType = "f16", *, slots: int = 1,
                    draft: bool = True) -> int:
        """Bytes to serve this route at ``ctx_size``: weights + KV cache + overhead."""
        return self.footprint().need(ctx_size, cache_type, slots=slots, draft=draft)

    def main_path(self, models_dir: str) -> str:
        """Machine path of the (first) main file under ``models_dir`` (or in ``local_dir``)."""
        return self.file_path(models_dir, self.main[0])

    def file_path(self, models_dir: str, f: ModelFile) -> str:
        """Machine path of ``f`` (one of :meth:`files`): in ``local_dir`` for the owner's own
        files, else in the models folder."""
        if self.local_dir is not None:
            return str(PurePosixPath(self.local_dir) / f.file)
        return model_path(models_dir, self.file_repo(f), f.file)

    def draft_path(self, models_dir: str) -> str | None:
        if self.draft is None:
            return None
        return model_path(models_dir, self.draft_repo or self.repo, self.draft.file)


def model_path(models_dir: str, repo: str, file: str) -> str:
    """Where a repository file lives in the models folder: ``<models_dir>/<org>/<repo>/<file>``."""
    return str(PurePosixPath(models_dir) / repo / file)


class Catalog(_Model):
    routes: dict[str, Route]

    def served_names(self) -> dict[str, str]:
        """Every name a person may give for a catalog model, to the model's own name: the
        model's, and the names of the two routes setup writes for it (``<model>-mtp`` and the
        plain ``<model>``)."""
        names: dict[str, str] = {}
        for name, route in self.routes.items():
            names.setdefault(f"{name}-{route.drafted_suffix}", name)
        names.update({name: name for name in self.routes})
        return names

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
        gib = gib_text
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
