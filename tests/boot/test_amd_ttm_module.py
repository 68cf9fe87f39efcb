"""The newer `amd-ttm` module (sysfs `amd_ttm`), which ROCm/rocm-systems#5290 taught amd-smi
(it probes amdttm, then amd_ttm, then ttm, and writes `options amd-ttm pages_limit=` to
/etc/modprobe.d/amd-ttm.conf): on the OJAI box's folder with that module loaded instead of ttm,
doctor reads its live limit and setup writes its key, removing the others'."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.doctor import diagnose
from ojai_setup.core.root import Root


def amd_ttm_box(machine) -> Path:
    root = machine("ojai-fresh")
    live = (root / "sys/module/ttm/parameters/pages_limit").read_text()
    shutil.rmtree(root / "sys/module/ttm")
    target = root / "sys/module/amd_ttm/parameters"
    target.mkdir(parents=True)
    (target / "pages_limit").write_text(live)
    return root


def test_doctor_reads_the_amd_ttm_module(machine):
    root = amd_ttm_box(machine)
    report = diagnose(Root(root))
    assert report.facts.ttm.live_module == "amd_ttm"
    assert report.facts.ttm.active_pages is not None
    key = next(f for f in report.findings if f.id == "ttm.module-key")
    assert "live module amd_ttm" in key.evidence


def test_modprobe_options_for_amd_ttm_count_as_configured(machine):
    root = amd_ttm_box(machine)
    conf = root / "etc/modprobe.d/amd-ttm.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("options amd-ttm pages_limit=12582912\n")
    ttm = diagnose(Root(root)).facts.ttm
    assert [(m.module, m.pages) for m in ttm.modprobe] == [("amd_ttm", 12582912)]
    assert ttm.configured_pages == 12582912


def test_setup_writes_the_live_modules_key(machine):
    root = amd_ttm_box(machine)
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none",
                                      "--no-npu", "--gpu-memory", "48", "--json"])
    plan = json.loads(result.stdout)
    step = next(s for s in plan["steps"] if s["step"] == "gpu-memory")
    after = "".join(a.get("after") or "" for a in step["actions"])
    assert "amd_ttm.pages_limit=12582912" in after, step
    assert " ttm.pages_limit=" not in after and "amdttm.pages_limit" not in after
