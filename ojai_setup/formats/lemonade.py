"""Lemonade's JSON files as text <-> data: ``user_models.json`` and ``recipe_options.json`` merged
by key (the user's entries kept, stable key order), and ``llamacpp_args`` split and joined."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ojai_setup.core.errors import InputError


class ConfigError(InputError):
    """A Lemonade config file that ojai will not rewrite, or a value it cannot put in one."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None,
                 column: int | None = None) -> None:
        self.path, self.line, self.column = path, line, column
        where = path or ""
        if path and line is not None:
            where += f":{line}:{column}"
        super().__init__(f"{where}: {message}" if where else message)


# -- JSON in and out ---------------------------------------------------------------------------
def _no_duplicates(path: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise ConfigError(f"key {key!r} appears twice; fix the file by hand first", path)
            seen[key] = value
        return seen
    return hook


def _load_object(text: str | None, path: str) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates(path))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON ({exc.msg}); ojai leaves it untouched", path,
                          exc.lineno, exc.colno) from None
    if not isinstance(data, dict):
        raise ConfigError(f"expected a JSON object at the top, found {type(data).__name__}", path)
    return data


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _finish(before_text: str | None, before: dict[str, Any], after: dict[str, Any]) -> str:
    """The new text, or the old text unchanged when nothing changed."""
    if before_text is not None and before_text.strip() and after == before:
        return before_text
    return _dump(after)


def _entry(data: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    entry = data.get(key, {})
    if not isinstance(entry, dict):
        raise ConfigError(f"the entry {key!r} is not an object", path)
    return dict(entry)


# -- user_models.json --------------------------------------------------------------------------
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


_CHECKPOINT = r"^[^\s/:]+/[^\s/:]+:\S+$"

#: ``source`` of a user model whose checkpoints are absolute file paths on this machine
#: (``ModelManager::resolve_model_path`` in ``src/cpp/server/model_manager.cpp``: "Local-path
#: models use the checkpoint as-is (absolute path to a file)")
LOCAL_PATH = "local_path"


def _bare_name(name: str) -> str:
    bare = name.removeprefix("user.")
    if bare.startswith(("extra.", "builtin.")) or not re.match(_NAME, bare):
        raise ConfigError(f"{name!r} cannot be a Lemonade user model name: use letters, digits, "
                          "'.', '_' and '-', without an 'extra.' or 'builtin.' prefix")
    return bare


def _check_checkpoint(what: str, checkpoint: str, source: str | None, path: str) -> None:
    if source == LOCAL_PATH:
        if not checkpoint.startswith("/") or any(c.isspace() for c in checkpoint) or \
                "/../" in checkpoint + "/":
            raise ConfigError(f"{what} checkpoint {checkpoint!r} of a local_path model must be an "
                              "absolute file path without spaces", path)
    elif not re.match(_CHECKPOINT, checkpoint):
        raise ConfigError(f"{what} checkpoint {checkpoint!r} is not of the form "
                          "'org/repo:FILE.gguf' or 'org/repo:QUANT'", path)


def merge_user_models(existing_text: str | None, name: str, main_checkpoint: str,
                      draft_checkpoint: str | None, size_gb: float, labels: list[str],
                      *, path: str = "user_models.json", source: str | None = None,
                      mtp: bool = True) -> str:
    """Add or update the model ``name`` in ``user_models.json``.

    ``mtp``: the model drafts with MTP heads, so it carries the label ``mtp`` (which makes
    Lemonade add ``--spec-type draft-mtp``); a model that drafts otherwise has the label taken
    away.

    The entry gets ``checkpoints`` (``main``, and ``draft`` for a sidecar MTP head; a stale
    ``draft`` is removed when the heads are inside the main file), ``recipe: "llamacpp"``,
    ``size`` and ``labels`` (those given, those already there, plus ``custom`` and ``mtp``).
    A single ``checkpoint`` field is dropped, since Lemonade accepts one form or the other.
    ``source``: ``"local_path"`` for files already on disk (absolute paths), which Lemonade
    loads as they are; None for hub checkpoints (``org/repo:FILE``), which Lemonade downloads
    into its own Hugging Face cache (a ``local_path`` source left from before is removed).
    Everything else in the entry and in the file is kept in place; a new entry goes last.
    """
    bare = _bare_name(name)
    for what, checkpoint in (("main", main_checkpoint), ("draft", draft_checkpoint)):
        if checkpoint is not None:
            _check_checkpoint(what, checkpoint, source, path)
    if not size_gb > 0:
        raise ConfigError(f"model size must be positive, got {size_gb}", path)

    before = _load_object(existing_text, path)
    after = dict(before)
    entry = _entry(before, bare, path)
    checkpoints = entry.get("checkpoints", {})
    if not isinstance(checkpoints, dict):
        raise ConfigError(f"'checkpoints' of {bare!r} is not an object", path)
    checkpoints = dict(checkpoints)
    checkpoints["main"] = main_checkpoint
    if draft_checkpoint is None:
        checkpoints.pop("draft", None)
    else:
        checkpoints["draft"] = draft_checkpoint
    old_labels = entry.get("labels", [])
    if not isinstance(old_labels, list):
        raise ConfigError(f"'labels' of {bare!r} is not a list", path)

    entry.pop("checkpoint", None)
    entry["checkpoints"] = dict(sorted(checkpoints.items()))
    entry["labels"] = sorted({*map(str, old_labels), *labels, "custom", "mtp"} - (set() if mtp else {"mtp"}))
    entry["recipe"] = "llamacpp"
    entry["size"] = size_gb
    if source is not None:
        entry["source"] = source
    elif entry.get("source") == LOCAL_PATH:
        del entry["source"]
    entry.setdefault("suggested", True)
    after[bare] = entry if bare in before else dict(sorted(entry.items()))
    return _finish(existing_text, before, after)


# -- config.json -------------------------------------------------------------------------------
def config_value(data: dict[str, Any], key: str) -> Any:
    """The value of a dotted key (``llamacpp.rocm_bin``) in a parsed ``config.json``; None when
    absent. Lemonade stores backend options nested (``{"llamacpp": {"rocm_bin": ...}}``) and
    deep-merges the file over its defaults (``ConfigFile::load`` in
    ``src/cpp/server/config_file.cpp``)."""
    if key in data:
        return data[key]
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def load_config(text: str | None, path: str = "config.json") -> dict[str, Any]:
    """A ``config.json`` as data (``{}`` for none); a malformed file raises :class:`ConfigError`."""
    return _load_object(text, path)


def merge_config(existing_text: str | None, values: dict[str, Any], *,
                 path: str = "config.json") -> str:
    """Set dotted ``values`` (``{"llamacpp.rocm_bin": "/opt/.../llama-server"}``) in Lemonade's
    ``config.json``, nested the way Lemonade writes them. A file holding only the keys set is
    enough: Lemonade fills every other key from its defaults. Other keys are kept; an unchanged
    file comes back byte for byte."""
    before = _load_object(existing_text, path)
    after = json.loads(json.dumps(before))
    for key, value in values.items():
        if key in after and "." in key:  # a flat key would shadow the nested one: move it
            del after[key]
        parts = key.split(".")
        node = after
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"{part!r} in {path} is not an object, cannot set {key}", path)
            node = child
        node[parts[-1]] = value
    return _finish(existing_text, before, after)


# -- lemond --version -----------------------------------------------------------------------------
# Built (defer_build) when a version is first parsed: a machine without Lemonade has none.
class LemonadeVersion(BaseModel):
    """What ``lemond --version`` / ``lemonade --version`` printed, parsed.

    Lemonade moved from semantic versions (``lemonade version 11.7.0``; 11.8.1 was the last) to
    calendar versions (``lemond version 2026.39.1-2`` in Debian, a Debian revision after the
    dash)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    text: str
    numbers: tuple[int, ...]
    calendar: bool

    def line(self) -> str:
        """The release line: ``2026.48`` (year and week of a calendar version), ``11.x``."""
        if self.calendar:
            return ".".join(str(n) for n in self.numbers[:2])
        return f"{self.numbers[0]}.x"

    def injects_mtp_draft_defaults(self) -> bool:
        """Whether this Lemonade adds ``--spec-draft-n-max 3 --spec-draft-p-min 0.75`` to an
        MTP model's llama-server (semantic versions before 11.7.0: lemonade-sdk/lemonade#3187
        dropped them, after #3175 measured p-min 0.75 at 2.5 times slower); the calendar
        line does not."""
        return not self.calendar and self.numbers[:3] < (11, 7, 0)

    @property
    def label(self) -> str:
        return ".".join(map(str, self.numbers))


_VERSION = r"(?:^|\s|v)(\d+)\.(\d+)(?:\.(\d+))?(?:-[0-9A-Za-z.~+]+)?(?=\s|$)"


def parse_lemonade_version(text: str) -> LemonadeVersion | None:
    """:class:`LemonadeVersion` from a version line, None when there is no version in it."""
    for line in text.splitlines():
        match = re.search(_VERSION, line.strip())
        if match:
            numbers = tuple(int(g) for g in match.groups() if g is not None)
            return LemonadeVersion(text=line.strip(), numbers=numbers, calendar=numbers[0] >= 2000)
    return None


# -- recipe_options.json -----------------------------------------------------------------------
def join_llamacpp_args(args: list[str]) -> str:
    """The ``llamacpp_args`` string that Lemonade reads back as ``args`` (it splits on spaces;
    ``'`` or ``"`` group until the same quote closes and are dropped; no escapes; empty pieces
    vanish)."""
    pieces = []
    for arg in args:
        if arg == "":
            raise ConfigError("Lemonade's llamacpp_args cannot carry an empty argument")
        if not any(c in arg for c in " '\""):
            pieces.append(arg)
        elif '"' not in arg:
            pieces.append(f'"{arg}"')
        elif "'" not in arg:
            pieces.append(f"'{arg}'")
        else:  # both quote kinds: quote each awkward character on its own
            pieces.append("".join({"'": "\"'\"", '"': "'\"'", " ": "' '"}.get(c, c) for c in arg))
    return " ".join(pieces)


def _reserved_in(args: list[str]) -> list[str]:
    found = []
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("-") and flag in RESERVED_LLAMACPP_FLAGS and flag not in found:
            found.append(flag)
    return found


def merge_recipe_options(existing_text: str | None, model_id: str, ctx_size: int,
                         backend: LlamacppBackend = "rocm", llamacpp_args: list[str] | None = None,
                         *, path: str = "recipe_options.json") -> str:
    """Set ``ctx_size``, ``llamacpp_backend`` and ``llamacpp_args`` of ``model_id`` (``user.NAME``).

    Refuses flags Lemonade passes itself (:data:`RESERVED_LLAMACPP_FLAGS`), which Lemonade would
    refuse at load time. Other keys of the entry (``pinned``, other recipes' options) and other
    entries are kept.
    """
    if not model_id.startswith(("user.", "extra.", "builtin.")):
        raise ConfigError(f"recipe options are keyed by canonical id such as 'user.{model_id}', "
                          f"got {model_id!r}", path)
    if not (ctx_size > 0 or ctx_size == -1):
        raise ConfigError(f"ctx_size must be positive (or -1 for automatic), got {ctx_size}", path)
    args = list(llamacpp_args or [])
    reserved = _reserved_in(args)
    if reserved:
        raise ConfigError(
            f"llamacpp_args for {model_id} contain {', '.join(reserved)}, which Lemonade sets "
            "itself and refuses to take from llamacpp_args (model, draft model, context size, "
            "port, device, jinja, metrics, mmproj, embeddings, reranking); drop them from the "
            "route's extra arguments", path)
    joined = join_llamacpp_args(args)

    before = _load_object(existing_text, path)
    after = dict(before)
    entry = _entry(before, model_id, path)
    entry["ctx_size"] = ctx_size
    entry["llamacpp_backend"] = backend
    entry["llamacpp_args"] = joined
    after[model_id] = entry if model_id in before else dict(sorted(entry.items()))
    return _finish(existing_text, before, after)


#: Flags Lemonade puts on every llama-server command line it builds, with their aliases; a
#: ``llamacpp_args`` holding one is refused ("Argument '...' is managed by Lemonade and cannot
#: be overridden"). From ``LlamaCppServer::load`` in
#: ``src/cpp/server/backends/llamacpp/llamacpp_server.cpp``. (``-hf`` and its aliases are
#: reserved too when a model loads through ``hf_load``; ``--no-mmproj-offload`` when a vision
#: projector runs without GPU; neither applies to the entries ojai writes.)
RESERVED_LLAMACPP_FLAGS: frozenset[str] = frozenset({
    "-m", "--model",
    "--ctx-size", "-c",
    "--device", "-dev",
    "--port",
    "--jinja", "--no-jinja",
    "--metrics",
    "--mmproj", "-mm", "-mmu", "--mmproj-url", "--no-mmproj", "--mmproj-auto", "--no-mmproj-auto",
    "--model-draft", "-md", "--spec-draft-model",
    "--embeddings", "--embedding",
    "--reranking", "--rerank",
})


LlamacppBackend = Literal["rocm", "vulkan", "cpu", "cuda", "metal", "system"]
