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

from ojai_setup.core.errors import InputError
from ojai_setup.core.paths import FLM_PORT
from ojai_setup.core.resources import data_dir
from ojai_setup.core.root import Root

__all__ = [
    "FLM_DEFAULT_PORT",
    "LaunchError",
    "data_dir",
    "has_bundled_libs",
    "render_flm_script",
    "render_flm_unit",
    "render_llama_script",
    "render_llama_unit",
    "template_environment",
]

#: ``flm serve`` listens here unless told otherwise (ROCm/FastFlowLM ``src/src/main.cpp``:
#: "default is 52625, same with the ollama server").
FLM_DEFAULT_PORT = FLM_PORT

_ROUTE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# systemd splits ExecStart= on whitespace and expands "%" specifiers and "$" variables, so a
# path placed there must contain none of those (nor quotes or backslashes).
_UNIT_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._+/@:,=-]+$")
_FLM_TAG = re.compile(r"^[a-z0-9][a-z0-9._-]*:[a-z0-9][a-z0-9._-]*$")


class LaunchError(InputError):
    """A value that cannot be put into a launch script or unit safely."""


@cache
def template_environment() -> Environment:
    """The one Jinja2 environment over ojai's ``templates/`` folder."""
    env = Environment(
        loader=FileSystemLoader(str(data_dir("templates"))),
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
    if not _ROUTE_NAME.match(route_name):
        raise LaunchError(
            f"route name {route_name!r} is not usable in a file or unit name: use letters, "
            "digits, '.', '_' and '-' (at most 64, starting with a letter or digit)")


def _check_absolute(what: str, path: str) -> None:
    if not PurePosixPath(path).is_absolute() or "\0" in path or "\n" in path:
        raise LaunchError(f"{what} must be an absolute path on one line, got {path!r}")


def _check_unit_path(what: str, path: str) -> None:
    if not _UNIT_SAFE_PATH.match(path) or ".." in PurePosixPath(path).parts:
        raise LaunchError(
            f"{what} {path!r} cannot be used in a systemd unit: it must be absolute and free of "
            "spaces, quotes, '%', '$' and backslashes")


def _check_user(user: str) -> None:
    if not _USER_NAME.match(user):
        raise LaunchError(f"{user!r} is not a valid user name for a systemd unit")


def _check_args(args: list[str]) -> None:
    for arg in args:
        if "\0" in arg:
            raise LaunchError(f"argument {arg!r} contains a NUL byte, which no program can receive")


def _check_env(env: dict[str, str]) -> None:
    for name, value in env.items():
        if not _ENV_NAME.match(name):
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


def render_llama_unit(script: str, route_name: str, user: str,
                      working_directory: str | None = None) -> str:
    """A systemd service that runs the launch ``script`` of ``route_name`` as ``user``.

    The service joins the ``render`` and ``video`` groups (``/dev/kfd`` and ``/dev/dri``) and
    restarts on failure. It does not set ``ProtectHome``: models may live under ``/home``.
    """
    _check_route_name(route_name)
    _check_unit_path("the launch script", script)
    _check_user(user)
    if working_directory is not None:
        _check_unit_path("the working directory", working_directory)
    return _render("llama-server.service.j2", script=script, route_name=route_name, user=user,
                   working_directory=working_directory)


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
    if not host or any(c.isspace() for c in host) or "\0" in host:
        raise LaunchError(f"{host!r} is not a host address")
    _check_absolute("the flm binary", flm)
    return _render("flm-serve.sh.j2", flm=flm, tag=tag, ctx_len=ctx_len, port=port, host=host)


def render_flm_unit(script: str, tag: str, user: str) -> str:
    """A systemd service running the ``flm serve`` launch ``script`` as ``user``.

    ``LimitMEMLOCK=infinity``: ``flm validate`` refuses a memlock limit under 100 MiB that it
    cannot raise (ROCm/FastFlowLM ``src/src/main.cpp``), and a service does not read
    ``/etc/security/limits.conf``. The ``render`` group gives access to ``/dev/accel/accel*``.
    """
    if not _FLM_TAG.match(tag):
        raise LaunchError(f"{tag!r} is not a FastFlowLM model tag (like 'qwen3:4b')")
    _check_unit_path("the launch script", script)
    _check_user(user)
    return _render("flm-serve.service.j2", script=script, tag=tag, user=user)
