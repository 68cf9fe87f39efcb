"""A name a person mistypes is a usage error at once (exit 64, one line, the closest names),
before anything is planned; a name that differs only in case or separators, or one of the
route names setup itself writes (``gemma-4-26b-a4b-mtp``), is taken as the route it names."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.errors import UsageError
from ojai_setup.core.root import Root
from ojai_setup.core.status import ExitStatus
from ojai_setup.model.settings import Settings


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "80"})


@pytest.mark.parametrize("typed, near", [
    ("gemma4-26b", "gemma-4-26b-a4b"),
    ("qwen36", "qwen3.6-27b or qwen3.6-35b-a3b"),
    ("gemma-4-26b-a4b-ngram", "gemma-4-26b-a4b"),
])
def test_an_unknown_model_is_one_line_exit_64_with_the_closest_names(machine, typed, near):
    root = machine("ojai-fresh")
    result = ojai("setup", "--root", root, "--llamacpp", "none", "--model", typed)
    assert result.exit_code == ExitStatus.USAGE, result.output
    assert result.stdout == ""  # no plan printed before it
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: --model {typed}: no such route; did you mean {near}")
    # the command that lists them acts on the same machine
    assert f"(`ojai models --root {root}` lists them)" in lines[0]


@pytest.mark.parametrize("typed, route", [
    ("Gemma-4-26B-A4B", "gemma-4-26b-a4b"),
    ("GEMMA_4_12B", "gemma-4-12b"),
    ("gemma-4-26b-a4b-mtp", "gemma-4-26b-a4b"),   # the drafted route setup writes
    ("qwen3.6-27b-mtp", "qwen3.6-27b"),
    ("gemma-3-270m-ngram", "gemma-3-270m"),
    ("gemma-3-270m-self-draft", "gemma-3-270m-self"),
    ("qwen3.6-35b-a3b", "qwen3.6-35b-a3b"),
])
def test_a_route_name_in_any_case_or_a_served_route_name_is_the_route(typed, route):
    from ojai_setup.planning.gather import resolve_model

    root = Root("tests/machines/ojai-fresh")
    assert resolve_model(root, Settings(model=typed)).model == route


def test_an_sglang_route_is_resolved_too():
    from ojai_setup.planning.gather import resolve_model

    root = Root("tests/machines/mi300x-8gpu-sglang")
    assert resolve_model(root, Settings(model="DeepSeek-V3-NextN")).model == "deepseek-v3-nextn"
    with pytest.raises(UsageError, match="did you mean deepseek-v3-nextn"):
        resolve_model(root, Settings(model="deepseek-v3"))


def test_a_model_route_typed_in_capitals_plans_what_its_own_name_plans(machine):
    root = machine("ojai-fresh")
    args = ["setup", "--root", root, "--llamacpp", "none", "--no-npu", "--json"]
    import json

    plans = [json.loads(ojai(*args, "--model", name).stdout)
             for name in ("gemma-3-270m", "Gemma_3_270M")]
    assert plans[0]["exit_code"] == plans[1]["exit_code"]
    assert plans[0]["steps"] == plans[1]["steps"]


@pytest.mark.parametrize("kind, near", [("mtp", "draft-mtp"), ("draft-mtp,ngram_cach", "ngram-cache")])
def test_an_unknown_drafting_kind_is_exit_64_with_the_closest(machine, kind, near):
    result = ojai("tune", "some-route", "--root", machine("ojai-applied"), "--kind", kind)
    assert result.exit_code == ExitStatus.USAGE, result.output
    assert result.stderr.startswith(f"error: --kind {kind}: ")
    assert f"did you mean {near}" in result.stderr and len(result.stderr.splitlines()) == 1


def test_a_drafting_kind_in_other_case_is_taken():
    from ojai_setup.measure.kinds import canonical

    assert canonical("Draft-MTP,ngram_mod") == "draft-mtp,ngram-mod"


@pytest.mark.parametrize("name, near", [("fresh", "ojai-fresh"), ("strix-halo", "strix-halo-dkms")])
def test_an_unknown_example_is_exit_64_with_the_closest(name, near):
    for command in ("doctor", "models", "setup"):
        result = ojai(command, "--example", name)
        assert result.exit_code == ExitStatus.USAGE, result.output
        assert f"no example machine {name!r}; did you mean {near}?" in result.stderr
        assert len(result.stderr.splitlines()) == 1


def test_an_example_and_a_backend_in_other_case_are_taken():
    result = ojai("setup", "--example", "OJAI_Fresh", "--llamacpp", "NONE", "--backend", "HIP",
                  "--no-npu")
    assert result.exit_code == ExitStatus.CHANGES, result.output
    bad = ojai("setup", "--example", "ojai-fresh", "--backend", "rocm")
    assert bad.exit_code == ExitStatus.USAGE
    assert bad.stderr == "error: --backend rocm: must be one of hip, cpu, vulkan\n"
