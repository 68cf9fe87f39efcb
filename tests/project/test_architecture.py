"""The shape of the code: layers one way, steps independent, one exit status table."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.status import ExitStatus

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(where: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(where / "pyproject.toml"), "--no-cache"],
                          cwd=where, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(where)})


def test_the_import_contracts_hold():
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


def test_the_contracts_name_every_step_and_every_top_level_module():
    """A new step or top-level module is under the contracts from its first commit."""
    import tomllib

    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"]
    def named(prefix: str) -> set[str]:
        [contract] = [c for c in contracts if c["name"].startswith(prefix)]
        return {part.strip() for layer in contract["layers"] for part in layer.split("|")}

    layers = named("Layers:")
    independent = {m for c in contracts if c["type"] == "independence" for m in c["modules"]}
    package = REPO / "ojai_setup"
    steps = {f"ojai_setup.steps.{p.stem}" for p in (package / "steps").glob("*.py")
             if p.stem != "__init__"}
    assert independent == steps
    top = {f"ojai_setup.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"} | {
        f"ojai_setup.{p.name}" for p in package.iterdir()
        if p.is_dir() and (p / "__init__.py").exists()}
    assert top == layers
    measure = {f"ojai_setup.measure.{p.stem}" for p in (package / "measure").glob("*.py")
               if p.stem != "__init__"}
    assert named("Measuring") == measure


@pytest.mark.parametrize("module, bad_import, contract", [
    ("ojai_setup/steps/npu.py", "from ojai_setup.steps import ttm", "A step never imports another step"),
    ("ojai_setup/formats/grub.py", "from ojai_setup.apply import executor", "Layers"),
    ("ojai_setup/steps/ttm.py", "from ojai_setup.apply import journal", "Layers"),
    ("ojai_setup/boot/grub.py", "from ojai_setup.domain import checks", "Layers"),
    ("ojai_setup/apply/accounts.py", "from ojai_setup.apply import executor", "No import circles"),
    ("ojai_setup/facts/lemonade.py", "from ojai_setup.facts import collect", "No import circles"),
    ("ojai_setup/measure/stats.py", "from ojai_setup.measure import servers", "Measuring"),
    ("ojai_setup/measure/servers.py", "from ojai_setup.commands import verify", "Layers"),
])
def test_the_contracts_catch_a_wrong_import(tmp_path, module, bad_import, contract):
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "ojai_setup", copy / "ojai_setup",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    target = copy / module
    target.write_text(target.read_text().replace(
        "from __future__ import annotations\n",
        f"from __future__ import annotations\n\n{bad_import}  # noqa: F401\n", 1))
    result = lint(copy)
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout


RUFF = Path(sys.executable).parent / "ruff"


def ruff(where: Path, *paths: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), "check", "--no-cache", "--output-format", "concise", *paths],
                          cwd=where, capture_output=True, text=True)


def test_ruff_finds_nothing():
    """The lint .ci/run runs before the tests ([tool.ruff] in pyproject.toml), here too, so that
    the fast loop catches a finding before it lands."""
    result = ruff(REPO, ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("source, code", [
    ("import os\n", "F401"),
    ("def f(items=[]):\n    return items\n", "B006"),
    ("def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(21))
     + "    return -1\n", "C901"),
    ("def f(x):  # noqa: C901\n    return x\n", "RUF100"),
])
def test_ruff_catches_each_chosen_kind_of_finding(tmp_path, source, code):
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "bad.py").write_text(source)
    result = ruff(tmp_path, "bad.py")
    assert result.returncode == 1 and f" {code} " in result.stdout, result.stdout + result.stderr


def test_mypy_finds_nothing():
    """The type check .ci/run runs before the tests ([tool.mypy] in pyproject.toml: strict on
    core, model, formats, boot and domain), here too, so that the fast loop catches it before it lands."""
    result = subprocess.run([str(Path(sys.executable).parent / "mypy")], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found in ")


def test_mypy_is_strict_where_it_is_meant_to_be(tmp_path):
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = next(o for o in config["overrides"] if "ojai_setup.core.*" in o["module"])
    assert {"ojai_setup.core.*", "ojai_setup.model.*", "ojai_setup.formats.*",
            "ojai_setup.domain.*"} <= set(strict["module"])
    assert strict["disallow_untyped_defs"] is True and strict["disallow_any_generics"] is True
    assert {"ojai_setup.core", "ojai_setup.model", "ojai_setup.formats",
            "ojai_setup.domain"} <= set(config["packages"])
    bad = tmp_path / "ojai_setup/formats"
    bad.mkdir(parents=True)
    (tmp_path / "ojai_setup/__init__.py").write_text("")
    (bad / "__init__.py").write_text("")
    (bad / "loose.py").write_text("def parse(text):\n    return text.split()\n")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    result = subprocess.run([str(Path(sys.executable).parent / "mypy"), "--no-incremental", "-p",
                             "ojai_setup.formats"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 1 and "[no-untyped-def]" in result.stdout, result.stdout


def test_no_module_imports_one_that_imports_it_back():
    """No import circle between any two modules, however far round (the contract above checks
    siblings; this, every module, lazy imports included)."""
    import grimp

    graph = grimp.build_graph("ojai_setup")
    circles = sorted((m, i) for m in graph.modules for i in graph.find_modules_directly_imported_by(m)
                     if graph.find_shortest_chain(importer=i, imported=m))
    assert circles == []


@pytest.mark.parametrize("args", [
    ["setup", "--bogus"],
    ["setup", "--port", "eighty"],
    ["setup", "--llamacpp", "sideways"],
    ["setup", "--port", "65535"],
    ["setup", "--port", "52624"],
    ["setup", "--profile", "nope"],
    ["doctor", "--bogus"],
    ["nosuchcommand"],
])
def test_usage_errors_exit_64(args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == ExitStatus.USAGE == 64, result.output


@pytest.mark.parametrize("command", ["doctor", "setup", "models", "verify", "rollback"])
def test_root_that_is_a_file_is_a_usage_error_for_every_command(tmp_path, command):
    afile = tmp_path / "file"
    afile.write_text("")
    result = CliRunner().invoke(app, [command, "--root", str(afile)])
    assert result.exit_code == 64
    assert "not a directory" in result.stderr
    assert "Traceback" not in result.output


def test_missing_catalog_file_is_a_usage_error(tmp_path):
    machine = REPO / "tests/machines/ojai-fresh"
    result = CliRunner().invoke(app, ["setup", "--root", str(machine), "--llamacpp", "none",
                                      "--catalog", str(tmp_path / "no-such.toml")])
    assert result.exit_code == 64
    assert "no-such.toml: no such file" in result.stderr


def test_every_json_output_names_its_schema(tmp_path):
    machine = str(REPO / "tests/machines/ojai-fresh")
    for args, schema in ((["doctor"], "ojai.doctor/2"),
                         (["setup", "--llamacpp", "none"], "ojai.setup/1"),
                         (["models"], "ojai.models/1")):
        result = CliRunner().invoke(app, [*args, "--root", machine, "--json"])
        assert result.stdout.lstrip().startswith('{\n  "schema": "' + schema + '"'), result.output


def test_port_clashes_name_the_option(tmp_path):
    machine = str(REPO / "tests/machines/ojai-fresh")
    for port, words in (("65535", "no port for the plain route"), ("52625", "FastFlowLM's port")):
        result = CliRunner().invoke(app, ["setup", "--root", machine, "--port", port])
        assert result.exit_code == 64
        assert result.stderr.startswith("error: --port") and words in result.stderr
        assert "validation error" not in result.stderr


def test_help_lists_the_choices_of_every_fixed_option():
    text = CliRunner().invoke(app, ["setup", "--help"], env={"COLUMNS": "200"}).stdout
    from ojai_setup.cli import _profiles

    profiles = ", ".join(_profiles())
    assert "generic" in profiles and len(_profiles()) > 1
    for choices in ("nightly|source|distro|none", "hip|cpu|vulkan", "auto|cmdline|modprobe",
                    "none|distro|release", "none|performance", profiles):
        assert choices in text, text


def test_setup_help_is_grouped_into_panels_with_metavars_a_person_reads():
    text = CliRunner().invoke(app, ["setup", "--help"], env={"COLUMNS": "80"}).stdout
    panels = re.findall(r"^╭─ (.+?) ─", text, re.M)
    assert panels == ["Options", "What to set up", "The GPU memory", "llama.cpp",
                      "Models and routes", "Lemonade and NPU", "Safety: review, apply, save"]
    assert not re.search(r"<(str|int|bool|path|list)", text), text  # no type names
    for option, metavar in (("--gpu-memory", "GiB"), ("--model", "NAME"), ("--root", "DIR"),
                            ("--plan", "FILE"), ("--show", "PATH")):
        assert re.search(rf"^│ {option} +{re.escape(metavar)} ", text, re.M), (option, text)
    assert all(len(line) <= 80 for line in text.splitlines())


def test_models_shows_download_sizes_and_completion_can_be_installed():
    machine = str(REPO / "tests/machines/ojai-fresh")
    import json

    rows = json.loads(CliRunner().invoke(app, ["models", "--root", machine, "--json", "--all"]).stdout)["routes"]
    sizes = {r["name"]: r["download_bytes"] for r in rows}
    assert all(size > 10**9 for name, size in sizes.items()
               if not name.startswith("gemma-3-270m") and name != "nomic-embed-text-v1")
    assert sizes["nomic-embed-text-v1"] == 78_097_792  # the embedding model, 74.5 MiB
    # the small model is one 253 MB file, its self-draft route included
    assert sizes["gemma-3-270m"] == sizes["gemma-3-270m-self"] == 253_113_024
    table = CliRunner().invoke(app, ["models", "--root", machine, "--wide"],
                               env={"COLUMNS": "120"}).stdout
    assert re.search(r"^gemma-4-26b-a4b .* ~16\.2 GiB +no", table, re.M), table
    assert "--install-completion" in CliRunner().invoke(app, ["--help"]).stdout


def _schema_first(result, schema: str) -> dict:
    import json

    assert result.stdout.lstrip().startswith('{\n  "schema": "' + schema + '"'), result.output
    return json.loads(result.stdout)


def test_every_json_output_of_a_change_names_its_schema_first(machine, tmp_path):
    """Setup's dry run, its saved plan, its apply and rollback: one document each, ``schema``
    first (doctor and models: the test above)."""
    root = str(machine("strix-halo-dkms"))
    plan = str(tmp_path / "plan.json")
    no_llama = ["--llamacpp", "none", "--no-npu"]
    run = CliRunner().invoke
    dry = _schema_first(run(app, ["setup", "--root", root, "--json", "--out", plan, *no_llama]),
                        "ojai.setup/1")
    assert dry["exit_code"] == 2
    saved = _schema_first(run(app, ["setup", "--root", root, "--plan", plan, "--json"]),
                          "ojai.setup/1")
    assert saved["saved_plan"]["fresh"] is True
    applied = _schema_first(run(app, ["setup", "--root", root, "--apply", "--plan", plan, "--json"]),
                            "ojai.apply/1")
    assert applied["changed"] is True
    again = _schema_first(run(app, ["setup", "--root", root, "--apply", "--yes", "--json", *no_llama]),
                          "ojai.apply/1")
    assert again["changed"] is False
    undone = _schema_first(run(app, ["rollback", "--root", root, "--yes", "--json"]),
                           "ojai.rollback/1")
    assert sorted(undone["restored"]) == ["/etc/default/grub", "/etc/modprobe.d/ttm.conf"]


def test_verify_json_names_its_schema_first(tmp_path):
    from support.machine_state import record_state
    from support.server import free_port

    from ojai_setup.core.root import Root

    record_state(Root(tmp_path), "routes", {"gone": {"host": "127.0.0.1", "port": free_port()}})
    result = CliRunner().invoke(app, ["verify", "--root", str(tmp_path), "--json", "--timeout", "0.5"])
    assert result.exit_code == 1
    routes = _schema_first(result, "ojai.verify/1")["routes"]
    assert [(r["route"], r["healthy"]) for r in routes] == [("gone", False)]


# -- one way to print ------------------------------------------------------------------------

COMMANDS = REPO / "ojai_setup/commands"


def _is_report(node) -> bool:
    """A report class: it names its ``schema`` and has both ``to_json`` and ``render``."""
    import ast

    names = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    schema = any(isinstance(n, (ast.Assign, ast.AnnAssign)) and "schema" in
                 {t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                  if isinstance(t, ast.Name)} for n in node.body)
    return schema and {"to_json", "render"} <= names


def printing_outside_reports(source: str, filename: str = "<source>") -> list[str]:
    """Where ``source`` prints on a terminal (``term.print``, ``term.console.print``,
    ``term.emit_json``) other than in the ``render`` method of a report class; JSON is only
    printed by :meth:`Terminal.show`."""
    import ast

    found: list[str] = []

    def visit(node, allowed: bool) -> None:
        if isinstance(node, ast.ClassDef):
            for child in node.body:
                visit(child, _is_report(node) and isinstance(child, ast.FunctionDef)
                      and child.name == "render")
            return
        if isinstance(node, ast.Attribute) and node.attr in ("print", "emit_json"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id == "term" and (
                    node.attr == "emit_json" or not allowed):
                found.append(f"{filename}:{node.lineno}: term...{node.attr}")
        for child in ast.iter_child_nodes(node):
            visit(child, allowed)

    visit(ast.parse(source), False)
    return found


def test_commands_print_only_through_reports():
    checked = 0
    problems: list[str] = []
    for path in sorted(COMMANDS.rglob("*.py")):
        if path.name == "terminal.py":
            continue
        source = path.read_text()
        problems += printing_outside_reports(source, str(path.relative_to(REPO)))
        checked += source.count("term.print")
    assert not problems, "print through a report and Terminal.show:\n" + "\n".join(problems)
    assert checked > 40  # the rule looked at the renderers, it did not pass by finding nothing


@pytest.mark.parametrize("source, bad", [
    ("class R:\n    schema = 'ojai.x/1'\n    def to_json(self): return {}\n"
     "    def render(self, term):\n        term.print('ok')\n", 0),
    ("class R:\n    schema = 'ojai.x/1'\n    def to_json(self): return {}\n"
     "    def render(self, term):\n        p = term.print\n        p('ok')\n", 0),
    ("def run(term):\n    term.print('applied')\n", 1),
    ("def run(term, data):\n    term.emit_json(data, schema='ojai.x/1')\n", 1),
    ("def run(term):\n    term.console.print('applied')\n", 1),
    ("class NotAReport:\n    def render(self, term):\n        term.print('x')\n", 1),
    ("class R:\n    schema = 'ojai.x/1'\n    def to_json(self): return {}\n"
     "    def render(self, term): ...\n    def other(self, term):\n        term.print('x')\n", 1),
])
def test_the_printing_rule_catches_printing_outside_a_report(source, bad):
    assert len(printing_outside_reports(source)) == bad


def test_json_output_does_not_import_rich():
    code = ("import io, sys\n"
            "from ojai_setup.commands.terminal import Terminal\n"
            "class R:\n"
            "    schema = 'ojai.x/1'\n"
            "    def to_json(self): return {'a': 1}\n"
            "    def render(self, term): term.print('a')\n"
            "out = io.StringIO()\n"
            "Terminal(json_mode=sys.argv[1] == 'json', stdout=out).show(R())\n"
            "print(out.getvalue().split()[:3], any(m.split('.')[0] == 'rich' for m in sys.modules))\n")
    def run(mode: str) -> str:
        return subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True,
                              check=True, cwd=REPO, env={"PYTHONPATH": str(REPO)}).stdout.strip()

    assert run("json") == """['{', '"schema":', '"ojai.x/1",'] False"""
    assert run("rich") == "['a'] True"


# -- formats parse, domain decides: neither reads the machine --------------------------------

#: modules that do I/O (the machine's files, processes, the network, the environment)
IO_MODULES = ("os", "subprocess", "sh", "shutil", "tempfile", "socket", "glob", "mmap",
              "urllib.request", "http.client", "http.server", "sqlite3",
              "ojai_setup.core.root", "ojai_setup.core.atomic", "ojai_setup.facts")
#: calls that read or change what is on the disk, start a program or read the environment
IO_CALLS = frozenset({
    "open", "read_text", "read_bytes", "write_text", "write_bytes", "exists", "is_file", "is_dir",
    "is_symlink", "stat", "lstat", "iterdir", "glob", "rglob", "mkdir", "unlink", "touch", "chmod",
    "rmdir", "rename", "readlink", "access", "run", "which", "getenv", "urlopen", "GGUFReader"})


def io_uses(source: str) -> set[str]:
    """What in ``source`` does I/O: ``import NAME`` of a module above, ``NAME()`` of a call
    above (a function or a method of anything: a path, a root), and ``environ``."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                 else [])
        found |= {f"import {n}" for n in names
                  if any(n == m or n.startswith(m + ".") for m in IO_MODULES)}
        if isinstance(node, ast.Call):
            func = node.func
            name = (func.id if isinstance(func, ast.Name) else
                    func.attr if isinstance(func, ast.Attribute) else None)
            if name in IO_CALLS:
                found.add(f"{name}()")
        if isinstance(node, ast.Attribute) and node.attr == "environ":
            found.add("environ")
    return found


#: what domain/ still reads, module by module; nothing else may, and an entry whose use has
#: gone must go too (the list only shrinks)
DOMAIN_READS = {
    # ojai's own tables, shipped in the package, and the table files named on the command line
    # (its TOML tables are read by ojai_setup.core.resources.read_toml)
    "catalog.py": {"read_text()", "is_file()"},
    "check_engine.py": {"is_file()", "glob()"},
    "profiles.py": {"glob()"},
    "sglang.py": {"read_text()"},
    # the machine itself: still to move to facts/ or into the planning context (build and
    # nightly's install records moved to facts/llama_install.py)
    "launch.py": {"import ojai_setup.core.root", "glob()", "open()"},
    "lemonade.py": {"import ojai_setup.core.root", "exists()", "is_symlink()", "read_text()"},
    "own_model.py": {"import os.path"},  # ~ and a relative path: the home folder and the cwd
}


def test_formats_do_no_io_and_domain_reads_only_what_is_listed():
    package = REPO / "ojai_setup"
    formats = {p.name: io_uses(p.read_text()) for p in sorted((package / "formats").glob("*.py"))}
    assert {name: uses for name, uses in formats.items() if uses} == {}
    domain = {p.name: io_uses(p.read_text()) for p in sorted((package / "domain").glob("*.py"))}
    assert {name: uses for name, uses in domain.items() if uses} == DOMAIN_READS
    assert len(formats) > 20 and len(domain) > 20  # the rule looked at the modules


@pytest.mark.parametrize("source, uses", [
    ("import os\n", {"import os"}),
    ("from subprocess import run\nrun(['ls'])\n", {"import subprocess", "run()"}),
    ("from ojai_setup.core.root import Root\n", {"import ojai_setup.core.root"}),
    ("from ojai_setup.facts.gguf import read_model_info\n", {"import ojai_setup.facts.gguf"}),
    ("def f(p):\n    return p.read_text()\n", {"read_text()"}),
    ("def f(root):\n    return root.exists('/etc/os-release')\n", {"exists()"}),
    ("def f(path):\n    return open(path).read()\n", {"open()"}),
    ("import sys\ndef f():\n    return sys.modules['os'].environ['HOME']\n", {"environ"}),
    ("from pathlib import PurePath\ndef f(p):\n    return PurePath(p).name\n", set()),
    ("import re\ndef f(text):\n    return re.findall('x', text)\n", set()),
])
def test_the_io_rule_catches_io(source, uses):
    assert io_uses(source) == uses


# -- every exit code has a name ---------------------------------------------------------------

def bare_exit_codes(source: str, filename: str = "<source>") -> list[str]:
    """Where ``source`` exits with a number instead of an :class:`ExitStatus`: an int literal
    given to ``Exit``/``SystemExit``/``sys.exit``, or returned by a command's runner
    (``run_*``, ``exit_code``, a function annotated ``-> ExitStatus``)."""
    import ast

    def literal_ints(node) -> bool:
        return any(isinstance(n, ast.Constant) and type(n.value) is int for n in ast.walk(node))

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("Exit", "SystemExit", "exit") and literal_ints(node.args[0]):
                found.append(f"{filename}:{node.lineno}: {name}() of a number")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.name.startswith("run_") or node.name == "exit_code"
                or (node.returns is not None and "ExitStatus" in ast.unparse(node.returns))):
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and ret.value is not None and literal_ints(ret.value):
                    found.append(f"{filename}:{ret.lineno}: {node.name} returns a number")
    return found


def test_every_command_exits_with_a_named_status():
    sources = sorted(COMMANDS.rglob("*.py")) + [REPO / "ojai_setup/cli.py", REPO / "ojai_setup/entry.py"]
    problems = [p for path in sources
                for p in bare_exit_codes(path.read_text(), str(path.relative_to(REPO)))]
    assert problems == []


@pytest.mark.parametrize("source, bad", [
    ("raise typer.Exit(64)\n", 1),
    ("raise typer.Exit(INTERRUPTED if x else 0)\n", 1),
    ("raise SystemExit(1)\n", 1),
    ("def run_verify(term):\n    return 0 if ok else 1\n", 1),
    ("def helper(term):\n    return 1\n", 0),
    ("raise typer.Exit(ExitStatus.USAGE)\n", 0),
    ("def run_x(term) -> ExitStatus:\n    return ExitStatus.OK\n", 0),
])
def test_the_exit_rule_catches_a_number(source, bad):
    assert len(bare_exit_codes(source)) == bad
