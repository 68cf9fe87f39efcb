"""Render a route (one served model configuration) into ``llama-server`` arguments.

The arguments are spelled in the dialect of the binary that will run them (see
:mod:`ojai_setup.formats.llama_help`). Whatever that binary cannot do is refused with
:class:`UnsupportedRoute`, which names the flag or value and the binary's version, instead of
producing a command line that fails at launch or silently does something else.

Every kind of drafting upstream llama.cpp offers is a route (``common/speculative.cpp``):

- MTP heads inside the main GGUF: ``--spec-type draft-mtp`` with no draft file;
- an MTP sidecar GGUF: ``--spec-draft-model FILE --spec-type draft-mtp``;
- a separate draft model (a small model of the same vocabulary, or the model itself):
  ``--spec-draft-model FILE --spec-type draft-simple``, with its own GPU layers (``-ngld``)
  and KV cache types (``-ctkd``/``-ctvd``);
- n-gram drafting from the tokens already seen, no draft file: ``--spec-type ngram-simple``
  (``ngram-map-k``, ``ngram-map-k4v``, ``ngram-mod``, ``ngram-cache``), with the knobs each
  type reads (``--spec-ngram-simple-size-n``, ``--spec-ngram-mod-n-max``, ... as the help
  names them);
- chained types, a comma list (``--spec-type draft-mtp,ngram-mod``), where the binary's help
  says ``--spec-type`` takes a list.

A route without drafting says so: ``--no-spec-type`` or ``--spec-type none``, whichever the
binary has (:meth:`Dialect.drafting_off`), so that a build that drafts by default cannot make a
plain route speculative.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ojai_setup.core.errors import InputError
from ojai_setup.domain.drafting import (
    MAY_TAKE_DRAFT_FILE,
    MODEL_DRAFTED,
    NEEDS_DRAFT_FILE,
    is_ngram_type,
    words_of,
)
from ojai_setup.formats.llama_help import (
    DRAFT_CACHE_K_FLAGS,
    DRAFT_CACHE_V_FLAGS,
    DRAFT_CTX_SIZE_FLAGS,
    DRAFT_GPU_LAYERS_FLAGS,
    DRAFT_MODEL_FLAGS,
    DRAFT_N_MAX_FLAGS,
    DRAFT_N_MIN_FLAGS,
    NGRAM_KNOBS,
    Dialect,
)



def spec_types_of(spec_type: str) -> tuple[str, ...]:
    """The types of a ``--spec-type`` value: ``"draft-mtp,ngram-mod"`` -> both."""
    return tuple(t.strip() for t in spec_type.split(",") if t.strip())


def drafting_kind(spec_type: str) -> str:
    """What drafts, in the words plans and reports use: ``MTP``, ``draft model``,
    ``n-gram (ngram-simple)``, chained types joined by `` + ``; ``none`` for no drafting."""
    return " + ".join(words_of(t) for t in spec_types_of(spec_type) if t != "none") or "none"

#: ``--load-mode`` values expressed with the older ``--no-mmap`` / ``--mlock`` flags
_LEGACY_LOAD_MODES: dict[str, tuple[str, ...]] = {
    "auto": (),
    "mmap": (),
    "none": ("--no-mmap",),
    "mmap+mlock": ("--mlock",),
    "mlock": ("--no-mmap", "--mlock"),
}


class UnsupportedRoute(InputError):
    """The binary cannot serve this route as asked."""

    def __init__(self, route: str, flag: str, version: str, reason: str) -> None:
        self.route = route
        self.flag = flag
        self.version = version
        self.reason = reason
        super().__init__(f"route {route!r}: {flag}: llama-server {version} {reason}")


class Route(BaseModel):
    """One served model configuration. Paths are machine paths of GGUF files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: also the model name clients ask for (``--alias``, which splits at commas)
    name: str = Field(min_length=1, pattern=r"^[^,\s]+$")
    model: str = Field(min_length=1)
    draft_model: str | None = None
    spec_type: str = "none"
    draft_n_max: int | None = Field(default=None, ge=1)
    draft_n_min: int | None = Field(default=None, ge=0)
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    draft_cache_type_k: str | None = None
    draft_cache_type_v: str | None = None
    flash_attn: Literal["on", "off", "auto"] | None = None
    ctx_size: int | None = Field(default=None, ge=0)
    parallel: int | None = Field(default=None, ge=1)
    n_gpu_layers: int | Literal["auto", "all"] | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    load_mode: str | None = None
    lazy_mode: str | None = None
    #: the draft model's GPU layers (``-ngld``) and context (where the binary has a flag)
    draft_n_gpu_layers: int | Literal["auto", "all"] | None = None
    draft_ctx_size: int | None = Field(default=None, ge=0)
    #: serve embeddings only (``--embeddings``), for an embedding model
    embeddings: bool = False
    #: n-gram knobs by the help's name after the type's prefix: ``{"size-n": 3, "size-m": 8}``
    #: for ``ngram-simple``/``ngram-map-k*``, ``n-min``/``n-max``/``n-match`` for ``ngram-mod``
    ngram: dict[str, int] = Field(default_factory=dict)

    @property
    def spec_types(self) -> tuple[str, ...]:
        return spec_types_of(self.spec_type)

    @property
    def drafting(self) -> str:
        """What drafts on this route (:func:`drafting_kind`)."""
        return drafting_kind(self.spec_type)

    @model_validator(mode="after")
    def _consistent(self) -> Route:
        types = self.spec_types
        if not types:
            raise ValueError("spec_type is empty (use none for no drafting)")
        if "none" in types and len(types) > 1:
            raise ValueError("spec_type none cannot be chained with other types")
        speculative = types != ("none",)
        model_drafted = any(t in MODEL_DRAFTED for t in types)
        if any(t in NEEDS_DRAFT_FILE for t in types) and not self.draft_model:
            raise ValueError(f"spec_type {self.spec_type} needs a draft_model file")
        if self.draft_model and not speculative:
            raise ValueError("a draft_model needs a spec_type (draft-mtp for an MTP sidecar, "
                             "draft-simple for a small draft model)")
        if self.draft_model and not any(t in MAY_TAKE_DRAFT_FILE for t in types):
            raise ValueError(f"spec_type {self.spec_type} drafts without a model file; "
                             "drop draft_model")
        if not speculative and (self.draft_n_max is not None or self.draft_n_min is not None):
            raise ValueError("draft_n_max/draft_n_min need a spec_type other than none")
        if speculative and not model_drafted and (self.draft_n_max is not None
                                                  or self.draft_n_min is not None):
            raise ValueError(f"spec_type {self.spec_type} does not read draft_n_max/draft_n_min "
                             "(n-gram types read their own knobs: set ngram)")
        unknown = sorted(set(self.ngram) - set(NGRAM_KNOBS))
        if unknown:
            raise ValueError(f"unknown n-gram knob(s) {', '.join(unknown)} (known: "
                             f"{', '.join(NGRAM_KNOBS)})")
        if self.ngram and not any(is_ngram_type(t) for t in types):
            raise ValueError("ngram knobs need an ngram-* spec_type")
        if any(v < 0 for v in self.ngram.values()):
            raise ValueError("n-gram knobs are counts of tokens: 0 or more")
        if not self.draft_model and (self.draft_n_gpu_layers is not None
                                     or self.draft_ctx_size is not None):
            raise ValueError("draft GPU layers and draft context need a draft_model")
        if (self.draft_n_max is not None and self.draft_n_min is not None
                and self.draft_n_min > self.draft_n_max):
            raise ValueError("draft_n_min is larger than draft_n_max")
        if not self.draft_model and (self.draft_cache_type_k or self.draft_cache_type_v):
            raise ValueError("draft cache types need a draft_model")
        return self


def render_args(route: Route, dialect: Dialect) -> list[str]:
    """The ``llama-server`` arguments (without the program) for ``route`` in ``dialect``."""
    return _Renderer(route, dialect).render()


def is_drafting_option(name: str) -> bool:
    """Whether the option ``name`` belongs to speculative decoding (any spelling a build had)."""
    return (name.startswith(("--spec-", "--draft", "--lookup-cache")) or "-draft" in name
            or name in ("-md", "-ngld", "-ctkd", "-ctvd", "-cd", "-devd", "-td", "-tbd", "-lcs",
                        "-lcd", "--no-spec-type"))


def plain_arm_args(args: list[str], dialect: Dialect) -> list[str]:
    """``args`` (a drafted route's, or any) with every speculative option and its value taken
    out and drafting turned off explicitly (:meth:`Dialect.drafting_off`): the plain arm a
    benchmark compares a drafted route with, on the same binary, model and settings."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if arg.startswith("-") and is_drafting_option(name):
            opt = dialect.option(name)
            skip = "=" not in arg and (opt is None or opt.value_hint is not None)
            continue
        out.append(arg)
    return [*out, *dialect.drafting_off()]


class _Renderer:
    def __init__(self, route: Route, dialect: Dialect) -> None:
        self.route = route
        self.dialect = dialect
        self.args: list[str] = []

    def refuse(self, flag: str, reason: str) -> UnsupportedRoute:
        return UnsupportedRoute(self.route.name, flag, self.dialect.version_label(), reason)

    def flag(self, what: str, *names: str) -> str:
        found = self.dialect.first_live(*names)
        if found is None:
            removed = [n for n in names if self.dialect.is_removed(n)]
            why = f"removed {removed[0]}" if removed else f"has no {names[0]}"
            raise self.refuse(names[0], f"{why} ({what})")
        return found

    def add(self, what: str, names: tuple[str, ...], *values: str) -> None:
        """``names``' live spelling and ``values``, checked against what the help says the
        option reads: a bare flag given a value would take it as the next argument's, an
        option that needs a value would take the next flag as its value."""
        flag = self.flag(what, *names)
        opt = self.dialect.option(flag)
        takes = opt.takes_value if opt is not None else "no"
        if values and takes == "no":
            raise self.refuse(flag, f"takes no value ({what}), so it would read "
                              f"{values[0]!r} as an argument of its own")
        if not values and takes == "required":
            raise self.refuse(flag, f"takes a value ({opt.value_hint if opt else ''}: {what}), so it would "
                              "read the next argument as its value")
        self.args += [flag, *values]

    def render(self) -> list[str]:
        r, d = self.route, self.dialect
        if not d.complete:
            raise self.refuse("--help", "is known only from a usage excerpt; probe the binary's "
                              "full --help first")
        self.add("main model", ("--model", "-m"), r.model)
        if d.has("--alias"):
            self.add("model alias", ("--alias",), r.name)
        self.add("listen address", ("--host",), r.host)
        self.add("listen port", ("--port",), str(r.port))
        if r.ctx_size is not None:
            self.add("context size", ("--ctx-size", "-c"), str(r.ctx_size))
        if r.parallel is not None:
            self.add("server slots", ("--parallel", "-np"), str(r.parallel))
        if r.n_gpu_layers is not None:
            self._gpu_layers(r.n_gpu_layers)
        if r.flash_attn is not None:
            self._flash_attn(r.flash_attn)
        self._cache_type(("--cache-type-k", "-ctk"), r.cache_type_k, d.cache_types)
        self._cache_type(("--cache-type-v", "-ctv"), r.cache_type_v, d.cache_types)
        if r.load_mode is not None:
            self._load_mode(r.load_mode)
        if r.lazy_mode is not None:
            self._lazy_mode(r.lazy_mode)
        if r.embeddings:
            self.add("embeddings only", ("--embeddings", "--embedding"))
        self._speculative()
        return self.args

    def _lazy_mode(self, value: str) -> None:
        modes = self.dialect.lazy_modes
        if modes is None:
            raise self.refuse("--lazy-mode", "has no --lazy-mode (on-demand tensor reading)")
        if value not in modes:
            raise self.refuse("--lazy-mode", f"does not know lazy mode {value!r} "
                              f"(allowed: {', '.join(modes) or 'none listed'})")
        self.add("lazy mode", ("--lazy-mode", "-lzm"), value)

    def _gpu_layers(self, value: int | str) -> None:
        names = ("--n-gpu-layers", "--gpu-layers", "-ngl")
        flag = self.flag("GPU layers", *names)
        if isinstance(value, str):
            opt = self.dialect.option(flag)
            if opt is None or f"'{value}'" not in opt.help:
                raise self.refuse(flag, f"does not accept {value!r} (give a number of layers)")
        self.args += [flag, str(value)]

    def _flash_attn(self, value: str) -> None:
        mode = self.dialect.flash_attn
        if mode == "value":
            self.add("flash attention", ("--flash-attn", "-fa"), value)
        elif mode == "flag":
            if value == "auto":
                raise self.refuse("--flash-attn", "takes no value: flash attention is on or off, "
                                  "not auto")
            if value == "on":
                self.add("flash attention", ("--flash-attn", "-fa"))
        else:
            raise self.refuse("--flash-attn", "has no flash-attention option")

    def _cache_type(self, names: tuple[str, ...], value: str | None,
                    allowed: tuple[str, ...]) -> None:
        if value is None:
            return
        flag = self.flag("KV cache type", *names)
        if value not in allowed:
            listed = ", ".join(allowed) if allowed else "none listed"
            raise self.refuse(names[0], f"does not support KV cache type {value!r} "
                              f"(allowed: {listed})")
        self.args += [flag, value]

    def _load_mode(self, value: str) -> None:
        d = self.dialect
        if d.load_modes is not None:
            if value not in d.load_modes:
                raise self.refuse("--load-mode", f"does not know load mode {value!r} "
                                  f"(allowed: {', '.join(d.load_modes)})")
            self.add("load mode", ("--load-mode", "-lm"), value)
            return
        legacy = _LEGACY_LOAD_MODES.get(value)
        if legacy is None:
            raise self.refuse("--load-mode", f"has no --load-mode, and load mode {value!r} "
                              "has no --no-mmap/--mlock equivalent")
        for flag in legacy:
            self.add(f"load mode {value}", (flag,))

    def _speculative(self) -> None:
        r, d = self.route, self.dialect
        if r.spec_type == "none":
            off = d.drafting_off()
            if off:
                self.add("drafting off", (off[0],), *off[1:])
            elif d.spec_type_default:
                raise self.refuse("--spec-type", f"drafts with {','.join(d.spec_type_default)} "
                                  "by default and has no way to turn it off")
            return
        types = r.spec_types
        if len(types) > 1 and d.has("--spec-type") and not d.spec_type_list:
            raise self.refuse("--spec-type", f"takes one speculative type, not the list "
                              f"{r.spec_type!r} (its help does not say it takes a list of types)")
        if d.has("--spec-type"):
            if not d.spec_type_allowed(r.spec_type):
                fork = (" (this build is a fork with --mtp-head; ojai speaks upstream's "
                        "--spec-type draft-mtp)") if d.fork_mtp_head else ""
                allowed = ", ".join(d.spec_types or ())
                raise self.refuse("--spec-type", f"does not know speculative type "
                                  f"{r.spec_type!r} (allowed: {allowed}){fork}")
        elif r.spec_type != "draft-simple":
            raise self.refuse("--spec-type", f"has no --spec-type, so it cannot use "
                              f"{r.spec_type}")
        if r.draft_model:
            self.add("draft model", DRAFT_MODEL_FLAGS, r.draft_model)
        if d.has("--spec-type"):
            self.add("speculative type", ("--spec-type",), r.spec_type)
            beside = d.default_types_beside(types)
            if beside:
                # a build that drafts by default adds --spec-type's types to its own: remove
                # those the route does not name, so that it drafts exactly its kinds
                if d.no_spec_type != "value":
                    raise self.refuse("--spec-type", f"adds {r.spec_type} to its default "
                                      f"{','.join(beside)} and has no --no-spec-type TYPE "
                                      "to leave that out")
                self.add("default drafting left out", ("--no-spec-type",), ",".join(beside))
        if r.draft_n_max is not None:
            self.add("draft length", DRAFT_N_MAX_FLAGS, str(r.draft_n_max))
        if r.draft_n_min is not None:
            self.add("minimum draft length", DRAFT_N_MIN_FLAGS, str(r.draft_n_min))
        if r.draft_n_gpu_layers is not None:
            self.add("draft model GPU layers", DRAFT_GPU_LAYERS_FLAGS, str(r.draft_n_gpu_layers))
        if r.draft_ctx_size is not None:
            self.add("draft model context size", DRAFT_CTX_SIZE_FLAGS, str(r.draft_ctx_size))
        draft_allowed = d.draft_cache_types or d.cache_types
        self._cache_type(DRAFT_CACHE_K_FLAGS, r.draft_cache_type_k, draft_allowed)
        self._cache_type(DRAFT_CACHE_V_FLAGS, r.draft_cache_type_v, draft_allowed)
        self._ngram_knobs()

    def _ngram_knobs(self) -> None:
        """Each knob, for every n-gram type of the route that reads it (in the route's order)."""
        ngram_types = [t for t in self.route.spec_types if is_ngram_type(t)]
        for knob in NGRAM_KNOBS:
            if knob not in self.route.ngram:
                continue
            flags = [f for t in ngram_types if (f := self.dialect.ngram_knobs(t).get(knob))]
            if not flags:
                raise self.refuse(f"--spec-{ngram_types[0]}-{knob}", f"has no n-gram knob "
                                  f"{knob!r} for {', '.join(ngram_types)}")
            for flag in flags:
                self.args += [flag, str(self.route.ngram[knob])]
