"""Lemonade: where its configuration lives, and the entries ojai adds to it.

Facts from lemonade-sdk/lemonade (v11.7):

* Config directory (``src/cpp/server/utils/platform/path_linux.cpp``, ``get_config_dir``):
  ``$STATE_DIRECTORY`` first, which the system unit ``lemond.service`` sets to
  ``/var/lib/lemonade`` (``StateDirectory=lemonade`` in ``data/lemond.service.in``); otherwise
  ``$XDG_CONFIG_HOME/lemonade``, otherwise ``~/.config/lemonade``. The packages install both a
  system unit (``/usr/lib/systemd/system/lemond.service``, enabled) and a per-user unit
  (``/usr/lib/systemd/user/lemond.service``, shipped disabled: ``contrib/debian/rules``). The
  system service runs as user ``lemonade`` with ``ProtectHome=yes``: it can read nothing
  under ``/home``.
* ``user_models.json`` entries (``docs/guide/configuration/custom-models.md``): stored without
  the ``user.`` prefix; ``checkpoints: {main, draft}`` for an MTP pair, as in the built-in
  catalog ``src/cpp/resources/server_models.json``; the ``mtp`` label makes Lemonade default
  ``--spec-type draft-mtp`` (``llamacpp_server.cpp``, ``resolve_llamacpp_runtime_args``).
  Lemonade itself adds the ``custom`` label and ``suggested: true`` to every registered model
  (``src/cpp/server/model_manager.cpp``, ``register_user_model``).
* ``recipe_options.json`` is keyed by canonical id (``user.NAME``) with ``ctx_size``,
  ``llamacpp_backend`` and ``llamacpp_args`` (one string). Lemonade splits that string on spaces,
  with ``'...'`` or ``"..."`` grouping and no escapes (``src/cpp/include/lemon/utils/custom_args.h``),
  and refuses a flag it passes itself (:data:`RESERVED_LLAMACPP_FLAGS`).
* Lemonade rewrites both files with two-space indentation (``save_user_json``).

Merging is pure: text in, text out. Unknown entries and fields are kept; an unchanged file
comes back byte for byte; a malformed file raises :class:`ConfigError` and nothing is written.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .actions import WriteFile
from .root import Root

__all__ = [
    "ConfigError",
    "LemonadeLayout",
    "LemonadeRoute",
    "LemonadeSettings",
    "RESERVED_LLAMACPP_FLAGS",
    "SYSTEM_CONFIG_DIR",
    "detect_layout",
    "join_llamacpp_args",
    "lemonade_commands",
    "lemonade_layout",
    "merge_recipe_options",
    "merge_user_models",
    "recipe_options_action",
    "split_llamacpp_args",
    "user_models_action",
]

SYSTEM_CONFIG_DIR = "/var/lib/lemonade"

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


class ConfigError(ValueError):
    """A Lemonade config file that ojai will not rewrite, or a value it cannot put in one."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None,
                 column: int | None = None) -> None:
        self.path, self.line, self.column = path, line, column
        where = path or ""
        if path and line is not None:
            where += f":{line}:{column}"
        super().__init__(f"{where}: {message}" if where else message)


# -- where the config lives --------------------------------------------------------------------
class LemonadeLayout(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["system-service", "user-service", "standalone"]
    config_dir: str  # machine path
    reason: str

    @property
    def protects_home(self) -> bool:
        """The server cannot read files under /home (``ProtectHome=yes``)."""
        return self.mode == "system-service"


_SYSTEM_UNITS = ("/etc/systemd/system/lemond.service", "/usr/lib/systemd/system/lemond.service",
                 "/lib/systemd/system/lemond.service", "/usr/local/lib/systemd/system/lemond.service")
_SYSTEM_WANTS = "/etc/systemd/system/multi-user.target.wants/lemond.service"
_USER_WANTS = ("/etc/systemd/user/default.target.wants/lemond.service",)


def lemonade_layout(*, system_unit: bool, system_enabled: bool, user_enabled: bool, home: str,
                    xdg_config_home: str | None = None) -> LemonadeLayout:
    """Which config directory the Lemonade server on this machine reads.

    ``system_unit``: a system ``lemond.service`` is installed; ``system_enabled``: it is enabled;
    ``user_enabled``: the per-user ``lemond.service`` is enabled for this user; ``home``: that
    user's home directory.
    """
    user_dir = f"{(xdg_config_home or home.rstrip('/') + '/.config').rstrip('/')}/lemonade"
    if system_unit and (system_enabled or not user_enabled):
        state = "enabled" if system_enabled else "installed"
        return LemonadeLayout(
            mode="system-service", config_dir=SYSTEM_CONFIG_DIR,
            reason=f"the system service lemond is {state}; systemd gives it "
                   f"STATE_DIRECTORY={SYSTEM_CONFIG_DIR}")
    if user_enabled:
        return LemonadeLayout(mode="user-service", config_dir=user_dir,
                              reason="the per-user lemond service is enabled")
    return LemonadeLayout(mode="standalone", config_dir=user_dir,
                          reason="no lemond service is installed; a standalone lemond reads "
                                 "~/.config/lemonade")


def _linked(root: Root, path: str) -> bool:
    """Whether the enablement link ``path`` is there: ``systemctl enable`` makes an absolute
    link, which under a machine root that is not ``/`` points out of it, so the link itself
    counts, not its target."""
    return root.resolve(path).is_symlink() or root.exists(path)


def detect_layout(root: Root, home: str, xdg_config_home: str | None = None) -> LemonadeLayout:
    """:func:`lemonade_layout` from the unit files and enablement links on ``root``."""
    user_wants = (*_USER_WANTS, f"{home.rstrip('/')}/.config/systemd/user/default.target.wants/lemond.service")
    return lemonade_layout(
        system_unit=any(root.exists(p) for p in _SYSTEM_UNITS),
        system_enabled=_linked(root, _SYSTEM_WANTS),
        user_enabled=any(_linked(root, p) for p in user_wants),
        home=home, xdg_config_home=xdg_config_home)


# -- JSON in and out ---------------------------------------------------------------------------
def _no_duplicates(path: str):
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
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_CHECKPOINT = re.compile(r"^[^\s/:]+/[^\s/:]+:\S+$")


def _bare_name(name: str) -> str:
    bare = name.removeprefix("user.")
    if bare.startswith(("extra.", "builtin.")) or not _NAME.match(bare):
        raise ConfigError(f"{name!r} cannot be a Lemonade user model name: use letters, digits, "
                          "'.', '_' and '-', without an 'extra.' or 'builtin.' prefix")
    return bare


def merge_user_models(existing_text: str | None, name: str, main_checkpoint: str,
                      draft_checkpoint: str | None, size_gb: float, labels: list[str],
                      *, path: str = "user_models.json") -> str:
    """Add or update the model ``name`` in ``user_models.json``.

    The entry gets ``checkpoints`` (``main``, and ``draft`` for a sidecar MTP head; a stale
    ``draft`` is removed when the heads are inside the main file), ``recipe: "llamacpp"``,
    ``size`` and ``labels`` (those given, those already there, plus ``custom`` and ``mtp``).
    A single ``checkpoint`` field is dropped, since Lemonade accepts one form or the other.
    Everything else in the entry and in the file is kept in place; a new entry goes last.
    """
    bare = _bare_name(name)
    for what, checkpoint in (("main", main_checkpoint), ("draft", draft_checkpoint)):
        if checkpoint is not None and not _CHECKPOINT.match(checkpoint):
            raise ConfigError(f"{what} checkpoint {checkpoint!r} is not of the form "
                              "'org/repo:FILE.gguf' or 'org/repo:QUANT'", path)
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
    entry["labels"] = sorted({*map(str, old_labels), *labels, "custom", "mtp"})
    entry["recipe"] = "llamacpp"
    entry["size"] = size_gb
    entry.setdefault("suggested", True)
    after[bare] = entry if bare in before else dict(sorted(entry.items()))
    return _finish(existing_text, before, after)


# -- recipe_options.json -----------------------------------------------------------------------
def split_llamacpp_args(text: str) -> list[str]:
    """How Lemonade reads ``llamacpp_args``: split on spaces; ``'`` or ``"`` group until the
    same quote closes; the quotes themselves are dropped; there are no escapes; empty pieces
    vanish."""
    args: list[str] = []
    current: list[str] = []
    quote: str | None = None
    for char in text:
        if quote is None and char in "'\"":
            quote = char
        elif quote is not None and char == quote:
            quote = None
        elif quote is None and char == " ":
            if current:
                args.append("".join(current))
                current = []
        else:
            current.append(char)
    if current:
        args.append("".join(current))
    return args


def join_llamacpp_args(args: list[str]) -> str:
    """The ``llamacpp_args`` string that :func:`split_llamacpp_args` reads back as ``args``."""
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


# -- the files on a machine -------------------------------------------------------------------
def _config_action(layout: LemonadeLayout, filename: str, merged: str,
                   before: str | None, reason: str) -> WriteFile | None:
    if merged == before:
        return None
    return WriteFile(path=f"{layout.config_dir}/{filename}", before=before, after=merged,
                     mode=0o644, needs_root=layout.mode == "system-service", reason=reason)


def _read_config(root: Root, path: str) -> str | None:
    return root.read_text(path) if root.exists(path) else None


def user_models_action(root: Root, layout: LemonadeLayout, name: str, main_checkpoint: str,
                       draft_checkpoint: str | None, size_gb: float,
                       labels: list[str]) -> WriteFile | None:
    """The change to ``user_models.json`` in Lemonade's config directory, or None if none."""
    path = f"{layout.config_dir}/user_models.json"
    before = _read_config(root, path)
    merged = merge_user_models(before, name, main_checkpoint, draft_checkpoint, size_gb, labels,
                               path=path)
    return _config_action(layout, "user_models.json", merged, before,
                          f"register user.{_bare_name(name)} with Lemonade")


def recipe_options_action(root: Root, layout: LemonadeLayout, model_id: str, ctx_size: int,
                          backend: LlamacppBackend = "rocm",
                          llamacpp_args: list[str] | None = None) -> WriteFile | None:
    """The change to ``recipe_options.json`` in Lemonade's config directory, or None if none."""
    path = f"{layout.config_dir}/recipe_options.json"
    before = _read_config(root, path)
    merged = merge_recipe_options(before, model_id, ctx_size, backend, llamacpp_args, path=path)
    return _config_action(layout, "recipe_options.json", merged, before,
                          f"set how Lemonade loads {model_id}")


# -- lemonade CLI ------------------------------------------------------------------------------
class LemonadeRoute(BaseModel):
    """What :func:`lemonade_commands` needs of a route."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    engine: Literal["llamacpp", "flm"]


class LemonadeSettings(BaseModel):
    """How Lemonade should get its engines.

    ``llama_server``: the machine path of ojai's own ``llama-server``; when set, Lemonade is
    pointed at its folder (``llamacpp.rocm_bin``) instead of downloading the nightly ROCm build.
    ``system_flm``: an ``flm`` is installed system-wide (the fastflowlm deb).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    layout: LemonadeLayout
    llama_server: str | None = None
    system_flm: bool = False


def lemonade_commands(route: LemonadeRoute, settings: LemonadeSettings) -> list[list[str]]:
    """The ``lemonade`` CLI calls that make Lemonade able to serve ``route``.

    * llama.cpp, Lemonade's own build: ``config set rocm_channel=nightly`` then
      ``backends install llamacpp:rocm``.
    * llama.cpp, ojai's build: ``config set llamacpp.rocm_bin=<folder>``. Lemonade never
      downloads for a path value, so nothing is installed (``docs/guide/configuration/README.md``,
      "Backend binary selection").
    * FastFlowLM: ``config set flm.prefer_system=true`` when the system has ``flm``, else
      ``backends install flm:npu``.
    """
    if route.engine == "flm":
        if settings.system_flm:
            return [["lemonade", "config", "set", "flm.prefer_system=true"]]
        return [["lemonade", "backends", "install", "flm:npu"]]
    if settings.llama_server is None:
        return [["lemonade", "config", "set", "rocm_channel=nightly"],
                ["lemonade", "backends", "install", "llamacpp:rocm"]]
    binary = PurePosixPath(settings.llama_server)
    if not binary.is_absolute() or any(c.isspace() for c in str(binary)):
        raise ConfigError(f"llamacpp.rocm_bin needs an absolute folder without spaces, "
                          f"got {str(binary.parent)!r}")
    folder = str(binary.parent)
    hidden = ("/home", "/root", "/run/user")
    if settings.layout.protects_home and any(folder == h or folder.startswith(h + "/") for h in hidden):
        raise ConfigError(
            f"Lemonade runs as the system service lemond with ProtectHome=yes and cannot use "
            f"{folder}; install ojai's llama-server outside /home (ojai's default is under /opt)")
    return [["lemonade", "config", "set", f"llamacpp.rocm_bin={folder}"]]
