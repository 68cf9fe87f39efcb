"""The built wheel carries what ojai reads at run time: `pip install .` (not editable) into a
fresh virtualenv, then `ojai doctor` from outside the source tree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_wheel_installs_and_runs_doctor(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", str(REPO)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert pip.returncode == 0, pip.stderr[-3000:]
    ojai = venv / "bin/ojai"

    where = subprocess.run(
        [str(venv / "bin/python"), "-c",
         "from ojai_setup.core.resources import data_dir, example_root;"
         "print(data_dir('checks')); print(data_dir('templates')); print(example_root('ojai-fresh'))"],
        capture_output=True, text=True, cwd=tmp_path, check=True).stdout.split()
    for path in where:
        assert Path(path).is_dir() and str(venv) in path, where
    assert (Path(where[0]) / "ojai.toml").is_file()
    assert (Path(where[1]) / "llama-server.sh.j2").is_file()

    example = subprocess.run([str(ojai), "doctor", "--example", "ojai-fresh", "--json"],
                             capture_output=True, text=True, cwd=tmp_path)
    report = json.loads(example.stdout)
    assert report["profile"]["id"] == "ojai"
    assert example.returncode == 1  # the example box runs BIOS 1.00
    assert any(f["id"] == "bios.min" and f["severity"] == "fail" for f in report["findings"])

    human = subprocess.run([str(ojai), "doctor", "--root", str(REPO / "tests/machines/ojai-rebooted")],
                           capture_output=True, text=True, cwd=tmp_path, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})
    assert human.returncode == 0, human.stderr
    assert "ttm.active" in human.stdout and "result:" in human.stdout
    assert "\x1b[" not in human.stdout
