"""Where an edit of GRUB's kernel command line must land to take effect: ``/etc/default/grub``
or one of its drop-ins (the GRUB boot path's planner, :mod:`ojai_setup.boot.grub`; the other
boot paths have one file each, edited by key).

``grub-mkconfig`` sources ``/etc/default/grub`` and then ``/etc/default/grub.d/*.cfg`` in
order; each assignment of ``GRUB_CMDLINE_LINUX`` / ``GRUB_CMDLINE_LINUX_DEFAULT`` replaces the
value, except where it names the variable itself (``VAR="$VAR x"``, or
``VAR="${VAR:+$VAR }x"``), which appends. So the
parameter ``ttm.pages_limit=`` the kernel gets comes from whichever file's assignment survives,
and editing ``/etc/default/grub`` alone changes nothing when a drop-in replaces the value.

:func:`plan_cmdline_edit` follows every parameter of the effective command line back to the
file (and variable) that wrote it, then plans, as text edits by key:

- the parameter set once, to the wanted value, where an existing one comes from (the one the
  kernel honours, the last); other copies of it removed where they come from;
- when it is not set anywhere: in ``/etc/default/grub`` when no drop-in assigns the variable,
  else in ojai's own drop-in ordered last (``99-ojai.cfg``, appending to the variable), or, when
  another drop-in sorts after that name, in the drop-in that decides the variable;
- parameters to drop (the other TTM module's key, ``amdgpu.gttsize``) removed where they come
  from, each one named.

Pure: it takes the files' texts and returns the new texts. Real bash checks the result before
anything is written (``ojai_setup.apply.validate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import NamedTuple

from ojai_setup.formats.grub import (
    CMDLINE_VARS,
    DEFAULT_VAR,
    LINUX_VAR,
    GrubEditError,
    own_value,
    parse_grub_default,
    remove_kernel_param,
    set_kernel_param,
)
from ojai_setup.formats.kernel_params import has_key, param_key, same_key


class Token(NamedTuple):
    """One parameter of the effective command line and the assignment that wrote it."""

    text: str
    path: str
    var: str
    opaque: bool = False  # written as a $OTHER reference: its value is only known to bash


class FileEdit(NamedTuple):
    path: str
    before: str | None
    after: str


class CmdlineEdit(NamedTuple):
    """What to change so the effective command line holds exactly one ``key=value``."""

    param: str  # the wanted parameter, ``ttm.pages_limit=12582912``
    target: str  # the file that carries it afterwards
    target_var: str
    why: str  # why that file (it decides the variable ...)
    edits: list[FileEdit]
    #: (parameter, file) pairs the edit removes, and (old, new, file) it rewrites
    removed: list[tuple[str, str]]
    rewritten: list[tuple[str, str, str]]

    def said(self) -> list[str]:
        """Every parameter removed or rewritten, as phrases for the step's sentence."""
        out = [f"rewrites {old} to {new} in {path}" for old, new, path in self.rewritten]
        out += [f"removes {tok} from {path}" for tok, path in self.removed]
        return out


def simulate(files: Sequence[tuple[str, str]]) -> dict[str, list[Token]]:
    """The command line variables after sourcing ``files`` in order, each parameter with the
    file that wrote it. Raises :class:`GrubEditError` for assignments it cannot follow."""
    state: dict[str, list[Token]] = {LINUX_VAR: [], DEFAULT_VAR: []}
    for path, text in files:
        grub = parse_grub_default(text, path)
        order = sorted((a.value_start, a.name) for a in grub.assignments if a.name in CMDLINE_VARS)
        for _, var in order:
            cv = grub.cmdline(var)
            new: list[Token] = []
            for p in cv.params:
                if own_value(p.text, var):  # VAR="$VAR ..." appends to the value so far
                    new.extend(state[var])
                else:
                    new.append(Token(p.text, path, var, opaque=p.has_ref))
            state[var] = new
    return state


def effective(state: dict[str, list[Token]]) -> list[Token]:
    return [*state[LINUX_VAR], *state[DEFAULT_VAR]]



OWN_DROPIN_TEXT = """\
# Written by ojai: the GPU memory limit (TTM pages) on the kernel command line.
# grub-mkconfig sources this file after /etc/default/grub and the drop-ins before it;
# `ojai rollback` removes it.
{var}="${var} {param}"
"""


def plan_cmdline_edit(files: Sequence[tuple[str, str]], key: str, value: str,
                      drop_keys: Sequence[str], *, main: str, own_dropin: str) -> CmdlineEdit:
    """Plan the edits that make the effective command line hold exactly one ``key=value``
    and none of ``drop_keys``, every other parameter unchanged.

    ``files`` are ``(machine path, text)`` in the order grub-mkconfig sources them (``main``
    first when it exists). Raises :class:`GrubEditError` when a file that must change cannot
    be edited safely, or no file sets a command line variable.
    """
    param = f"{key}={value}"
    texts = dict(files)
    state = simulate(files)
    tokens = effective(state)
    hits = [t for t in tokens if same_key(param_key(t.text), key)]
    stale = [t for t in tokens if has_key(t.text, drop_keys) and not t.opaque]
    ops: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (path, var) -> [(op, key)]
    plan_removed: list[tuple[str, str]] = []
    plan_rewritten: list[tuple[str, str, str]] = []
    if hits:
        keep = hits[-1]
        if keep.opaque:
            raise GrubEditError(
                f"{keep.path}: {keep.var} gets {key} from a shell reference ({keep.text}); "
                f"ojai cannot edit that safely. Write {param} into {keep.path} yourself (or "
                f"remove the reference) and run ojai again.")
        target, target_var = keep.path, keep.var
        why = f"it sets the {key} the kernel gets now ({keep.text}, in {keep.var})"
        ops.setdefault((keep.path, keep.var), []).append(("set", key))
        if keep.text != param:
            plan_rewritten.append((keep.text, param, keep.path))
        for t in hits[:-1]:
            if (t.path, t.var) != (keep.path, keep.var):
                ops.setdefault((t.path, t.var), []).append(("remove", key))
            plan_removed.append((t.text, t.path))
    else:
        assigners = [(p, v) for p, _ in files for v in CMDLINE_VARS
                     if parse_grub_default(texts[p], p).assigned(v)]
        if any(v == DEFAULT_VAR for _, v in assigners):
            target_var = DEFAULT_VAR
        elif assigners:
            target_var = LINUX_VAR
        else:
            raise GrubEditError(
                f"{main}: sets neither {DEFAULT_VAR} nor {LINUX_VAR} (nor does a drop-in). Add "
                f"{DEFAULT_VAR}=\"\" to {main} and run ojai again.")
        winner = [p for p, v in assigners if v == target_var][-1]
        dropins = [p for p, _ in files if p != main]
        own_last = all(PurePosixPath(p).name.encode() <= PurePosixPath(own_dropin).name.encode()
                       for p in dropins)
        if winner == main:
            target = main
            why = f"no drop-in in {PurePosixPath(own_dropin).parent} sets {target_var}"
            ops.setdefault((main, target_var), []).append(("set", key))
        elif own_dropin in texts or own_last:
            target = own_dropin
            why = (f"{winner} decides {target_var} after {main}; ojai's own drop-in is sourced "
                   f"last and appends to it")
            if own_dropin in texts and parse_grub_default(texts[own_dropin], own_dropin).assigned(target_var):
                ops.setdefault((own_dropin, target_var), []).append(("set", key))
            else:
                ops.setdefault((own_dropin, target_var), []).append(("create", key))
        else:
            target = winner
            why = f"{winner} decides {target_var} (it is sourced after {main})"
            ops.setdefault((winner, target_var), []).append(("set", key))
    for t in stale:
        drop = next(k for k in drop_keys if same_key(param_key(t.text), k))
        ops.setdefault((t.path, t.var), []).append(("remove", drop))
        plan_removed.append((t.text, t.path))

    new_texts: dict[str, str] = {}
    for (path, var), changes in ops.items():
        text = new_texts.get(path, texts.get(path))
        for op, k in changes:
            if op == "create":
                line = OWN_DROPIN_TEXT.format(var=var, param=param)
                text = line if text is None else text + ("" if text.endswith("\n") or not text else "\n") + line.split("\n", 3)[3]
            elif op == "set":
                assert text is not None  # set and remove edit a file that is there
                text = set_kernel_param(text, k, value, var=var, source=path)
            else:
                assert text is not None
                text = remove_kernel_param(text, k, var=var, source=path)
        assert text is not None  # every file in ops is created, set or removed from
        new_texts[path] = text
    order = [p for p, _ in files] + [p for p in new_texts if p not in texts]
    edit = CmdlineEdit(param=param, target=target, target_var=target_var, why=why,
                       edits=[FileEdit(path=p, before=texts.get(p), after=new_texts[p])
                              for p in order if p in new_texts and new_texts[p] != texts.get(p)],
                       removed=plan_removed, rewritten=plan_rewritten)
    # the edited files, followed again, must give exactly what was asked
    after_files = [(p, new_texts.get(p, texts.get(p, ""))) for p in order]
    after = effective(simulate(after_files))
    got = [t.text for t in after if same_key(param_key(t.text), key)]
    if got != [param] or any(has_key(t.text, drop_keys) and not t.opaque for t in after):
        raise GrubEditError(f"ojai could not plan an edit that leaves exactly one {param} on the "
                            f"kernel command line (it would leave {got or 'none'}); edit "
                            f"{target} yourself and run ojai again.")
    return edit
