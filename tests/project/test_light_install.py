"""The base install carries no plotting stack: matplotlib is ojai's ``plots`` extra. Without it
bench saves its results and says how to get plot.png; with it (the test extra) the plot is
drawn."""

from __future__ import annotations

import io
import json
import sys
import tomllib
from pathlib import Path

from ojai_setup.measure.campaign import BenchConfig
from ojai_setup.measure.command import new_result, save_result
from ojai_setup.measure.prompts import BUILTIN
from ojai_setup.measure.report import BenchReport
from ojai_setup.commands.terminal import Terminal
from ojai_setup.core.root import Root

REPO = Path(__file__).resolve().parents[2]


def test_matplotlib_is_the_plots_extra_not_a_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split("[")[0].strip() for d in project["dependencies"]]
    assert "matplotlib" not in names
    assert project["optional-dependencies"]["plots"] == ["matplotlib>=3.8"]
    assert "matplotlib>=3.8" in project["optional-dependencies"]["test"]


def _result():
    return new_result("tiny", BenchConfig(prompts=BUILTIN))


def test_bench_without_matplotlib_saves_the_results_and_says_how_to_get_the_plot(
        tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed: import fails
    result = _result()
    folder = save_result(Root(tmp_path), result)
    saved = json.loads((folder / "results.json").read_text())
    assert not (folder / "plot.png").exists() and saved["plot"] is None
    assert saved["stopped"] is None  # a missing plot is not an early stop
    assert saved["no_plot"].startswith("no plot.png: matplotlib is not installed")
    out = io.StringIO()
    monkeypatch.setenv("COLUMNS", "300")
    BenchReport(result, folder).render(Terminal(stdout=out))
    said = " ".join(out.getvalue().split())
    assert f"`{sys.executable} -m pip install matplotlib`" in said
    assert "pip install '.[plots]'" in said and "the next run draws it" in said


def test_bench_with_matplotlib_draws_the_plot(tmp_path):
    result = _result()
    folder = save_result(Root(tmp_path), result)
    assert (folder / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.no_plot is None
