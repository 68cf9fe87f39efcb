"""Newer FastFlowLM: ``flm validate --json`` reporting each device ``busy`` (FastFlowLM 1.0.9 and
newer), and a FastFlowLM without a kernel floor passing a distribution kernel older than 6.17
that backports the driver.

No public capture of either output was found; both are composed from ``validate-ready.json``
(FastFlowLM's own JSON shape) with the one field changed: ``devices[].busy`` added, or
``kernel`` set to an Ubuntu OEM 6.14 kernel that flm passes (``kernel_ok`` and ``ready`` true).
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.commands.doctor import diagnose
from ojai_setup.core.root import COMMANDS_DIR, Root, command_key
from ojai_setup.formats.flm import parse_validate

DATA = Path(__file__).parents[1] / "data" / "flm"


def composed(**changes) -> dict:
    data = json.loads((DATA / "validate-ready.json").read_text())
    busy = changes.pop("busy", None)
    if busy is not None:
        data["devices"][0]["busy"] = busy
    data.update(changes)
    return data


def give_validate(root: Path, data: dict, kernel: str | None = None) -> Path:
    folder = root / COMMANDS_DIR / command_key(["flm", "validate", "--json"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stdout").write_text(json.dumps(data, indent=4) + "\n")
    if kernel:
        (root / "proc/sys/kernel/osrelease").write_text(kernel + "\n")
    return root


def test_busy_is_read_per_device():
    status = parse_validate(json.dumps(composed(busy=True)), 0)
    assert status.devices[0].busy is True and status.busy() == ["/dev/accel/accel0"]
    assert parse_validate(json.dumps(composed(busy=False)), 0).busy() == []
    assert parse_validate((DATA / "validate-ready.json").read_text(), 0).devices[0].busy is None


def test_setup_warns_when_the_npu_is_busy(machine):
    root = give_validate(machine("ojai-fresh"), composed(busy=True))
    plan = json.loads(CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp",
                                               "none", "--json"]).stdout)
    step = next(s for s in plan["steps"] if s["step"] == "npu")
    assert step["status"] == "change"
    assert any("/dev/accel/accel0 busy: another process holds the NPU" in w
               for w in step["warnings"]), step


def test_a_backported_kernel_that_flm_passes_is_not_refused_on_its_number(machine):
    root = give_validate(machine("ojai-fresh"), composed(kernel="6.14.0-1018-oem"),
                         kernel="6.14.0-1018-oem")
    status = parse_validate(json.dumps(composed(kernel="6.14.0-1018-oem")), 0)
    assert status.kernel.ok is True and status.ready
    f = next(f for f in diagnose(Root(root)).findings if f.id == "kernel.min")
    assert f.severity == "warn", f
    assert "flm validate` passes on this kernel" in f.evidence


def test_a_kernel_flm_refuses_still_fails(machine):
    old = json.loads((DATA / "validate-old-kernel.json").read_text())
    root = give_validate(machine("ojai-fresh"), old, kernel=old["kernel"])
    f = next(f for f in diagnose(Root(root)).findings if f.id == "kernel.min")
    assert f.severity == "fail"
