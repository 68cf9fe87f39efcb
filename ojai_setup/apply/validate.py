"""Validators the executor runs on a candidate file before it replaces the real one: an edited
``/etc/default/grub`` is sourced by bash and must give exactly the planned command line."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ojai_setup.core.paths import GRUB_DEFAULT, GRUB_DROPIN_DIR
from ojai_setup.core.root import Root
from ojai_setup.facts.grub_env import bash_argv, configured_cmdline, source_grub_files
from ojai_setup.formats.grub import (
    CMDLINE_VARS,
    CmdlineValue,
    GrubDefault,
    GrubEditError,
    parse_grub_default,
)
from ojai_setup.formats.kernel_params import _norm, param_key, parse_cmdline, same_key
from ojai_setup.model.actions import WriteFile


def _read(path: Path) -> str:
    """A file's text exactly as stored (no newline translation, so CRLF stays visible)."""
    return path.read_bytes().decode("utf-8")


_BASH_READ = 'set -e; . "$1"; printf %s "${!2+x}"; printf %s "${!2}"'


def bash_read_var(candidate_path: Path, var: str, *, timeout: float = 10.0,
                  root: Root | None = None) -> str:
    """Source ``candidate_path`` in bash, as ``grub-mkconfig`` does, and return ``var``.

    bash runs in a clean environment (``env -i``, no profile or rc files, ``set -e``) from
    ``/``. The file is the user's own grub default file (or its edited copy), which
    ``update-grub`` sources in the same way. Raises :class:`GrubEditError` when bash fails or
    the variable is not set.
    """
    path = Path(candidate_path).resolve()
    # a clean environment; under a machine root no host program runs (grub_env.bash_argv)
    argv, env = bash_argv(_BASH_READ, str(path), var, root=root)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=timeout, stdin=subprocess.DEVNULL, cwd="/", env=env)
    except subprocess.TimeoutExpired as exc:
        raise GrubEditError(
            f"{path}: bash did not finish sourcing it within {timeout:g} s; the file runs a "
            f"command that hangs. Fix the file and run ojai again."
        ) from exc
    if proc.returncode != 0:
        raise GrubEditError(
            f"{path}: bash cannot source it (exit {proc.returncode}: "
            f"{proc.stderr.strip() or 'no message'}); grub-mkconfig would stop the same way. "
            f"Fix the file and run ojai again."
        )
    if not proc.stdout.startswith("x"):
        raise GrubEditError(f"{path}: bash reads no {var} from it.")
    return proc.stdout[1:]


def _compare(path: Path, var: str, planned: CmdlineValue, actual: list[str]) -> None:
    """Raise unless bash's parameters are what the parser planned: every literal parameter, in
    order; parameters written with ``$VAR`` references expand to whatever bash makes of them,
    and the planned literal parameters must then appear in bash's list in the same order."""
    literal = [p.text for p in planned.params if not p.has_ref]
    if len(literal) == len(planned.params):
        ok = literal == actual
    else:
        pos = iter(actual)
        ok = all(any(tok == got for got in pos) for tok in literal)
    if not ok:
        raise GrubEditError(
            f"{path}: bash reads {var} as {actual!r}, but ojai planned {planned.tokens!r}. "
            f"The file was not changed."
        )


def _by_key(params: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for token in params:
        out.setdefault(_norm(param_key(token)), []).append(token)
    return out


def validate_chain(path: Path, action: WriteFile, root: Root) -> None:
    """With ``path`` in place of ``action.path``, bash must compute the kernel command line
    ``action.cmdline`` asks for, sourcing the machine's /etc/default/grub and grub.d/*.cfg as
    grub-mkconfig does (on a scratch copy, so nothing on the machine is touched)."""
    check = action.cmdline
    if check is None:
        return
    with tempfile.TemporaryDirectory(prefix="ojai-grub-") as scratch:
        etc = Path(scratch) / "etc"
        dropins = etc / "default" / "grub.d"
        dropins.mkdir(parents=True)
        if root.exists(GRUB_DEFAULT):
            shutil.copyfile(root.resolve(GRUB_DEFAULT), etc / "default" / "grub")
        for machine_path in root.glob(f"{GRUB_DROPIN_DIR}/*"):
            real = root.resolve(machine_path)
            if real.is_file():
                shutil.copyfile(real, dropins / real.name)
        shutil.copyfile(path, etc / action.path.removeprefix("/etc/"))
        tokens = configured_cmdline(source_grub_files(etc, root=root))
    key = param_key(check.param)
    hits = [t for t in tokens if same_key(param_key(t), key)]
    others = [t for t in tokens if not same_key(param_key(t), key)]
    if hits != [check.param]:
        raise GrubEditError(
            f"with the new {action.path}, bash reads {hits or 'no'} {key} parameter(s) on the "
            f"kernel command line (from {GRUB_DEFAULT} and {GRUB_DROPIN_DIR}); expected exactly "
            f"one {check.param}. The file was not changed.")
    if others != list(check.others):
        raise GrubEditError(
            f"with the new {action.path}, bash reads the other kernel parameters as {others}, "
            f"but they should stay {list(check.others)}. The file was not changed.")


def validate_grub(path: Path, action: WriteFile, root: Root | None = None) -> None:
    """The executor's ``"grub"`` validator for a :class:`WriteFile` of a grub default file.

    ``path`` holds the candidate text, which must equal ``action.after``. For every kernel
    command line variable the file sets, bash must read back every parameter as planned, in
    order; and each key whose parameters the plan changed (compared with ``action.before``)
    must appear at most once, exactly as planned, or not at all when the plan removed it.
    """
    path = Path(path)
    text = _read(path)
    if text != action.after:
        raise GrubEditError(f"{path}: the written text differs from the planned text.")
    after = parse_grub_default(text, str(path))
    before: GrubDefault | None
    try:
        before = parse_grub_default(action.before or "", action.path)
    except GrubEditError:
        before = None
    for var in CMDLINE_VARS:
        if not after.assigned(var):
            continue
        planned = after.cmdline(var)
        new = _by_key(planned.tokens)
        old: dict[str, list[str]] | None = {}
        if before is None:
            old = None
        elif before.assigned(var):
            try:
                old = _by_key(before.cmdline(var).tokens)
            except GrubEditError:
                old = None
        actual = parse_cmdline(bash_read_var(path, var, root=root))
        got = _by_key(actual)
        keys = new.keys() if old is None else new.keys() | old.keys()
        for key in sorted(keys):
            if "$" in key:
                continue  # a reference: bash expands it, compared by _compare below
            if old is not None and new.get(key) == old.get(key):
                continue
            want = new.get(key, [])
            if len(want) > 1:
                raise GrubEditError(f"{path}: the plan leaves {want!r} in {var}.")
            if got.get(key, []) != want:
                raise GrubEditError(
                    f"{path}: bash reads {got.get(key, [])!r} for {key} in {var}; the plan "
                    f"has {want!r}. The file was not changed."
                )
        _compare(path, var, planned, actual)
    if root is not None:
        validate_chain(path, action, root)


def _validate_tokens(path: Path, action: WriteFile, read: Callable[[str], list[str]]) -> None:
    """The candidate, read the way its consumer reads it, must hold the planned text, exactly
    one ``action.cmdline.param`` and every other parameter as it was, in order."""
    from ojai_setup.formats.kernel_cmdline import CmdlineFormatError

    text = _read(Path(path))
    if text != action.after:
        raise GrubEditError(f"{path}: the written text differs from the planned text.")
    check = action.cmdline
    if check is None:
        return
    try:
        tokens = read(text)
    except CmdlineFormatError as exc:
        raise GrubEditError(f"the new {action.path} cannot be read back: {exc}") from None
    key = param_key(check.param)
    hits = [t for t in tokens if same_key(param_key(t), key)]
    others = [t for t in tokens if not same_key(param_key(t), key)]
    if hits != [check.param]:
        raise GrubEditError(f"the new {action.path} gives {hits or 'no'} {key} parameter(s); "
                            f"expected exactly one {check.param}. The file was not changed.")
    if others != list(check.others):
        raise GrubEditError(f"the new {action.path} gives the other kernel parameters as "
                            f"{others}, but they should stay {list(check.others)}. The file "
                            "was not changed.")


def validate_kernel_cmdline(path: Path, action: WriteFile) -> None:
    """``/etc/kernel/cmdline`` as kernel-install reads it."""
    from ojai_setup.formats.kernel_cmdline import tokens_of

    _validate_tokens(path, action, tokens_of)


def validate_loader_entry(path: Path, action: WriteFile) -> None:
    """A loader entry's ``options`` lines, as systemd-boot joins them."""
    from ojai_setup.formats.boot_files import entry_options

    _validate_tokens(path, action, entry_options)


def validate_kernelstub(path: Path, action: WriteFile) -> None:
    """kernelstub's configuration: valid JSON whose user.kernel_options are as planned."""
    from ojai_setup.formats.kernelstub import kernel_options

    _validate_tokens(path, action, kernel_options)
