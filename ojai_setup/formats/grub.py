"""Read and edit kernel parameters in ``/etc/default/grub`` by key.

Everything here is a pure function on text: nothing reads or writes a file. The executor
writes the edited text to a temporary file, has real bash read it back
(:func:`ojai_setup.apply.validate.validate_grub`, built on ``bash_read_var``), and renames it
into place.

How the file is read
--------------------
``/etc/default/grub`` is a shell script that ``grub-mkconfig`` sources (with ``set -e``). The
parser finds every assignment ``NAME=word`` (also ``NAME+=word`` and ``export NAME=word``) at
a command position, skipping comments and quoted text, including quotes that span lines and
command substitutions. Only the two kernel command line variables are then read further: their
value is decoded the way the shell would (one ``"double"`` or ``'single'`` quoted string, or
one unquoted word) and split into kernel parameters the way the kernel splits
``/proc/cmdline`` (whitespace outside ``"`` quotes). Every parameter keeps its exact byte span
in the file, so an edit touches only the parameter it changes.

What is refused with :class:`GrubEditError` (no text is returned, so nothing gets written):

- CRLF line ends (``grub-mkconfig`` would pass a stray carriage return to the kernel);
- a quote, ``$(``, ``${`` or backquote that is never closed;
- the variable not assigned at all, or assigned more than once (``=`` or ``+=``), anywhere;
- a value that uses shell constructs whose result cannot be known without running them:
  command substitution, arithmetic, ``${VAR:-...}``-style operators, positional parameters,
  a line continuation or a line break inside the value, or a word mixing several quoting
  styles (``"quiet "'splash'``).

Plain references ``$VAR`` and ``${VAR}`` are kept as they are: each is an opaque parameter
that is never edited, removed or reordered. That includes a self-reference such as
``GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT quiet"``: since the file may assign
the variable only once, the reference can only see the environment ``update-grub`` runs in
(empty under ``sudo``, and empty in :func:`bash_read_var`'s clean environment), so the edit
is made to the literal part and the reference stays in place. The one ``${...}`` operator form
kept the same way is the one drop-ins use to append, ``${VAR:+$VAR }`` (``VAR``'s value and a
blank when it has one, else nothing): the blank inside it ends the parameter, as it ends the
word the shell hands on.

Keys are compared the way the kernel compares parameter names
(:mod:`ojai_setup.formats.kernel_params`): ``ttm.pages-limit=`` and ``ttm.pages_limit=`` are one
key."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

from ojai_setup.core.errors import InputError
from ojai_setup.core.paths import GRUB_DEFAULT
from ojai_setup.formats.kernel_params import (
    check_writable,
    cmdline_param,
    param_key,
    same_key,
)

DEFAULT_VAR = "GRUB_CMDLINE_LINUX_DEFAULT"


LINUX_VAR = "GRUB_CMDLINE_LINUX"


CMDLINE_VARS = (DEFAULT_VAR, LINUX_VAR)


GRUB_DEFAULT_PATH = GRUB_DEFAULT


_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")


_REF = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})")


#: ``${VAR:+$VAR }`` (or ``${VAR+${VAR} }``): the variable's own value and a blank when it has
#: one, else nothing. Drop-ins use it to append to a value without a leading blank when it is
#: empty; group 1 is the name, group 2 the blanks after the inner reference
_COND_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?\+\$(?:\1|\{\1\})([ \t]*)\}")


_UNQUOTED_VALUE = (
    r"(?:[A-Za-z0-9_.,:/=+@%-]|\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\})*"
)


#: words after which the next word is again a command (so ``NAME=`` there is an assignment)
_LEADING_WORDS = frozenset(
    {"then", "else", "elif", "if", "do", "while", "until", "!", "{", "export", "readonly", "time"}
)


_BLANK = " \t"


class GrubEditError(InputError):
    """The file cannot be read or edited safely; the message says why and what to do."""


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _unclosed(text: str, start: int, what: str, source: str) -> GrubEditError:
    return GrubEditError(
        f"{source}: unbalanced quotes: the {what} opened on line {_line_of(text, start)} is "
        f"never closed. Close it (check with `bash -n {source}`) and run ojai again."
    )


def _skip_single(text: str, i: int, source: str) -> int:
    """``i`` is just after an opening ``'``; return the index after the closing one."""
    end = text.find("'", i)
    if end < 0:
        raise _unclosed(text, i - 1, "single quote (')", source)
    return end + 1


def _skip_ansi_c(text: str, i: int, source: str) -> int:
    """``i`` is just after ``$'``; backslash escapes apply."""
    start = i - 2
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "'":
            return i + 1
        else:
            i += 1
    raise _unclosed(text, start, "quote ($')", source)


def _skip_backtick(text: str, i: int, source: str) -> int:
    """``i`` is just after an opening backquote."""
    start = i - 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "`":
            return i + 1
        else:
            i += 1
    raise _unclosed(text, start, "backquote (`)", source)


def _skip_double(text: str, i: int, source: str) -> int:
    """``i`` is just after an opening ``"``; return the index after the closing one."""
    start = i - 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "`":
            i = _skip_backtick(text, i + 1, source)
        elif text.startswith("$(", i):
            i = _skip_paren(text, i + 2, source)
        elif text.startswith("${", i):
            i = _skip_brace(text, i + 2, source)
        else:
            i += 1
    raise _unclosed(text, start, 'double quote (")', source)


def _skip_brace(text: str, i: int, source: str) -> int:
    """``i`` is just after ``${``; return the index after the matching ``}``."""
    start = i - 2
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "}":
            return i + 1
        elif c == '"':
            i = _skip_double(text, i + 1, source)
        elif c == "'":
            i = _skip_single(text, i + 1, source)
        elif c == "`":
            i = _skip_backtick(text, i + 1, source)
        elif text.startswith("$(", i):
            i = _skip_paren(text, i + 2, source)
        elif text.startswith("${", i):
            i = _skip_brace(text, i + 2, source)
        else:
            i += 1
    raise _unclosed(text, start, "${", source)


def _skip_paren(text: str, i: int, source: str) -> int:
    """``i`` is just after ``$(`` (or ``$((``); return the index after the matching ``)``."""
    start = i - 2
    depth = 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "'":
            i = _skip_single(text, i + 1, source)
        elif c == '"':
            i = _skip_double(text, i + 1, source)
        elif c == "`":
            i = _skip_backtick(text, i + 1, source)
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;(|&"):
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl
        elif c == "(":
            depth += 1
            i += 1
        elif c == ")":
            depth -= 1
            i += 1
            if depth == 0:
                return i
        else:
            i += 1
    raise _unclosed(text, start, "$(", source)


def _skip_word(text: str, i: int, source: str) -> int:
    """Return the index just after the shell word starting at ``i``."""
    n = len(text)
    while i < n:
        c = text[i]
        if c in " \t\n;&|()<>":
            return i
        if c == "\\":
            i += 2
        elif c == "'":
            i = _skip_single(text, i + 1, source)
        elif c == '"':
            i = _skip_double(text, i + 1, source)
        elif c == "`":
            i = _skip_backtick(text, i + 1, source)
        elif text.startswith("$'", i):
            i = _skip_ansi_c(text, i + 2, source)
        elif text.startswith("$(", i):
            i = _skip_paren(text, i + 2, source)
        elif text.startswith("${", i):
            i = _skip_brace(text, i + 2, source)
        else:
            i += 1
    return min(i, n)


class Assignment(NamedTuple):
    """One ``NAME=word`` (or ``NAME+=word``) in the file; offsets index the file's text."""

    name: str
    line: int
    append: bool
    value_start: int
    value_end: int
    raw_value: str


class Param(NamedTuple):
    """One kernel parameter inside a command line variable.

    ``text`` is the parameter as the shell hands it to grub, with ``$VAR`` references left as
    written; ``start``/``end`` are its byte span in the file.
    """

    text: str
    start: int
    end: int
    has_ref: bool

    @property
    def key(self) -> str:
        return param_key(self.text)


class CmdlineValue(NamedTuple):
    """The value of ``GRUB_CMDLINE_LINUX_DEFAULT`` or ``GRUB_CMDLINE_LINUX``."""

    var: str
    line: int
    quoting: Literal["double", "single", "none"]
    #: span of the whole word (quotes included) and of the text between the quotes
    value_start: int
    value_end: int
    inner_start: int
    inner_end: int
    params: tuple[Param, ...]

    @property
    def tokens(self) -> list[str]:
        return [p.text for p in self.params]

    @property
    def self_reference(self) -> bool:
        """Whether the value refers to its own variable (see the module docstring)."""
        return any(
            m.group(0) in (f"${self.var}", f"${{{self.var}}}")
            for p in self.params
            for m in _REF.finditer(p.text)
        ) or any(own_value(p.text, self.var) for p in self.params)


class GrubDefault(NamedTuple):
    """A parsed ``/etc/default/grub``: every assignment, and the command lines on demand."""

    text: str
    source: str
    assignments: tuple[Assignment, ...]

    def assigned(self, name: str) -> list[Assignment]:
        return [a for a in self.assignments if a.name == name]

    def literal(self, name: str) -> str | None:
        """The value of ``name`` when it is assigned once to a plain literal, else None."""
        found = self.assigned(name)
        if len(found) != 1 or found[0].append:
            return None
        raw = found[0].raw_value
        if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
            inner = raw[1:-1]
            if raw[0] == "'" or not re.search(r'[\\$`"]', inner):
                return inner
            return None
        return raw if re.fullmatch(r"[A-Za-z0-9_.,:/=+@%-]*", raw) else None

    def cmdline(self, var: str = DEFAULT_VAR) -> CmdlineValue:
        """The kernel parameters of ``var``; raises :class:`GrubEditError` when unsafe to edit."""
        found = self.assigned(var)
        if not found:
            hint = ""
            if var == DEFAULT_VAR and self.assigned(LINUX_VAR):
                hint = (f" The file sets {LINUX_VAR} (the Fedora layout); edit that variable "
                        f"instead.")
            raise GrubEditError(
                f"{self.source}: no {var}= line.{hint} Add a line {var}=\"\" to "
                f"{self.source} (or choose the variable the file does set) and run ojai again."
            )
        if len(found) > 1:
            lines = ", ".join(str(a.line) for a in found)
            raise GrubEditError(
                f"{self.source}: {var} is assigned {len(found)} times (lines {lines}); which "
                f"value wins depends on the order. Merge them into one {var}=\"...\" line and "
                f"run ojai again."
            )
        a = found[0]
        if a.append:
            raise GrubEditError(
                f"{self.source}: line {a.line} extends {var} with += but never sets it. "
                f"Write it as one {var}=\"...\" line and run ojai again."
            )
        return _decode_cmdline(self.text, a, self.source)


def parse_grub_default(text: str, source: str = GRUB_DEFAULT_PATH) -> GrubDefault:
    """Find every variable assignment in the text of a grub default file.

    ``source`` only names the file in error messages. Raises :class:`GrubEditError` for CRLF
    line ends and unbalanced quotes.
    """
    if "\r" in text:
        line = _line_of(text, text.index("\r"))
        raise GrubEditError(
            f"{source}: line {line} ends in CRLF (a carriage return); grub-mkconfig would pass "
            f"it on to the kernel. Convert the file to LF line ends (`sed -i 's/\\r$//' "
            f"{source}`) and run ojai again."
        )
    found: list[Assignment] = []
    i, n = 0, len(text)
    command_position = True
    while i < n:
        c = text[i]
        if c in _BLANK:
            i += 1
        elif c == "\n":
            command_position = True
            i += 1
        elif c == "\\" and text.startswith("\\\n", i):
            i += 2
        elif c == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
        elif c in ";&|(){}":
            command_position = True
            i += 1
        elif c in "<>":
            i += 1
        else:
            m = _ASSIGN.match(text, i) if command_position else None
            if m:
                end = _skip_word(text, m.end(), source)
                found.append(Assignment(
                    name=m.group(1), line=_line_of(text, i), append=bool(m.group(2)),
                    value_start=m.end(), value_end=end, raw_value=text[m.end():end],
                ))
                i = end
            else:
                end = _skip_word(text, i, source)
                command_position = text[i:end] in _LEADING_WORDS
                i = end
    return GrubDefault(text=text, source=source, assignments=tuple(found))


class _Unit(NamedTuple):
    """One decoded character (or one whole ``$VAR`` reference) and its span in the file."""

    text: str
    start: int
    end: int
    is_ref: bool = False
    #: a ``${VAR:+$VAR }`` reference: the blank inside it separates it from what follows
    sep_after: bool = False


def _unsafe(source: str, a: Assignment, what: str) -> GrubEditError:
    return GrubEditError(
        f"{source}: line {a.line}: the value of {a.name} {what}, which ojai cannot edit "
        f"safely. Rewrite it as one plain double-quoted string, e.g. "
        f"{a.name}=\"quiet splash\", and run ojai again."
    )


def _decode_double(text: str, start: int, end: int, a: Assignment, source: str) -> list[_Unit]:
    units: list[_Unit] = []
    i = start
    while i < end:
        c = text[i]
        if c == "\\":
            nxt = text[i + 1] if i + 1 < end else ""
            if nxt == "\n":
                raise _unsafe(source, a, "continues over a backslash line break")
            if nxt and nxt in '$`"\\':
                units.append(_Unit(nxt, i, i + 2))
                i += 2
            else:
                units.append(_Unit("\\", i, i + 1))
                i += 1
        elif c == "`":
            raise _unsafe(source, a, "uses command substitution (`...`)")
        elif c == "$":
            m = _REF.match(text, i, end)
            cond = None if m else _COND_REF.match(text, i, end)
            if m:
                units.append(_Unit(m.group(0), i, m.end(), is_ref=True))
                i = m.end()
            elif cond:
                units.append(_Unit(cond.group(0), i, cond.end(), is_ref=True,
                                   sep_after=bool(cond.group(2))))
                i = cond.end()
            elif i + 1 >= end or text[i + 1] in _BLANK:
                units.append(_Unit("$", i, i + 1))
                i += 1
            else:
                what = {
                    "(": "uses command substitution or arithmetic ($(...))",
                    "{": "uses a ${...} expansion with an operator",
                }.get(text[i + 1], f"uses the special parameter ${text[i + 1]}")
                raise _unsafe(source, a, what)
        elif c == "\n":
            raise _unsafe(source, a, "spans several lines")
        else:
            units.append(_Unit(c, i, i + 1))
            i += 1
    return units


def _decode_cmdline(text: str, a: Assignment, source: str) -> CmdlineValue:
    raw, vs, ve = a.raw_value, a.value_start, a.value_end
    quoting: Literal["double", "single", "none"]
    if raw.startswith('"') and _skip_double(text, vs + 1, source) == ve:
        quoting, inner_start, inner_end = "double", vs + 1, ve - 1
        units = _decode_double(text, inner_start, inner_end, a, source)
    elif raw.startswith("'") and _skip_single(text, vs + 1, source) == ve:
        quoting, inner_start, inner_end = "single", vs + 1, ve - 1
        if "\n" in raw:
            raise _unsafe(source, a, "spans several lines")
        units = [_Unit(text[k], k, k + 1) for k in range(inner_start, inner_end)]
    elif re.fullmatch(_UNQUOTED_VALUE, raw):
        quoting, inner_start, inner_end = "none", vs, ve
        units = []
        k = vs
        while k < ve:
            m = _REF.match(text, k, ve)
            if m:
                units.append(_Unit(m.group(0), k, m.end(), is_ref=True))
                k = m.end()
            else:
                units.append(_Unit(text[k], k, k + 1))
                k += 1
    else:
        if re.search(r"\$\(|`", raw):
            what = "uses command substitution"
        elif "${" in raw:
            what = "uses a ${...} expansion with an operator"
        else:
            what = f"is not one quoted string ({raw!r})"
        raise _unsafe(source, a, what)
    params = _split_params(units, a, source)
    return CmdlineValue(
        var=a.name, line=a.line, quoting=quoting, value_start=vs, value_end=ve,
        inner_start=inner_start, inner_end=inner_end, params=tuple(params),
    )


def _split_params(units: list[_Unit], a: Assignment, source: str) -> list[Param]:
    """Split decoded units into kernel parameters: whitespace outside ``"`` separates."""
    params: list[Param] = []
    current: list[_Unit] = []
    in_quote = False

    def flush() -> None:
        if current:
            params.append(Param(
                text="".join(u.text for u in current), start=current[0].start,
                end=current[-1].end, has_ref=any(u.is_ref for u in current),
            ))
            current.clear()

    for u in units:
        if not u.is_ref and u.text in _BLANK and not in_quote:
            flush()
            continue
        if not u.is_ref and u.text == '"':
            in_quote = not in_quote
        current.append(u)
        if u.sep_after and not in_quote:
            flush()
    if in_quote:
        raise GrubEditError(
            f"{source}: line {a.line}: a kernel parameter in {a.name} opens a \" quote it "
            f"never closes (written \\\" inside the double-quoted value). Close it and run "
            f"ojai again."
        )
    flush()
    return params


def own_value(param: str, var: str) -> bool:
    """Whether one parameter of ``var``'s value is ``var``'s previous value, whole: ``$VAR``,
    ``${VAR}`` or ``${VAR:+$VAR }`` (which adds a blank only when that value is not empty)."""
    if param in (f"${var}", f"${{{var}}}"):
        return True
    m = _COND_REF.fullmatch(param)
    return m is not None and m.group(1) == var


def _ends_in_blank(p: Param) -> bool:
    """A ``${VAR:+$VAR }`` parameter: it brings its own blank before the next parameter."""
    m = _COND_REF.fullmatch(p.text)
    return bool(m and m.group(2))


def _rebuild(text: str, cv: CmdlineValue, replace: dict[int, str], drop: set[int],
             append: str | None) -> str:
    """The file text with params replaced/dropped/appended; all other bytes kept."""
    params = cv.params
    out: list[str] = []
    lead_end = params[0].start if params else cv.inner_end
    out.append(text[cv.inner_start:lead_end])
    last = -1  # the index of the last parameter kept
    for idx, p in enumerate(params):
        if idx in drop:
            continue
        if last >= 0:
            # the blanks before this parameter; after a dropped one, a ``${VAR:+$VAR }`` keeps
            # what followed it (it brings its own blank)
            gap_from = params[last] if last < idx - 1 and _ends_in_blank(params[last]) else params[idx - 1]
            gap_to = params[last + 1] if gap_from is params[last] else p
            out.append(text[gap_from.end:gap_to.start])
        out.append(replace.get(idx, text[p.start:p.end]))
        last = idx
    if append is not None:
        if last >= 0 and not _ends_in_blank(params[last]):
            out.append(" ")
        out.append(append)
    tail_start = params[-1].end if params else cv.inner_end
    out.append(text[tail_start:cv.inner_end])
    inner = "".join(out)
    if cv.quoting == "none" and any(ch in _BLANK for ch in inner):
        return text[:cv.value_start] + '"' + inner + '"' + text[cv.value_end:]
    return text[:cv.inner_start] + inner + text[cv.inner_end:]


def set_kernel_param(text: str, key: str, value: str, var: str = DEFAULT_VAR, *,
                     source: str = GRUB_DEFAULT_PATH) -> str:
    """Set ``key=value`` in ``var``: replace the first ``key=`` parameter, drop any others,
    or append one when absent. Every other byte of the file is kept; an unquoted value gains
    double quotes only when a second parameter is added to it. Idempotent.
    """
    check_writable(key, value)
    cv = parse_grub_default(text, source).cmdline(var)
    wanted = f"{key}={value}"
    hits = [idx for idx, p in enumerate(cv.params) if same_key(p.key, key)]
    if not hits:
        return _rebuild(text, cv, {}, set(), wanted)
    first, *rest = hits
    if not rest and cv.params[first].text == wanted:
        return text
    return _rebuild(text, cv, {first: wanted}, set(rest), None)


def remove_kernel_param(text: str, key: str, var: str = DEFAULT_VAR, *,
                        source: str = GRUB_DEFAULT_PATH) -> str:
    """Remove every ``key`` / ``key=...`` parameter from ``var``; unchanged when absent."""
    check_writable(key, None)
    cv = parse_grub_default(text, source).cmdline(var)
    hits = {idx for idx, p in enumerate(cv.params) if same_key(p.key, key)}
    if not hits:
        return text
    return _rebuild(text, cv, {}, hits, None)


def get_kernel_param(text: str, key: str, var: str = DEFAULT_VAR, *,
                     source: str = GRUB_DEFAULT_PATH) -> str | None:
    """The configured value of ``key`` in ``var`` (last one wins; ``""`` for a bare flag)."""
    cv = parse_grub_default(text, source).cmdline(var)
    return cmdline_param(cv.tokens, key)


def choose_cmdline_var(text: str, source: str = GRUB_DEFAULT_PATH) -> str:
    """The variable to put a parameter in: ``GRUB_CMDLINE_LINUX_DEFAULT`` when the file sets
    it (Debian, Ubuntu, Arch), else ``GRUB_CMDLINE_LINUX`` (Fedora's installer writes only
    that one). Raises :class:`GrubEditError` when neither is set.
    """
    grub = parse_grub_default(text, source)
    for var in CMDLINE_VARS:
        if grub.assigned(var):
            return var
    raise GrubEditError(
        f"{source}: sets neither {DEFAULT_VAR} nor {LINUX_VAR}. Add {DEFAULT_VAR}=\"\" to it "
        f"and run ojai again."
    )


def bls_enabled(text: str, source: str = GRUB_DEFAULT_PATH) -> bool:
    """Whether the file sets ``GRUB_ENABLE_BLSCFG=true`` (Fedora/RHEL boot entries)."""
    return parse_grub_default(text, source).literal("GRUB_ENABLE_BLSCFG") == "true"


_TOOLS = {"debian": "update-grub, grub-mkconfig", "arch": "grub-mkconfig",
          "suse": "grub2-mkconfig",
          "fedora": "grub2-mkconfig, grubby (with the parameters to set)"}


def _family(distro_id: str, like: Sequence[str]) -> str | None:
    ids = [distro_id.lower(), *(x.lower() for x in like)]
    for family, members in (
        ("debian", {"debian", "ubuntu"}),
        ("fedora", {"fedora", "rhel", "centos"}),
        ("arch", {"arch"}),
        ("suse", {"opensuse", "suse", "sles", "opensuse-tumbleweed", "opensuse-leap"}),
    ):
        if any(i in members for i in ids):
            return family
    return None


def regenerate_commands(distro_id: str, like: list[str], available: Callable[[str], bool], *,
                        bls: bool = False, args: Sequence[str] = (),
                        remove_args: Sequence[str] = ()) -> list[list[str]]:
    """The commands that make an edit of ``/etc/default/grub`` reach the next boot.

    ``distro_id``/``like`` are os-release's ``ID`` and ``ID_LIKE``; ``available(program)``
    says whether a program is installed. Debian/Ubuntu: ``update-grub``. Arch:
    ``grub-mkconfig -o /boot/grub/grub.cfg``. openSUSE: ``grub2-mkconfig -o /boot/grub2/grub.cfg``. Fedora/RHEL: ``grub2-mkconfig -o
    /boot/grub2/grub.cfg``; with BLS boot entries (``bls``, see :func:`bls_enabled`)
    grub2-mkconfig leaves the entries' command lines alone, so ``grubby
    --update-kernel=ALL`` with ``args``/``remove_args`` is used when installed, else
    grub2-mkconfig is asked for ``--update-bls-cmdline``. grubby alone is used when it is the
    only tool. Raises :class:`GrubEditError` when no known tool applies.
    """
    family = _family(distro_id, like)
    grubby = ["grubby", "--update-kernel=ALL"]
    if args:
        grubby.append("--args=" + " ".join(args))
    if remove_args:
        grubby.append("--remove-args=" + " ".join(remove_args))
    can_grubby = available("grubby") and len(grubby) > 2
    if family == "debian":
        if available("update-grub"):
            return [["update-grub"]]
        if available("grub-mkconfig"):
            return [["grub-mkconfig", "-o", "/boot/grub/grub.cfg"]]
    elif family == "arch":
        if available("grub-mkconfig"):
            return [["grub-mkconfig", "-o", "/boot/grub/grub.cfg"]]
    elif family == "fedora":
        if bls and can_grubby:
            return [grubby]
        if available("grub2-mkconfig"):
            mkconfig = ["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"]
            return [mkconfig + (["--update-bls-cmdline"] if bls else [])]
        if can_grubby:
            return [grubby]
    elif family == "suse":  # openSUSE: grub2-mkconfig, and grub2's own folder
        if available("grub2-mkconfig"):
            return [["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"]]
    else:
        raise GrubEditError(
            f"ojai does not know how {distro_id!r} (like {', '.join(like) or 'nothing'}) "
            f"regenerates grub.cfg. Run your distribution's tool (usually `grub-mkconfig -o "
            f"/boot/grub/grub.cfg`) yourself after the edit, then reboot."
        )
    raise GrubEditError(
        f"none of the tools that regenerate grub.cfg on {distro_id} is installed (looked for "
        f"{_TOOLS[family]}). Install grub (or run the tool your system uses) and run ojai "
        f"again."
    )
