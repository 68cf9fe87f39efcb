"""The configured kernel command line, computed the way ``grub-mkconfig`` computes it.

``grub-mkconfig`` (behind ``update-grub``) sources ``/etc/default/grub`` and then every
``/etc/default/grub.d/*.cfg`` in glob order, all in one shell, and puts
``GRUB_CMDLINE_LINUX GRUB_CMDLINE_LINUX_DEFAULT`` on the default entry's ``linux`` line. A
drop-in that assigns one of them wins over the main file; one that writes
``VAR="$VAR x"`` appends to it. Rather than imitate that, :func:`source_grub_files` has real
bash do it (clean environment, ``set -e``, ``LC_ALL=C`` for the glob order) on the machine's
files and report both values after each file, so the caller can also tell which file decides
each variable.

Running bash here is reading a fact: the files are the machine's own, which ``update-grub``
sources as root in the same way. Under a test root the files are resolved under that root;
nothing outside it is read by this module itself.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from ojai_setup.core.paths import GRUB_DEFAULT, GRUB_DROPIN_DIR
from ojai_setup.core.root import Root
from ojai_setup.formats.grub import (
    CMDLINE_VARS,
    DEFAULT_VAR,
    LINUX_VAR,
    GrubEditError,
    parse_grub_default,
)
from ojai_setup.formats.kernel_params import parse_cmdline
from ojai_setup.model.facts import GrubConfig, GrubSource

#: sources ``$1/default/grub`` then ``$1/default/grub.d/*.cfg`` as grub-mkconfig does, and
#: prints, after each file: its path, then for each variable a set flag and its value, NUL
#: separated. A file's own output goes to stderr so that it cannot disturb the records.
#: under a machine root (``$__OJAI_ROOT``) no host command may run: PATH leads nowhere, and a command
#: the files run (GRUB_DISTRIBUTOR="$(sed ... /etc/system-release)" on Fedora) answers with
#: the root's own capture of it (see ojai_setup.core.root), or nothing
_NO_HOST_COMMANDS = r"""
command_not_found_handle() {
  local __ojai_key="${1##*/}" __ojai_arg
  shift
  for __ojai_arg in "$@"; do __ojai_key+=" $__ojai_arg"; done
  case $__ojai_key in */*) __ojai_key=${__ojai_key//\//%2F} ;; esac
  if [ -f "$__OJAI_ROOT/.ojai/commands/$__ojai_key/stdout" ]; then
    printf '%s\n' "$(<"$__OJAI_ROOT/.ojai/commands/$__ojai_key/stdout")"
  fi
  return 0
}
"""

_SOURCE_CHAIN = r"""
set -e
__ojai_etc=$1
__ojai_report() {
  printf '%s\0%s\0%s\0%s\0%s\0' "$1" "${GRUB_CMDLINE_LINUX+x}" "${GRUB_CMDLINE_LINUX-}" \
    "${GRUB_CMDLINE_LINUX_DEFAULT+x}" "${GRUB_CMDLINE_LINUX_DEFAULT-}"
}
if test -f "$__ojai_etc/default/grub"; then
  . "$__ojai_etc/default/grub" >&2
  __ojai_report "$__ojai_etc/default/grub"
fi
for __ojai_x in "$__ojai_etc"/default/grub.d/*.cfg; do
  if [ -e "$__ojai_x" ]; then
    __ojai_f=$__ojai_x
    . "$__ojai_x" >&2
    __ojai_report "$__ojai_f"
  fi
done
"""


#: what would still reach the host under a root: a command or a sourced file by absolute path
_HOST_PATH = re.compile(r"(\$\(|`)\s*/\S*|(^|[;&|]\s*|\n\s*)(\.|source)\s+/\S*", re.M)


def bash_argv(script: str, *args: str, root: Root | None = None) -> tuple[list[str], dict[str, str]]:
    """bash running ``script`` with ``args`` in a clean environment; under a machine ``root``
    (not the host) with :data:`_NO_HOST_COMMANDS` first and a PATH that finds no program."""
    env = {"LC_ALL": "C"}
    if root is not None and not root.is_host:
        env["PATH"] = "/nonexistent/ojai-no-host-commands"
        env["__OJAI_ROOT"] = str(root.resolve("/"))
        script = _NO_HOST_COMMANDS + script
    bash = shutil.which("bash") or "/bin/bash"  # ojai's own shell, found on its own PATH
    return [bash, "--noprofile", "--norc", "-c", script, "_", *args], env


def source_grub_files(etc_dir: Path, *, timeout: float = 20.0,
                      root: Root | None = None) -> list[tuple[str, str | None, str | None]]:
    """Source ``etc_dir/default/grub`` and ``etc_dir/default/grub.d/*.cfg`` in one bash, as
    grub-mkconfig does; return ``(real path, GRUB_CMDLINE_LINUX, GRUB_CMDLINE_LINUX_DEFAULT)``
    after each file (None: unset). Raises :class:`GrubEditError` when bash stops. Under a
    machine ``root`` no host program runs (a command the files run is answered from the
    root's captures)."""
    etc_dir = Path(etc_dir).resolve()
    argv, env = bash_argv(_SOURCE_CHAIN, str(etc_dir), root=root)
    try:  # an empty environment but the locale, as `env -i LC_ALL=C` gives (without its exec)
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL, cwd="/")
    except subprocess.TimeoutExpired as exc:
        raise GrubEditError(f"bash did not finish sourcing {etc_dir}/default/grub and its "
                            f"drop-ins within {timeout:g} s; one of them runs a command that "
                            f"hangs. Fix it and run ojai again.") from exc
    fields = proc.stdout.decode("utf-8", errors="replace").split("\0")
    records: list[tuple[str, str | None, str | None]] = []
    for i in range(0, len(fields) - 4, 5):
        path, lset, linux, dset, default = fields[i:i + 5]
        records.append((path, linux if lset else None, default if dset else None))
    if proc.returncode != 0:
        order = ([etc_dir / "default" / "grub"] if (etc_dir / "default" / "grub").is_file() else [])
        order += sorted((etc_dir / "default" / "grub.d").glob("*.cfg"), key=lambda p: p.name.encode())
        where = f" in {order[len(records)]}" if len(records) < len(order) else ""
        stderr = proc.stderr.decode("utf-8", errors="replace").strip()
        raise GrubEditError(
            f"bash stops (exit {proc.returncode}) while sourcing the grub defaults{where}: "
            f"{stderr[-300:] or 'no message'}; grub-mkconfig would stop the same way. Fix the "
            f"file and run ojai again.")
    return records


def _assigns(root: Root, path: str) -> tuple[str, ...] | None:
    """The command line variables ``path`` assigns (None: it cannot be parsed)."""
    try:
        grub = parse_grub_default(root.read_text(path), path)
    except (GrubEditError, OSError):
        return None
    return tuple(v for v in CMDLINE_VARS if grub.assigned(v))


def configured_cmdline(records: list[tuple[str, str | None, str | None]]) -> list[str]:
    """The kernel parameters grub-mkconfig puts on the default entry from these values."""
    if not records:
        return []
    _, linux, default = records[-1]
    return parse_cmdline(f"{linux or ''} {default or ''}")


def read_grub_config(root: Root) -> GrubConfig | None:
    """The configured command line and the file deciding each variable; None without GRUB."""
    if not root.exists(GRUB_DEFAULT) and not root.glob(f"{GRUB_DROPIN_DIR}/*.cfg"):
        return None
    etc = root.resolve("/etc")
    if not root.is_host:
        for path in [GRUB_DEFAULT, *root.glob(f"{GRUB_DROPIN_DIR}/*.cfg")]:
            try:
                text = root.read_text(path)
            except OSError:
                continue
            hit = _HOST_PATH.search(text)
            if hit:
                return GrubConfig(error=(
                    f"{path}: `{hit.group(0).strip()}` names a program or file by its absolute "
                    "path; under --root ojai runs and reads nothing of the host, so it cannot "
                    "follow it. Read this machine on the machine itself"))
    try:
        records = source_grub_files(etc, root=root)
    except GrubEditError as exc:
        for path in [GRUB_DEFAULT, *root.glob(f"{GRUB_DROPIN_DIR}/*.cfg")]:
            try:
                parse_grub_default(root.read_text(path), path)
            except GrubEditError as parse_error:
                return GrubConfig(error=str(parse_error))
            except OSError:
                continue
        return GrubConfig(error=str(exc).replace(str(etc), "/etc"))
    sources: list[GrubSource] = []
    for real, linux, default in records:
        path = root.machine_path(real)
        root.reads.append(path)
        sources.append(GrubSource(path=path, linux=linux, default=default,
                                  assigns=list(_assigns(root, path) or ())))
    winners: dict[str, str] = {}
    previous: dict[str, str | None] = {LINUX_VAR: None, DEFAULT_VAR: None}
    for src in sources:
        for var, value in ((LINUX_VAR, src.linux), (DEFAULT_VAR, src.default)):
            if var in src.assigns or value != previous[var]:
                winners[var] = src.path
            previous[var] = value
    return GrubConfig(files=sources, linux=previous[LINUX_VAR], default=previous[DEFAULT_VAR],
                      tokens=configured_cmdline(records), winners=winners)
