"""Validators the executor runs on a candidate file before it replaces the real one: an edited
``/etc/default/grub`` is sourced by bash and must give exactly the planned command line."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ojai_setup.core.paths import GRUB_DEFAULT, GRUB_DROPIN_DIR
from ojai_setup.core.root import Root
from ojai_setup.facts.grub_env import configured_cmdline, source_grub_files
from ojai_setup.formats.grub import (
    CMDLINE_VARS,
    CmdlineValue,
    GrubDefault,
    GrubEditError,
    _norm,
    param_key,
    parse_cmdline,
    parse_grub_default,
    same_key,
)
from ojai_setup.model.actions import WriteFile


def _read(path: Path) -> str:
    """A file's text exactly as stored (no newline translation, so CRLF stays visible)."""
    return path.read_bytes().decode("utf-8")


_BASH_READ = 'set -e; . "$1"; printf %s "${!2+x}"; printf %s "${!2}"'


def bash_read_var(candidate_path: Path, var: str, *, timeout: float = 10.0) -> str:
    """Source ``candidate_path`` in bash, as ``grub-mkconfig`` does, and return ``var``.

    bash runs in a clean environment (``env -i``, no profile or rc files, ``set -e``) from
    ``/``. The file is the user's own grub default file (or its edited copy), which
    ``update-grub`` sources in the same way. Raises :class:`GrubEditError` when bash fails or
    the variable is not set.
    """
    path = Path(candidate_path).resolve()
    argv = ["env", "-i", "bash", "--noprofile", "--norc", "-c", _BASH_READ, "_", str(path), var]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=timeout, stdin=subprocess.DEVNULL, cwd="/")
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
        tokens = configured_cmdline(source_grub_files(etc))
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
        actual = parse_cmdline(bash_read_var(path, var))
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
