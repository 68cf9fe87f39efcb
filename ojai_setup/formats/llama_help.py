"""What one ``llama-server`` binary understands: its version and its command-line dialect.

llama.cpp's flags move fast and forks add their own, so ojai never assumes a flag exists: it
asks the installed binary (``--version`` and ``--help``) and reads the answer into a
:class:`Dialect`. Reading (:func:`probe`) and parsing (:func:`parse_version`,
:func:`parse_help`) are separate; the parsers are pure and take text.

Help text layout (upstream ``common/arg.cpp``, ``common_arg::to_string``): an option starts at
column 0 with its comma-separated names, then an optional value hint, then the description
at column 40 (or on the next line when the names are long); continuation lines are indented
by 40 spaces. Options that were removed stay registered so that they fail loudly, and their
description starts with ``the argument has been removed.``"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ojai_setup.core.errors import InputError

REMOVED_MARKER = "the argument has been removed."


# Names one setting has had across builds, newest first (common/arg.cpp).
DRAFT_MODEL_FLAGS = ("--spec-draft-model", "--model-draft", "-md")


DRAFT_N_MAX_FLAGS = ("--spec-draft-n-max", "--draft-max", "--draft-n", "--draft")


DRAFT_N_MIN_FLAGS = ("--spec-draft-n-min", "--draft-min", "--draft-n-min")


DRAFT_CACHE_K_FLAGS = ("--spec-draft-type-k", "--cache-type-k-draft", "-ctkd")


DRAFT_CACHE_V_FLAGS = ("--spec-draft-type-v", "--cache-type-v-draft", "-ctvd")


DRAFT_GPU_LAYERS_FLAGS = ("--spec-draft-ngl", "--n-gpu-layers-draft", "--gpu-layers-draft", "-ngld")


DRAFT_CTX_SIZE_FLAGS = ("--spec-draft-ctx-size", "--ctx-size-draft", "-cd")


#: the knobs an n-gram speculative type reads, as the help names them after the type's own
#: prefix (``--spec-ngram-simple-size-n``, ``--spec-ngram-mod-n-max``, ...)
NGRAM_KNOBS = ("size-n", "size-m", "min-hits", "n-min", "n-max", "n-match")


#: ``--spec-type`` help wording that says the value is a list of types (upstream since early
#: 2026: "comma-separated list of types of speculative decoding to use")
_SPEC_TYPE_LIST = re.compile(r"\b(?:comma-separated\s+)?list\s+of\s+types\b", re.IGNORECASE)


#: ``    # 2026-05-17 10:32:17.832 | `` - a log timestamp (and a YAML comment) pasted before
#: every line of an excerpt.
_PASTE_PREFIX = re.compile(
    r"^\s*(?:#\s*)?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s*\|[ ]?"
)


_HEAD = re.compile(r"^((?:-{1,2}[A-Za-z0-9][^\s,]*,\s*)*-{1,2}[A-Za-z0-9][^\s,]*)(.*)$")


_ALLOWED_VALUES = re.compile(r"allowed values:\s*(.+)")


_ENV = re.compile(r"\(env:\s*([A-Z0-9_]+)\)")


_BULLET = re.compile(r"^-\s+([A-Za-z0-9_.+-]+):")


_ERROR_LINE = re.compile(r"error while handling argument \"([^\"]+)\":\s*(.*)")


_VERSION_NEW = re.compile(
    r"version:\s*(?P<semver>\S+)\s+\(build\s+(?P<build>\d+),\s*commit\s+(?P<commit>[^)\s]+)\)"
)


_VERSION_OLD = re.compile(r"version:\s*(?P<build>\d+)\s+\((?P<commit>[^)\s]+)\)")


_BUILT_WITH = re.compile(r"built with (?P<compiler>.+?) for (?P<target>.+)$")


class DialectParseError(InputError):
    """The text is not the output of ``llama-server --version`` / ``--help``."""


class LlamaVersion(BaseModel):
    """``llama-server --version``: ``version: 8171 (c17dce4f5)`` or
    ``version: 0.6.0-dev (build 11434, commit abc1234)``."""

    model_config = ConfigDict(frozen=True)

    raw: str
    build: int | None = None
    commit: str | None = None
    semver: str | None = None
    compiler: str | None = None
    target: str | None = None

    def label(self) -> str:
        parts = [self.semver] if self.semver else []
        if self.build is not None:
            parts.append(f"build {self.build}")
        if self.commit and self.commit != "unknown":
            parts.append(f"commit {self.commit}")
        return " ".join(parts) if parts else self.raw


class HelpOption(BaseModel):
    """One option as ``--help`` shows it."""

    model_config = ConfigDict(frozen=True)

    names: tuple[str, ...]
    value_hint: str | None = None
    help: str = ""
    env: str | None = None

    @property
    def removed(self) -> bool:
        return self.help.lstrip().lower().startswith(REMOVED_MARKER)

    @property
    def takes_value(self) -> Literal["no", "optional", "required"]:
        """Whether the option reads the next argument, as its value hint says: none (a bare
        flag), ``[on|off|auto]`` (optional: upstream brackets a value that may be left out), or
        any other hint (``N``, ``TYPE``, a list of choices: required)."""
        if not self.value_hint:
            return "no"
        return "optional" if self.value_hint.startswith("[") else "required"


class Dialect(BaseModel):
    """The command-line dialect of one ``llama-server`` binary."""

    model_config = ConfigDict(frozen=True)

    version: LlamaVersion | None = None
    #: a full ``--help`` listing; False for a per-argument ``usage:`` excerpt
    complete: bool = True
    options: tuple[HelpOption, ...] = ()
    #: values ``--spec-type`` accepts; None when the binary has no ``--spec-type``
    spec_types: tuple[str, ...] | None = None
    #: ``allowed values`` of ``--cache-type-k`` (empty when help does not list them)
    cache_types: tuple[str, ...] = ()
    #: ``allowed values`` of the draft model's ``--cache-type-k-draft``
    draft_cache_types: tuple[str, ...] = ()
    #: ``--load-mode`` values; None when the binary still uses ``--no-mmap``/``--mlock``
    load_modes: tuple[str, ...] | None = None
    #: ``--lazy-mode`` values as the help lists them; None when the binary has no ``--lazy-mode``
    lazy_modes: tuple[str, ...] | None = None
    #: ``--spec-type`` takes a comma list of types that draft together (its help says "list of
    #: types"); False for a build that takes one type
    spec_type_list: bool = False
    #: the types a server drafts with when ``--spec-type`` is not given, as its help's
    #: ``(default: ...)`` says; () for ``none`` (b11434). A build that drafts by default adds a
    #: given ``--spec-type`` to these (llama.cpp PR #28391: ``--spec-type draft-mtp`` drafts
    #: ``ngram-mod,draft-mtp``)
    spec_type_default: tuple[str, ...] = ()
    #: ``--no-spec-type``: ``flag`` (bare: drafting off), ``value`` (``--no-spec-type TYPE``:
    #: removes TYPE from the default types, PR #28391), None: no such option
    no_spec_type: Literal["flag", "value"] | None = None
    #: ``value``: ``-fa on|off|auto``; ``flag``: a bare ``-fa``; None: no flash-attention option
    flash_attn: Literal["value", "flag"] | None = None
    #: argument errors printed alongside the listing (``error while handling argument ...``)
    errors: tuple[str, ...] = Field(default=())

    # -- lookups -----------------------------------------------------------------------------
    def option(self, name: str) -> HelpOption | None:
        """The option registered under ``name`` (removed ones included)."""
        for opt in self.options:
            if name in opt.names:
                return opt
        return None

    def has(self, name: str) -> bool:
        """Whether ``name`` is a live (not removed) option."""
        opt = self.option(name)
        return opt is not None and not opt.removed

    def is_removed(self, name: str) -> bool:
        opt = self.option(name)
        return opt is not None and opt.removed

    def removed_flags(self) -> list[str]:
        return [n for opt in self.options if opt.removed for n in opt.names]

    def first_live(self, *names: str) -> str | None:
        """The first of ``names`` that is a live option, as the caller spelled it."""
        return next((n for n in names if self.has(n)), None)

    def spec_type_allowed(self, value: str) -> bool:
        """Whether ``--spec-type value`` is understood: one known type, or a comma list of
        known types where the help says it takes a list."""
        if self.spec_types is None:
            return False
        parts = value.split(",")
        if len(parts) > 1 and not self.spec_type_list:
            return False
        return all(p in self.spec_types for p in parts)

    def drafting_off(self) -> tuple[str, ...]:
        """The arguments that turn drafting off explicitly: a bare ``--no-spec-type`` where
        the binary has one, else ``--spec-type none`` where ``none`` is a type it lists (a lone
        ``none`` clears the default types too), else ``--no-spec-type`` with the default types
        where it takes a type; () for a binary with none of these (it has no speculation to
        turn off, or no way to say so)."""
        if self.no_spec_type == "flag":
            return ("--no-spec-type",)
        if self.spec_types and "none" in self.spec_types:
            return ("--spec-type", "none")
        if self.no_spec_type == "value" and self.spec_type_default:
            return ("--no-spec-type", ",".join(self.spec_type_default))
        return ()

    def default_types_beside(self, types: tuple[str, ...]) -> tuple[str, ...]:
        """The default types a build would draft with beside ``types`` given to
        ``--spec-type`` (it adds them to its defaults): those a route must remove."""
        if "none" in types:
            return ()
        return tuple(t for t in self.spec_type_default if t != "none" and t not in types)

    def ngram_knobs(self, spec_type: str) -> dict[str, str]:
        """The knobs the n-gram type ``spec_type`` reads, each with its live flag:
        ``{"size-n": "--spec-ngram-simple-size-n", ...}`` for ``ngram-simple``."""
        if not spec_type.startswith("ngram-"):
            return {}
        prefix = "--spec-" + spec_type + "-"
        knobs: dict[str, str] = {}
        for opt in self.options:
            if opt.removed:
                continue
            for name in opt.names:
                if name.startswith(prefix) and name[len(prefix):] in NGRAM_KNOBS:
                    knobs.setdefault(name[len(prefix):], name)
        if spec_type != "ngram-mod":
            # builds of early 2026 shared one set: --spec-ngram-size-n for every map type
            for knob in ("size-n", "size-m", "min-hits"):
                if knob not in knobs and self.has(f"--spec-ngram-{knob}"):
                    knobs[knob] = f"--spec-ngram-{knob}"
        return knobs

    @property
    def draft_model_flag(self) -> str | None:
        return self.first_live(*DRAFT_MODEL_FLAGS)

    @property
    def draft_n_max_flag(self) -> str | None:
        return self.first_live(*DRAFT_N_MAX_FLAGS)

    @property
    def draft_n_min_flag(self) -> str | None:
        return self.first_live(*DRAFT_N_MIN_FLAGS)

    @property
    def fork_mtp_head(self) -> bool:
        """A fork's ``--mtp-head FILE`` (with ``--draft-block-size``), not upstream."""
        return self.has("--mtp-head")

    def version_label(self) -> str:
        return self.version.label() if self.version else "unknown version"

    def summary_lines(self) -> list[str]:
        """Short human lines for ``ojai doctor``."""
        lines = [f"llama-server {self.version_label()}"]
        if not self.complete:
            lines.append("help: partial (a usage excerpt, not a full --help listing)")
        if self.spec_types is None:
            if self.complete:
                lines.append("speculative decoding: no --spec-type")
        else:
            lines.append("speculative types: " + ", ".join(self.spec_types))
            mtp = "yes (--spec-type draft-mtp)" if "draft-mtp" in self.spec_types else "no"
            lines.append(f"MTP: {mtp}")
            lines.append("chained types: " + ("yes (--spec-type takes a comma list)"
                                              if self.spec_type_list else "no (one type at a time)"))
            if self.spec_type_default:
                lines.append("drafts by default: " + ", ".join(self.spec_type_default)
                             + " (added to any --spec-type)")
            off = self.drafting_off()
            lines.append("drafting off: " + (" ".join(off) if off else "no way to say it"))
        draft = [f for f in (self.draft_model_flag, self.draft_n_max_flag, self.draft_n_min_flag) if f]
        if draft:
            lines.append("draft flags: " + " ".join(draft))
        if self.fork_mtp_head:
            extra = " --draft-block-size" if self.has("--draft-block-size") else ""
            lines.append(f"fork flags: --mtp-head{extra}")
        if self.cache_types:
            lines.append("KV cache types: " + ", ".join(self.cache_types))
        if self.load_modes is not None:
            lines.append("model loading: --load-mode " + "|".join(self.load_modes))
        if self.lazy_modes is not None:
            lines.append("lazy tensors: --lazy-mode " + "|".join(self.lazy_modes))
        elif self.has("--no-mmap"):
            lines.append("model loading: --no-mmap / --mlock")
        if self.flash_attn == "value":
            lines.append("flash attention: -fa on|off|auto")
        elif self.flash_attn == "flag":
            lines.append("flash attention: -fa (bare flag)")
        removed = self.removed_flags()
        if removed:
            lines.append("removed flags: " + " ".join(removed))
        lines.extend(f"error: {e}" for e in self.errors)
        return lines


# -- parsing ---------------------------------------------------------------------------------
def clean_paste(text: str) -> str:
    """Undo paste damage: drop a ``# <timestamp> | `` prefix wherever a line carries one."""
    return "\n".join(_PASTE_PREFIX.sub("", line) for line in text.splitlines())


def parse_version(text: str) -> LlamaVersion:
    """Parse ``llama-server --version`` output (stdout and stderr together are fine)."""
    text = clean_paste(text)
    compiler = target = None
    m_built = next((m for m in map(_BUILT_WITH.search, text.splitlines()) if m), None)
    if m_built:
        compiler, target = m_built["compiler"].strip(), m_built["target"].strip()
    for line in text.splitlines():
        if m := _VERSION_NEW.search(line):
            return LlamaVersion(raw=line.strip(), build=int(m["build"]), commit=m["commit"],
                                semver=m["semver"], compiler=compiler, target=target)
        if m := _VERSION_OLD.search(line):
            return LlamaVersion(raw=line.strip(), build=int(m["build"]), commit=m["commit"],
                                compiler=compiler, target=target)
    for line in text.splitlines():
        if line.strip().startswith("version:"):
            return LlamaVersion(raw=line.strip(), compiler=compiler, target=target)
    raise DialectParseError("no 'version:' line in the output of --version")


def _split_options(lines: list[str]) -> list[HelpOption]:
    options: list[HelpOption] = []
    names: tuple[str, ...] | None = None
    hint: str | None = None
    body: list[str] = []

    def flush() -> None:
        if names is None:
            return
        help_text = "\n".join(body).strip("\n")
        env = _ENV.search(help_text)
        options.append(HelpOption(names=names, value_hint=hint, help=help_text,
                                  env=env.group(1) if env else None))

    for line in lines:
        if line[:1] == "-" and (m := _HEAD.match(line)):
            flush()
            names = tuple(n.strip() for n in m.group(1).split(",") if n.strip())
            rest = m.group(2)
            hint = None
            if rest.startswith(" ") and not rest.startswith("  "):
                hint_part, _, desc = rest[1:].partition("  ")
                hint = hint_part.strip() or None
                body = [desc.strip()] if desc.strip() else []
            else:
                body = [rest.strip()] if rest.strip() else []
        elif names is not None and (line.startswith(" ") or not line.strip()):
            body.append(line.strip())
        else:
            flush()
            names, hint, body = None, None, []
    flush()
    return options


def _allowed_values(opt: HelpOption | None) -> tuple[str, ...]:
    if opt is None:
        return ()
    lines = opt.help.splitlines()
    for i, line in enumerate(lines):
        if m := _ALLOWED_VALUES.search(line):
            listed = m.group(1).strip()
            # help text wraps at 70 columns: a list ending in a comma goes on
            for more in lines[i + 1:]:
                if not listed.endswith(","):
                    break
                listed += " " + more.strip()
            return tuple(v.strip() for v in listed.split(",") if v.strip())
    return ()


def _spec_types(opt: HelpOption | None) -> tuple[str, ...] | None:
    if opt is None or opt.removed:
        return None
    if not opt.value_hint or opt.value_hint.isupper():
        return ()
    return tuple(v.strip() for v in re.split(r"[,|]", opt.value_hint.strip("[]{}")) if v.strip())


def _load_modes(opt: HelpOption | None) -> tuple[str, ...] | None:
    if opt is None or opt.removed:
        return None
    if opt.value_hint and opt.value_hint.startswith("{"):
        return tuple(v.strip() for v in opt.value_hint.strip("{}").split(",") if v.strip())
    return tuple(m.group(1) for line in opt.help.splitlines() if (m := _BULLET.match(line.strip())))


def _lazy_modes(opt: HelpOption | None) -> tuple[str, ...] | None:
    if opt is None or opt.removed:
        return None
    if opt.value_hint and opt.value_hint.startswith("{"):
        return tuple(v.strip() for v in opt.value_hint.strip("{}").split(",") if v.strip())
    return tuple(m.group(1) for line in opt.help.splitlines() if (m := _BULLET.match(line.strip())))


def _spec_type_list(opt: HelpOption | None) -> bool:
    return opt is not None and not opt.removed and bool(_SPEC_TYPE_LIST.search(" ".join(opt.help.split())))


_DEFAULT = re.compile(r"\(default:\s*([^);]*)[);]")


def _spec_type_default(opt: HelpOption | None) -> tuple[str, ...]:
    """``(default: ngram-mod)`` in ``--spec-type``'s help: the types drafted when it is not
    given; () for ``none`` or when the help does not say."""
    if opt is None or opt.removed:
        return ()
    m = _DEFAULT.search(" ".join(opt.help.split()))
    if not m:
        return ()
    types = tuple(t.strip().strip("'\"") for t in m.group(1).split(",") if t.strip())
    return () if types in ((), ("none",)) else types


def _no_spec_type(opt: HelpOption | None) -> Literal["flag", "value"] | None:
    if opt is None or opt.removed:
        return None
    return "flag" if opt.takes_value == "no" else "value"


def _flash_attn(opt: HelpOption | None) -> Literal["value", "flag"] | None:
    if opt is None or opt.removed:
        return None
    return "value" if opt.value_hint else "flag"


def parse_help(text: str, version: LlamaVersion | None = None) -> Dialect:
    """Parse ``llama-server --help`` (or a per-argument ``usage:`` excerpt) into a Dialect."""
    lines = clean_paste(text).splitlines()
    errors = tuple(f"{m.group(1)}: {m.group(2).strip()}"
                   for line in lines if (m := _ERROR_LINE.search(line)))
    options = _split_options(lines)
    if not options:
        raise DialectParseError("no options found: this is not llama-server --help output")

    def find(*names: str) -> HelpOption | None:
        return next((o for o in options if any(n in o.names for n in names)), None)

    complete = find("--help") is not None
    cache_types = _allowed_values(find("--cache-type-k", "-ctk"))
    draft_cache_types = _allowed_values(find(*DRAFT_CACHE_K_FLAGS))
    return Dialect(
        version=version,
        complete=complete,
        options=tuple(options),
        spec_types=_spec_types(find("--spec-type")),
        cache_types=cache_types,
        draft_cache_types=draft_cache_types,
        load_modes=_load_modes(find("--load-mode", "-lm")),
        lazy_modes=_lazy_modes(find("--lazy-mode", "-lzm")),
        spec_type_list=_spec_type_list(find("--spec-type")),
        spec_type_default=_spec_type_default(find("--spec-type")),
        no_spec_type=_no_spec_type(find("--no-spec-type")),
        flash_attn=_flash_attn(find("--flash-attn", "-fa")),
        errors=errors,
    )
