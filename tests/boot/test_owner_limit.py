"""An owner's own GPU memory limit is kept: a limit already configured (or active) higher
than ojai's default budget is not lowered unless ``--gpu-memory`` asks for another, and the plan
says which it kept and why."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ojai_setup.cli import app


def plan(root, *args: object) -> dict:
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none",
                                      "--json", *map(str, args)], env={"COLUMNS": "80"})
    assert result.exit_code in (0, 2), result.output
    return json.loads(result.stdout)


def ttm_step(data: dict) -> dict:
    return next(s for s in data["steps"] if s["step"] == "gpu-memory")


def written(data: dict, path: str) -> str:
    return next(a["after"] for s in data["steps"] for a in s["actions"] if a.get("path") == path)


def test_an_active_and_configured_125_gib_is_kept_on_debian_13(machine):
    """strix-halo-debian13-grub-dropin: 32768000 pages (125 GiB) in a GRUB drop-in and active;
    ojai's default for the machine is 117 GiB, which it wrote over the owner's value."""
    root = machine("strix-halo-debian13-grub-dropin")
    data = plan(root)
    step = ttm_step(data)
    assert step["sentence"].startswith(
        "kept the limit you set (125.0 GiB in /etc/default/grub.d/amdgpu.cfg) rather than "
        "ojai's default of 117 GiB for this machine (it lets the GPU take all but 0.1 GiB of "
        "the 125.1 GiB; the models are sized within 121 GiB); --gpu-memory GiB sets another; ")
    after = written(data, "/etc/default/grub.d/amdgpu.cfg")
    assert "amdttm.pages_limit=32768000" in after and "30670848" not in after
    # asked for: another value is set
    asked = written(plan(root, "--gpu-memory", 100), "/etc/default/grub.d/amdgpu.cfg")
    assert "amdttm.pages_limit=26214400" in asked


def test_a_configured_120_gib_is_kept_on_the_dkms_machine(machine):
    """strix-halo-dkms: options ttm pages_limit=31457280 (120 GiB) in /etc/modprobe.d/ttm.conf;
    the default (116 GiB) replaced it. The key is still brought to amdttm, the value kept."""
    root = machine("strix-halo-dkms")
    data = plan(root)
    assert ttm_step(data)["sentence"].startswith(
        "kept the limit you set (120.0 GiB in /etc/modprobe.d/ttm.conf) rather than ojai's "
        "default of 116 GiB for this machine; --gpu-memory GiB sets another; set the GPU memory "
        "limit to 120 GiB (amdttm.pages_limit=31457280)")
    assert "amdttm.pages_limit=31457280" in written(data, "/etc/default/grub")
    assert "pages_limit=31457280" in written(data, "/etc/modprobe.d/ttm.conf")


def test_a_limit_below_the_default_is_raised_as_before(machine):
    root = machine("ojai-fresh")  # 31.6 GiB active, the kernel's default: nothing kept
    assert not ttm_step(plan(root))["sentence"].startswith("kept")
