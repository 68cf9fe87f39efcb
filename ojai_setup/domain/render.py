"""Render a route (one served model configuration) into ``llama-server`` arguments.

The arguments are spelled in the dialect of the binary that will run them (see
:mod:`ojai_setup.formats.llama_help`). Whatever that binary cannot do is refused with
:class:`UnsupportedRoute`, which names the flag or value and the binary's version, instead of
producing a command line that fails at launch or silently does something else.

MTP comes in two shapes (upstream ``common/speculative.cpp``): heads inside the main GGUF are
``--spec-type draft-mtp`` with no draft file; a sidecar GGUF is
``--spec-draft-model FILE --spec-type draft-mtp``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ojai_setup.core.errors import InputError
from ojai_setup.formats.llama_help import (
    DRAFT_CACHE_K_FLAGS,
    DRAFT_CACHE_V_FLAGS,
    DRAFT_MODEL_FLAGS,
    DRAFT_N_MAX_FLAGS,
    DRAFT_N_MIN_FLAGS,
    Dialect,
)

#: speculative types that draft from a separate model file
NEEDS_DRAFT_FILE = frozenset({"draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"})
#: speculative types that may take a sidecar file (MTP heads may also live in the main file)
MAY_TAKE_DRAFT_FILE = NEEDS_DRAFT_FILE | {"draft-mtp"}

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

    @model_validator(mode="after")
    def _consistent(self) -> Route:
        speculative = self.spec_type != "none"
        if self.spec_type in NEEDS_DRAFT_FILE and not self.draft_model:
            raise ValueError(f"spec_type {self.spec_type} needs a draft_model file")
        if self.draft_model and not speculative:
            raise ValueError("a draft_model needs a spec_type (draft-mtp for an MTP sidecar, "
                             "draft-simple for a small draft model)")
        if self.draft_model and self.spec_type not in MAY_TAKE_DRAFT_FILE:
            raise ValueError(f"spec_type {self.spec_type} drafts without a model file; "
                             "drop draft_model")
        if not speculative and (self.draft_n_max is not None or self.draft_n_min is not None):
            raise ValueError("draft_n_max/draft_n_min need a spec_type other than none")
        if (self.draft_n_max is not None and self.draft_n_min is not None
                and self.draft_n_min > self.draft_n_max):
            raise ValueError("draft_n_min is larger than draft_n_max")
        if not self.draft_model and (self.draft_cache_type_k or self.draft_cache_type_v):
            raise ValueError("draft cache types need a draft_model")
        return self


def render_args(route: Route, dialect: Dialect) -> list[str]:
    """The ``llama-server`` arguments (without the program) for ``route`` in ``dialect``."""
    return _Renderer(route, dialect).render()


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
        self.args += [self.flag(what, *names), *values]

    def render(self) -> list[str]:
        r, d = self.route, self.dialect
        if not d.complete:
            raise self.refuse("--help", "is known only from a usage excerpt; probe the binary's "
                              "full --help first")
        self.add("main model", ("--model", "-m"), r.model)
        if d.has("--alias"):
            self.args += ["--alias", r.name]
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
        self._speculative()
        return self.args

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
            return
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
            self.args += ["--spec-type", r.spec_type]
        if r.draft_n_max is not None:
            self.add("draft length", DRAFT_N_MAX_FLAGS, str(r.draft_n_max))
        if r.draft_n_min is not None:
            self.add("minimum draft length", DRAFT_N_MIN_FLAGS, str(r.draft_n_min))
        allowed = d.draft_cache_types or d.cache_types
        self._cache_type(DRAFT_CACHE_K_FLAGS, r.draft_cache_type_k, allowed)
        self._cache_type(DRAFT_CACHE_V_FLAGS, r.draft_cache_type_v, allowed)
