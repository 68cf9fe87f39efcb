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
comes back byte for byte; a malformed file raises :class:`ConfigError` and nothing is written."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict

from ojai_setup.core.root import Root
from ojai_setup.formats.lemonade import (
    ConfigError,
    LlamacppBackend,
    _bare_name,
    merge_recipe_options,
    merge_user_models,
)
from ojai_setup.model.actions import RunCommand, WriteFile

SYSTEM_CONFIG_DIR = "/var/lib/lemonade"






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


#: ``state.json`` keys under which the steps record the Lemonade settings they made
STATE_KEY = "lemonade"
NPU_STATE_KEY = "lemonade-npu"


def settings_done_before(records: dict[str, Any]) -> dict[str, str]:
    """The ``config set`` values earlier applies recorded (a step's records replace its keys)."""
    done: dict[str, str] = {}
    for key in (STATE_KEY, NPU_STATE_KEY):
        record = records.get(key)
        if isinstance(record, dict):
            done.update(record.get("config", {}))
    return done


def config_commands(layout: LemonadeLayout, commands: list[list[str]], handler: str, *,
                    current: Callable[[str], Any], done: dict[str, str]
                    ) -> tuple[list[RunCommand], dict[str, RunCommand], dict[str, str]]:
    """``config set`` calls still needed (one action each), ``backends install`` calls as a
    handler run after them, and the settings to record as done.

    ``current(key)`` is the value in Lemonade's ``config.json``; ``done`` what earlier applies
    set (a value Lemonade keeps elsewhere counts as set when ojai set it before).
    """
    actions: list[RunCommand] = []
    handlers: dict[str, RunCommand] = {}
    settings: dict[str, str] = {}
    sets = [c for c in commands if c[1:3] == ["config", "set"]]
    installs = [c for c in commands if c[1:3] == ["backends", "install"]]
    for cmd in sets:
        key, _, value = cmd[3].partition("=")
        settings[key] = value
        now = current(key)
        if str(now).lower() == value.lower() or (now is None and done.get(key) == value):
            continue
        actions.append(RunCommand(argv=tuple(cmd), needs_root=layout.mode == "system-service",
                                  reason=f"Lemonade setting {key}={value}",
                                  notify=(handler,) if installs else ()))
    if installs:
        argv = ("sh", "-c", " && ".join(" ".join(c) for c in installs)) if len(installs) > 1 \
            else tuple(installs[0])
        handlers[handler] = RunCommand(argv=argv, needs_root=layout.mode == "system-service",
                                       reason="install the engine Lemonade will use")
    return actions, handlers, settings
