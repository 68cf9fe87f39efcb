"""What one SGLang release understands on ``python -m sglang.launch_server``: its argument table.

SGLang declares its server arguments as annotated fields of the namespace classes in
``sglang/srt/arg_groups/fields/*.py`` (``spec.py`` for speculative decoding), and
``arg_utils.add_cli_args_from_dataclass`` turns each ``A[T, "help"]`` / ``A[T, Arg(...)]`` field
into one argparse option; ``ServerArgs.add_cli_args`` (``sglang/srt/server_args.py``) then adds
the few options with dynamic choices and the deprecated spellings by hand. Importing that code
means importing torch (``sglang.srt.utils.common`` does at its top), so ojai reads the same
declarations from the package's source text instead, with the rules of
``add_cli_args_from_dataclass``:

- the option is ``Arg.cli_name`` or ``--`` + the field name with ``_`` turned into ``-``, plus
  ``Arg.aliases``; a field with ``Arg(no_cli=True)`` or without ``A[...]`` has no option;
- ``bool`` is a bare flag (``store_true``), ``argparse.BooleanOptionalAction`` adds ``--no-``
  to it; another ``Arg.action`` is an action of SGLang's own; ``Literal[...]`` gives the choices (unless
  ``Arg.choices`` does); ``list[...]`` takes one or more values; anything else one value;
  ``Arg.choices`` naming a list of ``arg_groups/choices.py`` gives those choices;
- a scalar field without a default and not ``required=False`` is required (``--model-path``).

The speculative algorithms come from ``sglang/srt/speculative/spec_info.py`` (the
``SpeculativeAlgorithm`` members) and ``spec_registry.py`` (``_RESERVED_ALIASES``: ``NEXTN``,
which SGLang resolves to ``EAGLE``).

Reading (the files of an installed package or a wheel) happens elsewhere; :func:`read_table`
takes their text and returns a :class:`SglangDialect`. :func:`check_args` refuses an argument
list the table does not accept, in ojai's words.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ojai_setup.core.errors import InputError

#: the files of the package the table is read from (paths inside the ``sglang`` package)
FIELDS_DIR = "srt/arg_groups/fields/"
CHOICES_FILE = "srt/arg_groups/choices.py"
SERVER_ARGS_FILE = "srt/server_args.py"
SPEC_INFO_FILE = "srt/speculative/spec_info.py"
SPEC_REGISTRY_FILE = "srt/speculative/spec_registry.py"


class SglangArgsError(InputError):
    """The package text cannot be read as SGLang's argument declarations."""


class UnsupportedSglangArgs(InputError):
    """An argument list SGLang's table does not accept; the message names the flag."""

    def __init__(self, route: str, flag: str, version: str, reason: str) -> None:
        self.route, self.flag, self.version, self.reason = route, flag, version, reason
        super().__init__(f"route {route!r}: {flag}: SGLang {version} {reason}")


class SglangOption(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    names: tuple[str, ...]
    dest: str
    #: ``flag`` takes no value; ``one`` one value; ``many`` one or more; ``custom``: its own
    #: argparse action decides (ojai renders none of those)
    takes: Literal["flag", "one", "many", "custom"]
    #: the built-in choices (plugins may add more at run time); None: any value
    choices: tuple[str, ...] | None = None
    required: bool = False
    #: deprecated: the flag to use instead (SGLang's ``Deprecated*Action``)
    deprecated_for: str | None = None
    #: the namespace class it is declared in (``spec``), or ``server_args`` for the hand-made ones
    namespace: str = ""


class SglangDialect(BaseModel):
    """SGLang's server options: flag -> option (every name of an option is a key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    options: dict[str, SglangOption]
    #: ``--speculative-algorithm`` values: the built-in algorithms and the reserved aliases
    speculative_algorithms: tuple[str, ...]

    def option(self, flag: str) -> SglangOption | None:
        return self.options.get(flag)

    def summary(self) -> str:
        dests = {o.dest for o in self.options.values()}
        return (f"SGLang {self.version}: {len(dests)} server options read from its argument "
                f"declarations; --speculative-algorithm {'|'.join(self.speculative_algorithms)}")


# -- reading the declarations ----------------------------------------------------------------

def _parse(path: str, text: str) -> ast.Module:
    try:
        return ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise SglangArgsError(f"{path}: not Python source SGLang ships ({exc.msg}, line "
                              f"{exc.lineno})") from None


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _choices_table(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    """``NAME = [literal, ...]`` (or a tuple, set, frozenset of literals) in choices.py."""
    out: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
                    value.func.id in ("set", "frozenset") and len(value.args) == 1:
                value = value.args[0]
                if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
                        value.func.id in ("set", "frozenset") and value.args:
                    value = value.args[0]
                if isinstance(value, ast.Name) and value.id in out:
                    out[node.targets[0].id] = out[value.id]
                    continue
            lit = _literal(value)
            if isinstance(lit, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in lit):
                out[node.targets[0].id] = tuple(sorted(lit) if isinstance(lit, (set, frozenset)) else lit)
    return out


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _unwrap_optional(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Subscript) and _name(node.value) == "Optional":
        return node.slice
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = [s for s in (node.left, node.right)
                 if not (isinstance(s, ast.Constant) and s.value is None)]
        if len(sides) == 1:
            return sides[0]
    if isinstance(node, ast.Subscript) and _name(node.value) == "Union" and \
            isinstance(node.slice, ast.Tuple):
        rest = [e for e in node.slice.elts if not (isinstance(e, ast.Constant) and e.value is None)]
        if len(rest) == 1:
            return rest[0]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            return _unwrap_optional(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return node
    return node


def _field_option(field: str, annotation: ast.AST, has_default: bool, namespace: str,
                  choices: Mapping[str, tuple[str, ...]]) -> SglangOption | None:
    """The option ``add_cli_args_from_dataclass`` makes of one ``A[T, meta]`` field, or None."""
    if not (isinstance(annotation, ast.Subscript) and _name(annotation.value) in ("A", "Annotated")
            and isinstance(annotation.slice, ast.Tuple) and len(annotation.slice.elts) >= 2):
        return None
    raw, *metas = annotation.slice.elts
    meta: dict[str, ast.AST] = {}
    found = False
    for m in metas:
        if isinstance(m, (ast.Constant, ast.JoinedStr)) and (
                isinstance(m, ast.JoinedStr) or isinstance(m.value, str)):
            found = True
            break
        if isinstance(m, ast.Call) and _name(m.func) == "Arg":
            meta = {k.arg: k.value for k in m.keywords if k.arg}
            found = True
            break
    if not found:
        return None
    if "no_cli" in meta and _literal(meta["no_cli"]) is True:
        return None
    cli = _literal(meta["cli_name"]) if "cli_name" in meta else None
    names = [cli or "--" + field.replace("_", "-")]
    aliases = _literal(meta["aliases"]) if "aliases" in meta else None
    names += [a for a in (aliases or []) if isinstance(a, str)]
    given_choices: tuple[str, ...] | None = None
    if "choices" in meta:
        c = meta["choices"]
        lit = _literal(c)
        if isinstance(lit, (list, tuple)):
            given_choices = tuple(str(v) for v in lit)
        elif (name := _name(c)) is not None and name in choices:
            given_choices = choices[name]
    if "action" in meta:
        if _name(meta["action"]) == "BooleanOptionalAction":  # --x and --no-x, no value
            names += ["--no-" + n[2:] for n in names if n.startswith("--")]
            return SglangOption(names=tuple(names), dest=field, takes="flag", namespace=namespace)
        return SglangOption(names=tuple(names), dest=field, takes="custom", namespace=namespace)
    inner = _unwrap_optional(raw)
    if isinstance(inner, ast.Subscript) and _name(inner.value) == "Literal":
        elts = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
        values = tuple(str(_literal(e)) for e in elts)
        return SglangOption(names=tuple(names), dest=field, takes="one",
                            choices=given_choices or values, namespace=namespace)
    if isinstance(inner, ast.Subscript) and _name(inner.value) in ("List", "list") and \
            "type_parser" not in meta:
        nargs = _literal(meta["nargs"]) if "nargs" in meta else "+"
        return SglangOption(names=tuple(names), dest=field, takes="many" if nargs in ("+", "*") else "one",
                            choices=given_choices, namespace=namespace)
    if _name(inner) == "bool":
        return SglangOption(names=tuple(names), dest=field, takes="flag", namespace=namespace)
    required = _literal(meta["required"]) if "required" in meta else None
    nargs = _literal(meta["nargs"]) if "nargs" in meta else None
    return SglangOption(names=tuple(names), dest=field,
                        takes="many" if nargs in ("+", "*") else "one",
                        choices=given_choices, namespace=namespace,
                        required=required is True or (required is None and not has_default))


def _namespace_classes(tree: ast.Module) -> Iterator[tuple[ast.ClassDef, str]]:
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        ns = None
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and any(_name(t) == "_NS_PATH" for t in stmt.targets):
                ns = _literal(stmt.value)
        if isinstance(ns, str):
            yield node, ns


def _fields_options(tree: ast.Module, choices: dict[str, tuple[str, ...]]) -> list[SglangOption]:
    out = []
    for cls, ns in _namespace_classes(tree):
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                opt = _field_option(stmt.target.id, stmt.annotation, stmt.value is not None, ns, choices)
                if opt is not None:
                    out.append(opt)
    return out


def _hand_made(tree: ast.Module, choices: dict[str, tuple[str, ...]]) -> list[SglangOption]:
    """The ``parser.add_argument(...)`` calls of ``ServerArgs.add_cli_args``."""
    fn = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            fn = next((f for f in node.body if isinstance(f, ast.FunctionDef)
                       and f.name == "add_cli_args"), None)
    if fn is None:
        raise SglangArgsError(f"{SERVER_ARGS_FILE}: no ServerArgs.add_cli_args")
    out = []
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = tuple(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
        if not names or not names[0].startswith("--"):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = kw.get("action")
        dest = _literal(kw["dest"]) if "dest" in kw else names[0].lstrip("-").replace("-", "_")
        deprecated = None
        takes: str = "one"
        if action is not None:
            a = _literal(action)
            if a in ("store_true", "store_false"):
                takes = "flag"
            elif "Deprecated" in (_name(action) or ""):
                deprecated = _literal(kw["new_flag"]) if "new_flag" in kw else "(see SGLang's help)"
                nargs = kw.get("nargs")
                takes = "flag" if "StoreTrue" in (_name(action) or "") or (
                    nargs is not None and _literal(nargs) == 0) else "one"
            else:
                takes = "custom"
        c = kw.get("choices")
        opt_choices = None
        if c is not None:
            lit = _literal(c)
            if isinstance(lit, (list, tuple)):
                opt_choices = tuple(str(v) for v in lit)
            elif (name := _name(c)) is not None and name in choices:
                opt_choices = choices[name]
        out.append(SglangOption(names=names, dest=str(dest), takes=takes, choices=opt_choices,
                                deprecated_for=deprecated, namespace="server_args"))
    return out


def _algorithms(spec_info: ast.Module, registry: ast.Module | None) -> tuple[str, ...]:
    members: list[str] = []
    for node in ast.walk(spec_info):
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeAlgorithm":
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and \
                        _name(stmt.value.func) == "auto":
                    members += [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if not members:
        raise SglangArgsError(f"{SPEC_INFO_FILE}: no SpeculativeAlgorithm members")
    aliases: list[str] = []
    for node in (registry.body if registry else []):
        if isinstance(node, ast.Assign) and any(_name(t) == "_RESERVED_ALIASES" for t in node.targets):
            v = node.value
            if isinstance(v, ast.Call) and v.args:
                v = v.args[0]
            lit = _literal(v)
            if lit:
                aliases = sorted(str(x) for x in lit)
    return tuple(m for m in members if m != "NONE") + tuple(aliases)


def read_table(version: str, files: Mapping[str, str]) -> SglangDialect:
    """The argument table of SGLang ``version`` from the text of its package files (paths
    inside the ``sglang`` package, as the ``*_FILE`` constants name them)."""
    missing = [f for f in (CHOICES_FILE, SERVER_ARGS_FILE, SPEC_INFO_FILE) if f not in files]
    field_files = sorted(p for p in files if p.startswith(FIELDS_DIR) and p.endswith(".py"))
    if missing or not field_files:
        raise SglangArgsError("not SGLang's package: missing "
                              + ", ".join(missing or [FIELDS_DIR + "*.py"]))
    choices = _choices_table(_parse(CHOICES_FILE, files[CHOICES_FILE]))
    options: list[SglangOption] = []
    for path in field_files:
        options += _fields_options(_parse(path, files[path]), choices)
    options += _hand_made(_parse(SERVER_ARGS_FILE, files[SERVER_ARGS_FILE]), choices)
    table: dict[str, SglangOption] = {}
    for opt in options:
        for name in opt.names:
            table.setdefault(name, opt)
    if "--model-path" not in table or "--speculative-algorithm" not in table:
        raise SglangArgsError("SGLang's declarations read, but without --model-path or "
                              "--speculative-algorithm: not a server argument table")
    registry = files.get(SPEC_REGISTRY_FILE)
    algos = _algorithms(_parse(SPEC_INFO_FILE, files[SPEC_INFO_FILE]),
                        _parse(SPEC_REGISTRY_FILE, registry) if registry else None)
    return SglangDialect(version=version, options=dict(sorted(table.items())),
                         speculative_algorithms=algos)


# -- checking an argument list ------------------------------------------------------------------

def check_args(route: str, args: list[str], dialect: SglangDialect) -> None:
    """Raise :class:`UnsupportedSglangArgs` unless SGLang ``dialect.version`` takes ``args``
    (what follows ``python -m sglang.launch_server``) as written: every flag whole (argparse
    would also take an unambiguous abbreviation, which the next release can break), not
    deprecated, given the values it takes and within its choices; the required ones given."""
    v = dialect.version
    seen: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise UnsupportedSglangArgs(route, arg, v, "takes no positional argument here "
                                        "(a value without its flag?)")
        flag, eq, inline = arg.partition("=")
        opt = dialect.option(flag)
        if opt is None:
            whole = sorted({n for n in dialect.options if n.startswith(flag)})
            if len(whole) == 1:
                raise UnsupportedSglangArgs(route, flag, v, f"has no such flag (argparse would take "
                                            f"it as an abbreviation of {whole[0]}; ojai writes "
                                            "flags whole)")
            raise UnsupportedSglangArgs(route, flag, v, "has no such flag")
        if opt.deprecated_for:
            raise UnsupportedSglangArgs(route, flag, v, f"deprecated it: use {opt.deprecated_for}")
        if opt.takes == "custom":
            raise UnsupportedSglangArgs(route, flag, v, "reads it with an action of its own, "
                                        "which ojai does not render")
        values: list[str] = []
        if opt.takes == "flag":
            if eq:
                raise UnsupportedSglangArgs(route, flag, v, "takes it as a bare flag, without a value")
            i += 1
        elif eq:
            values, i = [inline], i + 1
        else:
            j = i + 1
            while j < len(args) and not args[j].startswith("--") and (opt.takes == "many" or j == i + 1):
                values.append(args[j])
                j += 1
            if not values:
                raise UnsupportedSglangArgs(route, flag, v, "needs a value after it")
            i = j
        for value in values:
            if opt.choices is not None and value not in opt.choices:
                raise UnsupportedSglangArgs(route, flag, v, f"does not take {value!r} (allowed: "
                                            f"{', '.join(opt.choices)})")
            if opt.dest == "speculative_algorithm" and value.upper() not in dialect.speculative_algorithms:
                raise UnsupportedSglangArgs(route, flag, v, f"knows no speculative algorithm "
                                            f"{value!r} (built in: {', '.join(dialect.speculative_algorithms)})")
        seen.add(opt.dest)
    for opt in {o.dest: o for o in dialect.options.values()}.values():
        if opt.required and opt.dest not in seen:
            raise UnsupportedSglangArgs(route, opt.names[0], v, "requires it")
