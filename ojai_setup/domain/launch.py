"""Launch scripts and systemd units for served routes (llama-server and FastFlowLM).

Rendering is pure: each function takes already-decided values and returns the text of a file;
writing it is a :class:`~ojai_setup.model.actions.WriteFile` action carried out by the executor.

The templates live in the top-level ``templates/`` folder (``ojai_setup/_data/templates`` in a
wheel, see :func:`data_dir`). The Jinja2 environment uses ``StrictUndefined`` (a missing value
is an error, never an empty string), no autoescaping (these are shell and INI files, not HTML)
and a ``shquote`` filter (:func:`shlex.quote`) that every template applies to every value it
puts on a command line, so an argument keeps its exact bytes whatever quotes, spaces or ``$``
it contains.

The llama-server arguments arrive already rendered for the installed binary's dialect; the
script passes them through unchanged. A flat nightly build (lemonade-sdk/llamacpp-rocm zip:
``llama-server`` next to its shared libraries and bundled ROCm runtime) gets its own folder
prepended to ``LD_LIBRARY_PATH``, which is what Lemonade itself does when it starts a ROCm
``llama-server`` (lemonade-sdk/lemonade ``src/cpp/server/backends/llamacpp/llamacpp_server.cpp``).
"""

from __future__ import annotations

import re
import shlex
from functools import cache
from pathlib import PurePosixPath

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from ojai_setup.core.address import AddressError, check_host, is_loopback
from ojai_setup.core.errors import InputError
from ojai_setup.core.paths import FLM_PORT, FLM_STATE_DIR, SERVICE_USER
from ojai_setup.core.resources import data_dir, template_cache
from ojai_setup.core.root import Root

__all__ = [
    "FLM_DEFAULT_PORT",
    "LaunchError",
    "data_dir",
    "has_bundled_libs",
    "read_secret",
    "secret_env",
    "render_flm_script",
    "render_flm_unit",
    "render_llama_script",
    "render_llama_unit",
    "render_sglang_script",
    "render_sglang_unit",
    "template_environment",
]

#: ``flm serve`` listens here unless told otherwise (ROCm/FastFlowLM ``src/src/main.cpp``:
#: "default is 52625, same with the ollama server").
FLM_DEFAULT_PORT = FLM_PORT

_ROUTE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_USER_NAME = r"^[a-z_][a-z0-9_-]{0,31}$"
# systemd splits ExecStart= on whitespace and expands "%" specifiers and "$" variables, so a
# path placed there must contain none of those (nor quotes or backslashes).
_UNIT_SAFE_PATH = r"^/[A-Za-z0-9._+/@:,=-]+$"
_UNIT_NAME = r"^ojai-[A-Za-z0-9][A-Za-z0-9._-]{0,63}\.service$"
_FLM_TAG = re.compile(r"^[a-z0-9][a-z0-9._-]*:[a-z0-9][a-z0-9._-]*$")


class LaunchError(InputError):
    """A value that cannot be put into a launch script or unit safely."""


@cache
def template_environment() -> Environment:
    """The one Jinja2 environment over ojai's ``templates/`` folder."""
    env = Environment(
        loader=FileSystemLoader(str(data_dir("templates"))),
        bytecode_cache=template_cache(),  # compiled once, then kept in the user's cache
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shquote"] = shlex.quote
    env.filters["option_groups"] = option_groups
    return env


def option_groups(args: list[str]) -> list[list[str]]:
    """``args`` cut into one group per option: a flag and the values after it (for one line
    each in a script). Joining the groups gives ``args`` back unchanged."""
    groups: list[list[str]] = []
    for arg in args:
        is_flag = arg.startswith("-") and len(arg) > 1 and not arg[1:2].isdigit()
        if is_flag or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def _render(template: str, **values: object) -> str:
    return template_environment().get_template(template).render(**values)


# -- checks on the values ----------------------------------------------------------------------
def _check_route_name(route_name: str) -> None:
    if not re.match(_ROUTE_NAME, route_name):
        raise LaunchError(
            f"route name {route_name!r} is not usable in a file or unit name: use letters, "
            "digits, '.', '_' and '-' (at most 64, starting with a letter or digit)")


def _check_absolute(what: str, path: str) -> None:
    if not PurePosixPath(path).is_absolute() or "\0" in path or "\n" in path:
        raise LaunchError(f"{what} must be an absolute path on one line, got {path!r}")


def _check_unit_path(what: str, path: str) -> None:
    if not re.match(_UNIT_SAFE_PATH, path) or ".." in PurePosixPath(path).parts:
        raise LaunchError(
            f"{what} {path!r} cannot be used in a systemd unit: it must be absolute and free of "
            "spaces, quotes, '%', '$' and backslashes")


def _check_user(user: str) -> None:
    if not re.match(_USER_NAME, user):
        raise LaunchError(f"{user!r} is not a valid user name for a systemd unit")


def _check_args(args: list[str]) -> None:
    for arg in args:
        if "\0" in arg:
            raise LaunchError(f"argument {arg!r} contains a NUL byte, which no program can receive")


def _check_env(env: dict[str, str]) -> None:
    for name, value in env.items():
        if not re.match(_ENV_NAME, name):
            raise LaunchError(f"{name!r} is not a valid environment variable name")
        if "\0" in value:
            raise LaunchError(f"the value of {name} contains a NUL byte")


# -- llama-server ------------------------------------------------------------------------------
def has_bundled_libs(root: Root, binary: str) -> bool:
    """Whether shared libraries sit next to ``binary`` (a flat nightly zip).

    Such a folder is put at the front of ``LD_LIBRARY_PATH`` by :func:`render_llama_script`.
    """
    folder = str(PurePosixPath(binary).parent)
    return bool(root.glob(folder.rstrip("/") + "/lib*.so*"))


def render_llama_script(binary: str, args: list[str], env: dict[str, str], route_name: str,
                        *, bundled_libs: bool = False) -> str:
    """A bash script that exports ``env`` and ``exec``\\ s ``binary`` with exactly ``args``.

    ``bundled_libs``: the binary's folder holds its own shared libraries (see
    :func:`has_bundled_libs`); that folder is prepended to ``LD_LIBRARY_PATH``, keeping any value
    given in ``env`` or inherited after it.
    """
    _check_route_name(route_name)
    _check_absolute("the llama-server binary", binary)
    _check_args(args)
    _check_env(env)
    lib_dir = str(PurePosixPath(binary).parent) if bundled_libs else None
    return _render("llama-server.sh.j2", binary=binary, args=args, env=dict(sorted(env.items())),
                   lib_dir=lib_dir, route_name=route_name)


def render_llama_unit(script: str, route_name: str, user: str = SERVICE_USER,
                      working_directory: str | None = None, *, models_dir: str | None = None,
                      host: str = "127.0.0.1", env_file: str | None = None,
                      groups: frozenset[str] | None = None,
                      conflicts: tuple[str, ...] = ()) -> str:
    """A hardened systemd service that runs the launch ``script`` of ``route_name`` as the
    unprivileged ``user`` (ojai's service user, never root).

    - Devices: only ``/dev/kfd`` and the DRM nodes (``DevicePolicy=closed``), reached through
      the ``render`` and ``video`` groups; no ``PrivateDevices`` (it would hide ``/dev/kfd``).
    - Files: the whole system read-only (``ProtectSystem=strict``), a private ``/tmp``, homes
      hidden (``ProtectHome=yes``); a ``models_dir`` under ``/home`` is bound back read-only
      over an empty ``/home`` (``ProtectHome=tmpfs``). llama-server writes nothing.
    - No capabilities, no privilege gain, the ``@system-service`` system calls only, IPv4/IPv6
      and Unix sockets only; on a loopback ``host`` no IP traffic but to this machine.
    - ``env_file``: a root-only file systemd reads before dropping privileges
      (``LLAMA_API_KEY=``, which llama-server takes as ``--api-key``).
    - ``groups``: the machine's groups (None: unknown); a device group it lacks is left out,
      since systemd refuses to start a unit naming a group that does not exist.
    - ``conflicts``: the units of routes that cannot share the GPU budget with this one
      (``Conflicts=``: starting this unit stops them, and the other way round).
    """
    _check_route_name(route_name)
    _check_unit_path("the launch script", script)
    _check_user(user)
    if working_directory is not None:
        _check_unit_path("the working directory", working_directory)
    home_models = None
    if models_dir is not None:
        _check_unit_path("the models folder", models_dir)
        if PurePosixPath(models_dir).parts[1:2] in (("home",), ("root",)):
            home_models = models_dir
    if env_file is not None:
        _check_unit_path("the environment file", env_file)
    host = _check_host(host)
    for unit in conflicts:
        if not re.match(_UNIT_NAME, unit):
            raise LaunchError(f"{unit!r} is not a unit name ojai writes (ojai-<route>.service)")
    return _render("llama-server.service.j2", script=script, route_name=route_name, user=user,
                   conflicts=list(conflicts),
                   working_directory=working_directory, home_models=home_models,
                   loopback=is_loopback(host), env_file=env_file,
                   groups=_device_groups(("render", "video"), groups))


def _device_groups(wanted: tuple[str, ...], present: frozenset[str] | None) -> list[str]:
    return [g for g in wanted if present is None or g in present]


def _check_host(host: str) -> str:
    try:
        return check_host(host)
    except AddressError as exc:
        raise LaunchError(str(exc)) from None


#: what an API key may hold: it goes into a systemd environment file unquoted
_SECRET = r"^[A-Za-z0-9._~+/=:,@-]{16,512}$"


def read_secret(path: str) -> str:
    """The API key in the file ``path`` (one line; a final newline is dropped).

    Refused with a :class:`LaunchError` saying why: a missing or unreadable file, an empty
    one, more than one line, fewer than 16 characters, or characters other than letters,
    digits and ``. _ ~ + / = : , @ -``.
    """
    try:
        raw = open(path, "rb").read(4096)
    except OSError as exc:
        raise LaunchError(f"--api-key-file {path}: cannot read it ({exc.strerror})") from None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise LaunchError(f"--api-key-file {path}: the key must be plain ASCII") from None
    key = text[:-1] if text.endswith("\n") else text
    if not key:
        raise LaunchError(f"--api-key-file {path}: the file is empty")
    if "\n" in key or "\r" in key:
        raise LaunchError(f"--api-key-file {path}: the key must be a single line")
    if not re.match(_SECRET, key):
        raise LaunchError(f"--api-key-file {path}: the key must be 16 to 512 letters, digits or "
                          ". _ ~ + / = : , @ - (no spaces or quotes)")
    return key


def secret_env(variable: str, value: str) -> str:
    """The text of an environment file setting ``variable`` to ``value``."""
    _check_env({variable: value})
    return f"{variable}={value}\n"


# -- FastFlowLM --------------------------------------------------------------------------------
def render_flm_script(tag: str, *, ctx_len: int, port: int = FLM_DEFAULT_PORT,
                      host: str = "127.0.0.1", flm: str = "/usr/bin/flm") -> str:
    """A bash script running ``flm serve TAG --ctx-len N --port P --host H``.

    These are the options Lemonade passes when it starts FastFlowLM itself
    (lemonade-sdk/lemonade ``src/cpp/server/backends/fastflowlm/fastflowlm_server.cpp``);
    ``--host`` defaults to 127.0.0.1 in FastFlowLM (``src/include/utils/vm_args.hpp``) and is
    written out so that the script says where it listens. The fastflowlm deb installs
    ``/opt/fastflowlm/bin/flm`` with a link at ``/usr/bin/flm`` (ROCm/FastFlowLM ``debian/rules``).
    """
    if not _FLM_TAG.match(tag):
        raise LaunchError(f"{tag!r} is not a FastFlowLM model tag (like 'qwen3:4b')")
    if not 1 <= port <= 65535:
        raise LaunchError(f"port {port} is out of range")
    if ctx_len <= 0:
        raise LaunchError(f"context length must be positive, got {ctx_len}")
    host = _check_host(host)
    _check_absolute("the flm binary", flm)
    return _render("flm-serve.sh.j2", flm=flm, tag=tag, ctx_len=ctx_len, port=port, host=host)


def render_flm_unit(script: str, tag: str, user: str = SERVICE_USER, *,
                    state_dir: str = FLM_STATE_DIR, groups: frozenset[str] | None = None) -> str:
    """A hardened systemd service running the ``flm serve`` launch ``script`` as ``user``.

    ``LimitMEMLOCK=infinity``: ``flm validate`` refuses a memlock limit under 100 MiB that it
    cannot raise (ROCm/FastFlowLM ``src/src/main.cpp``; ROCm/FastFlowLM#397 tries
    ``setrlimit`` first, which an unprivileged service cannot do above its hard limit), and a
    service does not read ``/etc/security/limits.conf`` (ROCm/FastFlowLM#437). Lemonade's own
    unit sets the same (lemonade-sdk/lemonade#1088). The NPU is ``/dev/accel/accel*``
    (``DeviceAllow=char-accel``, the ``render`` group). FastFlowLM downloads and keeps its models
    under ``$FLM_MODEL_PATH`` (else ``~/.config/flm``): the service's own state folder
    ``state_dir``, the only place it may write.
    """
    if not _FLM_TAG.match(tag):
        raise LaunchError(f"{tag!r} is not a FastFlowLM model tag (like 'qwen3:4b')")
    _check_unit_path("the launch script", script)
    _check_user(user)
    _check_unit_path("the FastFlowLM state folder", state_dir)
    if not state_dir.startswith("/var/lib/") or state_dir.count("/") != 3:
        raise LaunchError(f"the FastFlowLM state folder must be a folder of /var/lib, got {state_dir!r}")
    return _render("flm-serve.service.j2", script=script, tag=tag, user=user, state_dir=state_dir,
                   state_name=PurePosixPath(state_dir).name,
                   groups=_device_groups(("render",), groups))



# -- SGLang ------------------------------------------------------------------------------------
def render_sglang_script(python: str, args: list[str], env: dict[str, str], route_name: str, *,
                         version: str, api_key_variable: str | None = None) -> str:
    """A bash script that exports ``env`` and ``exec``\\ s ``python -m sglang.launch_server``
    with exactly ``args``; with ``api_key_variable``, ``--api-key`` takes that variable's value
    (from the unit's root-only environment file: SGLang reads its key only from its command
    line), and the script refuses to start without it."""
    _check_route_name(route_name)
    _check_absolute("SGLang's Python", python)
    _check_args(args)
    _check_env(env)
    if api_key_variable is not None:
        _check_env({api_key_variable: ""})
    return _render("sglang-server.sh.j2", python=python, args=args, env=dict(sorted(env.items())),
                   route_name=route_name, version=version, api_key_variable=api_key_variable)


def render_sglang_unit(script: str, route_name: str, user: str = SERVICE_USER, *,
                       state_dir: str, env_file: str | None = None,
                       groups: frozenset[str] | None = None) -> str:
    """A hardened systemd service running the SGLang launch ``script`` as ``user``: the GPUs
    through ``/dev/kfd`` and the DRM nodes (``render``, ``video``), the system read-only but for
    its state folder ``state_dir`` (a folder of /var/lib, where SGLang's Hugging Face cache
    goes), no capabilities; outbound network allowed, since SGLang downloads the checkpoint."""
    _check_route_name(route_name)
    _check_unit_path("the launch script", script)
    _check_user(user)
    _check_unit_path("the SGLang state folder", state_dir)
    if not state_dir.startswith("/var/lib/") or state_dir.count("/") != 3:
        raise LaunchError(f"the SGLang state folder must be a folder of /var/lib, got {state_dir!r}")
    if env_file is not None:
        _check_unit_path("the environment file", env_file)
    return _render("sglang-server.service.j2", script=script, route_name=route_name, user=user,
                   state_dir=state_dir, state_name=PurePosixPath(state_dir).name,
                   env_file=env_file, groups=_device_groups(("render", "video"), groups))
