"""Three states of the TTM limit: configured (the files as grub-mkconfig and kmod read them),
generated (grub.cfg's default entry, the initramfs of the kernel that will boot), active
(/proc/cmdline, the live module). Doctor names the first that differs and the one action that
fixes it; it never says "reboot" while a regeneration is owed.

grub.cfg is tests/data/boot/ubuntu-24.04-grub.cfg: the layout Ubuntu 24.04's grub-mkconfig
(00_header, 10_linux) writes, with the kernel parameters rendered in by each test;
the lsinitramfs listing has the shape Debian's lsinitramfs prints (the image, then one path a
line)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from support.machine_state import store_capture

from ojai_setup.cli import app
from ojai_setup.core.root import CommandResult
from ojai_setup.formats.grub_cfg import (
    default_bls_entry,
    default_entry,
    kernel_release,
    parse_bls_entry,
    parse_grub_cfg,
    parse_grubenv,
    split_words,
)

DATA = Path(__file__).parents[1] / "data" / "boot"
REL = "6.17.0-1012-oem"
IMAGE = f"/boot/initrd.img-{REL}"
LIMIT = "ttm.pages_limit=12582912"
ARGS = ["--llamacpp", "none", "--no-npu"]


def ojai(*args: str):
    return CliRunner().invoke(app, list(args))


def grub_cfg(args: str) -> str:
    return (DATA / "ubuntu-24.04-grub.cfg").read_text().replace("@ARGS@", args)


def machine_with(machine, *, grub: str | None, generated: str | None, cmdline: str,
                 active: int | None = None) -> Path:
    root = machine("ojai-fresh")
    if grub is not None:
        (root / "etc/default/grub").write_text(
            f'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="{grub}"\nGRUB_CMDLINE_LINUX=""\n')
    if generated is not None:
        (root / "boot/grub").mkdir(parents=True)
        (root / "boot/grub/grub.cfg").write_text(grub_cfg(generated))
        (root / f"boot/vmlinuz-{REL}").write_bytes(b"")
        (root / f"boot/initrd.img-{REL}").write_bytes(b"")
    (root / "proc/cmdline").write_text(f"BOOT_IMAGE=/boot/vmlinuz-{REL} root=UUID=x ro {cmdline}\n")
    if active is not None:
        (root / "sys/module/ttm/parameters/pages_limit").write_text(f"{active}\n")
    return root


def ttm_finding(root: Path) -> dict:
    report = json.loads(ojai("doctor", "--json", "--root", str(root)).stdout)
    return next(f for f in report["findings"] if f["id"] == "ttm.active")


def test_configured_but_not_generated_asks_for_a_regeneration_not_a_reboot(machine):
    root = machine_with(machine, grub=f"quiet splash {LIMIT}", generated="quiet splash",
                        cmdline="quiet splash")
    f = ttm_finding(root)
    assert f["severity"] == "warn"
    assert "grub.cfg was not regenerated" in f["evidence"]
    assert "default entry 'Ubuntu'" in f["evidence"]
    assert "update-grub" in f["fix"] and not f["fix"].startswith("Reboot")
    plan = ojai("setup", "--root", str(root), *ARGS)
    assert plan.exit_code == 2, plan.output
    flat = " ".join(plan.stdout.split())
    assert "still boots without it" in flat and "run update-grub, as root" in flat


def test_generated_but_not_booted_is_a_pending_reboot(machine):
    root = machine_with(machine, grub=f"quiet splash {LIMIT}", generated=f"quiet splash {LIMIT}",
                        cmdline="quiet splash")
    f = ttm_finding(root)
    assert "reboot pending" in f["evidence"] and f["fix"].startswith("Reboot")
    assert ojai("setup", "--root", str(root), *ARGS).exit_code == 0


def test_three_states_agreeing_pass(machine):
    root = machine_with(machine, grub=f"quiet splash {LIMIT}", generated=f"quiet splash {LIMIT}",
                        cmdline=f"quiet splash {LIMIT}", active=12582912)
    f = ttm_finding(root)
    assert f["severity"] == "pass", f
    assert "generated: /boot/grub/grub.cfg agrees" in f["evidence"]


def test_an_owed_follow_up_is_named_before_any_reboot(machine):
    root = machine_with(machine, grub=f"quiet splash {LIMIT}", generated="quiet splash",
                        cmdline="quiet splash")
    state = root / "var/lib/ojai"
    state.mkdir(parents=True)
    (state / "state.json").write_text(json.dumps(
        {"pending_handlers": [{"name": "update-grub", "argv": ["update-grub"]}]}))
    f = ttm_finding(root)
    assert "owes update-grub" in f["evidence"]
    assert f["fix"].startswith(f"Run `ojai setup --root {root} --apply` first"), f["fix"]
    assert "Reboot to" not in f["fix"]


def _modprobe_machine(machine, *, conf_newer: bool) -> Path:
    root = machine_with(machine, grub=f"quiet splash {LIMIT}", generated=f"quiet splash {LIMIT}",
                        cmdline="quiet splash")
    conf = root / "etc/modprobe.d/ttm.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("options ttm pages_limit=12582912\n")
    listing = "\n".join([IMAGE, "kernel", "kernel/x86/microcode/AuthenticAMD.bin", "etc",
                         "etc/modprobe.d", "etc/modprobe.d/ttm.conf",
                         f"usr/lib/modules/{REL}/kernel/drivers/gpu/drm/ttm/ttm.ko.zst",
                         f"usr/lib/modules/{REL}/kernel/drivers/gpu/drm/amd/amdgpu/amdgpu.ko.zst"])
    store_capture(root, CommandResult(("lsinitramfs", IMAGE), 0, listing + "\n"))
    image, t = root / IMAGE.lstrip("/"), 1_700_000_000
    os.utime(image, (t, t))
    os.utime(conf, (t + 60, t + 60) if conf_newer else (t - 60, t - 60))
    return root


def test_a_modprobe_limit_newer_than_the_initramfs_asks_for_a_rebuild(machine):
    root = _modprobe_machine(machine, conf_newer=True)
    f = ttm_finding(root)
    assert f"the initramfs {IMAGE}" in f["evidence"] and "was built before" in f["evidence"]
    assert f"update-initramfs -u -k {REL}" in f["fix"] and not f["fix"].startswith("Reboot")
    plan = " ".join(ojai("setup", "--root", str(root), *ARGS).stdout.split())
    assert f"run update-initramfs -u -k {REL}, as root" in plan


def test_an_initramfs_built_after_the_modprobe_change_agrees(machine):
    root = _modprobe_machine(machine, conf_newer=False)
    f = ttm_finding(root)
    assert f"initramfs {IMAGE} agrees" in f["evidence"]
    assert "reboot pending" in f["evidence"] or "not applied by ojai" in f["evidence"]


# -- the generated configuration's parsers ---------------------------------------------------


def test_the_default_entry_of_a_real_layout_and_its_kernel():
    cfg = parse_grub_cfg(grub_cfg(f"quiet splash {LIMIT}"))
    entry = default_entry(cfg)
    assert entry.title == "Ubuntu" and kernel_release(entry.kernel) == REL
    assert entry.args[-3:] == ["splash", LIMIT, "$vt_handoff"]
    assert entry.initrd == [IMAGE]


@pytest.mark.parametrize("default,env,title", [
    ('"1>1"', {}, f"Ubuntu, with Linux {REL} (recovery mode)"),
    ('"${saved_entry}"', {"saved_entry": "gnulinux-advanced-0a1b2c3d-0000-4000-8000-000000000001>"
                                          f"gnulinux-{REL}-recovery-0a1b2c3d-0000-4000-8000-000000000001"},
     None),
    # an entry inside the submenu named without its submenu is not found: GRUB boots entry 0
    ('"${saved_entry}"', {"saved_entry": f"gnulinux-{REL}-recovery-0a1b2c3d-0000-4000-8000-000000000001"},
     "Ubuntu"),
    ('"${saved_entry}"', {}, "Ubuntu"),
    ('"7"', {}, "Ubuntu"),
])
def test_set_default_positions_ids_and_saved_entries(default, env, title):
    text = grub_cfg("quiet").replace('   set default="0"', f"   set default={default}")
    entry = default_entry(parse_grub_cfg(text), env)
    if title is None:
        assert "recovery" in entry.title
    else:
        assert entry.title == title


def test_grubenv_next_entry_wins_once():
    env = parse_grubenv("# GRUB Environment Block\nnext_entry=1>0\n" + "#" * 900)
    entry = default_entry(parse_grub_cfg(grub_cfg("quiet")), env)
    assert entry.title == f"Ubuntu, with Linux {REL}"


def test_bls_entries_with_kernelopts_from_grubenv():
    env = {"kernelopts": "root=/dev/mapper/f-root ro rhgb quiet ttm.pages_limit=5"}
    old = parse_bls_entry("abc-6.8.5-301.fc40.x86_64", "title Fedora (6.8.5)\nversion 6.8.5-301.fc40.x86_64\n"
                          "linux /vmlinuz-6.8.5-301.fc40.x86_64\noptions $kernelopts\n", env)
    new = parse_bls_entry("abc-6.11.4-301.fc41.x86_64", "title Fedora (6.11.4)\nversion 6.11.4-301.fc41.x86_64\n"
                          "linux /vmlinuz-6.11.4-301.fc41.x86_64\ninitrd /initramfs-6.11.4-301.fc41.x86_64.img\n"
                          "options root=/dev/f ro ttm.pages_limit=7\n", env)
    assert default_bls_entry([old, new]).name == new.name
    assert default_bls_entry([old, new], {"saved_entry": old.name}).options[-1] == "ttm.pages_limit=5"


def test_grub_words_undo_quotes_and_escapes():
    assert split_words("""linux /vmlinuz 'a b' "c\\"d" e\\ f  # gone""") == ["linux", "/vmlinuz", "a b", 'c"d', "e f"]
