"""The table of follow-up kinds (model/follow_ups.py) against the follow-ups the steps notify."""

from __future__ import annotations

import json
from pathlib import Path

from ojai_setup.model.follow_ups import FOLLOW_UPS, daemon_reload, follow_up

CASES = Path(__file__).resolve().parents[1] / "steps" / "cases"


def test_every_follow_up_a_step_case_expects_has_a_row():
    seen = {h for case in CASES.glob("*/*.json")
            for h in json.loads(case.read_text())["expect"].get("handlers", [])}
    assert {"systemd", "update-grub", "initramfs"} <= seen
    assert [h for h in sorted(seen) if follow_up(h) is None] == []


def test_a_follow_up_per_kernel_is_its_kind_s_and_the_unit_reload_is_one_command():
    assert follow_up("kernel-install 6.8.0-45-generic") == FOLLOW_UPS["kernel-install"]
    assert follow_up("no-such") is None
    assert [k for k, f in FOLLOW_UPS.items() if not f.boot] == [
        "systemd", "power-profiles-daemon", "tuned", "lemonade-backends", "lemond-restart"]
    reload = daemon_reload("load the new units")
    assert reload.argv == ("systemctl", "daemon-reload") and reload.needs_root
