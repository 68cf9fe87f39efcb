"""SGLang's own argparse parser of its declared server arguments, built from the real package.

``ServerArgs.add_cli_args`` starts with ``add_cli_args_from_dataclass(parser, ServerArgs)``, and
``ServerArgs`` is the union of the namespace classes of ``sglang/srt/arg_groups/fields/``. This
module builds that parser from the real files of the sglang 0.5.23 wheel (``sglang_pkg``):
SGLang's ``arg_utils.add_cli_args_from_dataclass`` run over SGLang's own field classes. What those
modules import from ``sglang.srt.utils.common`` (whose top imports torch, triton and CUDA
packages) is taken from that very file: the few functions and constants the declarations use
(``json_list_type``, ``human_readable_int``, ``nullable_str``, the LoRA module lists,
``ConcurrentCounter``) are cut out of its source and run; the packages' ``__init__`` files, which
import the serving stack, are not run. The hand-made part of ``add_cli_args`` (dynamic choices,
deprecated spellings, ``--config``) is not in this parser: ojai's table reads it from the source.

It runs in a child process (``python -m`` this file, or :func:`parse`), so that the test process
never holds half of an ``sglang`` package in ``sys.modules``; it needs ``msgspec`` (a test extra).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import types
from pathlib import Path

#: names the field declarations import from sglang/srt/utils/common.py
COMMON_NAMES = ("json_list_type", "human_readable_int", "nullable_str", "LORA_TARGET_ALL_MODULES",
                "SUPPORTED_LORA_TARGET_MODULES", "ConcurrentCounter")
FIELD_MODULES = ("device", "disagg", "exec_", "lora", "memory", "mm", "model", "observability",
                 "parallel", "schedule", "serving", "spec")


def _package(name: str, path: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(path)]  # a package whose __init__ is not run
    sys.modules[name] = module
    return module


def _common(path: Path) -> types.ModuleType:
    """``sglang.srt.utils.common`` holding only :data:`COMMON_NAMES`, from the file's source."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    keep = []
    for node in tree.body:
        names = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                 [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)])
        if any(n in COMMON_NAMES for n in names):
            keep.append(ast.get_source_segment(source, node))
    module = types.ModuleType("sglang.srt.utils.common")
    module.__file__ = str(path)
    prelude = "import argparse, asyncio, json, logging, os, re, threading\nfrom typing import *\n"
    exec(compile(prelude + "\n\n".join(keep), str(path), "exec"), module.__dict__)  # noqa: S102
    missing = [n for n in COMMON_NAMES if n not in module.__dict__]
    if missing:
        raise RuntimeError(f"{path}: no {', '.join(missing)}")
    sys.modules[module.__name__] = module
    return module


def build_parser(site: Path):
    """The argparse parser of SGLang's declared fields, from the package under ``site``."""
    import argparse
    import importlib

    pkg = site / "sglang"
    _package("sglang", pkg)
    _package("sglang.srt", pkg / "srt")
    utils = _package("sglang.srt.utils", pkg / "srt/utils")
    _package("sglang.srt.lora", pkg / "srt/lora")
    _package("sglang.srt.model_executor", pkg / "srt/model_executor")
    _package("sglang.srt.arg_groups", pkg / "srt/arg_groups")
    common = _common(pkg / "srt/utils/common.py")
    utils.common = common
    utils.ConcurrentCounter = common.ConcurrentCounter
    arg_utils = importlib.import_module("sglang.srt.arg_groups.arg_utils")
    parser = argparse.ArgumentParser(prog="sglang serve")
    for name in FIELD_MODULES:
        module = importlib.import_module(f"sglang.srt.arg_groups.fields.{name}")
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__ and \
                    isinstance(value.__dict__.get("_NS_PATH"), str):
                arg_utils.add_cli_args_from_dataclass(parser, value)
    return parser


def _main() -> None:
    site, requests = Path(sys.argv[1]), json.loads(sys.stdin.read())
    parser = build_parser(site)
    parser.exit_on_error = False
    out = {"options": sorted(o for a in parser._actions for o in a.option_strings),  # noqa: SLF001
           "takes": {o: ("flag" if a.nargs == 0 else "many" if a.nargs in ("+", "*") else "one")
                     for a in parser._actions for o in a.option_strings},  # noqa: SLF001
           "choices": {o: [str(c) for c in a.choices] if a.choices is not None else None
                       for a in parser._actions for o in a.option_strings},  # noqa: SLF001
           "required": sorted(o for a in parser._actions if a.required
                              for o in a.option_strings),  # noqa: SLF001
           "results": []}
    for argv in requests:
        try:
            ns, rest = parser.parse_known_args(argv)
            out["results"].append({"ok": not rest, "unknown": rest,
                                   "values": {k: v for k, v in vars(ns).items()
                                              if isinstance(v, (str, int, float, bool, type(None)))}})
        except (argparse.ArgumentError, SystemExit) as exc:  # argparse: imported below
            out["results"].append({"ok": False, "error": str(exc)})
    print(json.dumps(out))


def parse(site: Path, argvs: list[list[str]]) -> dict:
    """Build the parser in a child process and parse each of ``argvs`` with it."""
    proc = subprocess.run([sys.executable, __file__, str(site)], input=json.dumps(argvs),
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"building SGLang's parser failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


if __name__ == "__main__":
    import argparse  # the handler above names it

    _main()
