"""Every boot path a Ryzen AI box ships with: the boot path is a fact decided from markers, and
the GPU memory limit goes into what decides the next boot, never a file nothing boots from.

The machines are directories under tests/machines/ built from each distribution's own files
(see their README sections): Arch with systemd-boot and the grub package still installed,
Ubuntu with a UKI built by kernel-install, CachyOS with Limine, Pop!_OS with kernelstub, Fedora
with stale BLS entries, openSUSE, NixOS. The step cases in tests/steps/cases/gpu-memory/ hold
each path's plan as data; these tests apply, roll back, ask doctor, and check the parts."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.root import Root
from ojai_setup.boot.base import Markers
from ojai_setup.boot.detect import decide
from ojai_setup.formats.boot_files import (
    lsinitrd_files,
    default_loader_entry,
    edit_entry_options,
    entry_options,
    parse_limine_conf,
)
from ojai_setup.formats.kernel_cmdline import CmdlineFormatError, edit_params, tokens_of
from ojai_setup.formats.kernelstub import edit_kernel_options, kernel_options
from ojai_setup.formats.limine import assignments, default_cmdline
from ojai_setup.formats.uki import UkiError, read_sections
from tests.support.text import step_text

ARGS = ["--llamacpp", "none", "--no-npu"]
LIMIT = "ttm.pages_limit=12582912"
MACHINES = Path(__file__).parents[1] / "machines"


def ojai(*args: str):
    return CliRunner().invoke(app, list(args))


def ttm_finding(root: Path) -> dict:
    result = ojai("doctor", "--root", str(root), "--json")
    report = json.loads(result.stdout)
    return next(f for f in report["findings"] if f["id"] == "ttm.active"), report


# -- the false success first ----------------------------------------------------------------
def test_arch_with_systemd_boot_never_touches_the_leftover_grub_file(machine):
    """The grub package is installed (so /etc/default/grub and grub-mkconfig exist), systemd-boot
    boots: apply edits the default loader entry only, runs no grub-mkconfig, and the next plan
    is satisfied about that entry; rollback restores it."""
    root = machine("arch-sdboot-leftover-grub")
    grub = (root / "etc/default/grub").read_bytes()
    fallback = (root / "boot/loader/entries/arch-fallback.conf").read_bytes()
    result = ojai("setup", "--root", str(root), "--apply", "--yes", *ARGS)
    assert result.exit_code == 0, result.output
    assert "grub-mkconfig" not in result.output
    assert (root / "etc/default/grub").read_bytes() == grub
    assert not (root / "etc/default/grub.d").exists()
    assert (root / "boot/loader/entries/arch-fallback.conf").read_bytes() == fallback
    assert entry_options((root / "boot/loader/entries/arch.conf").read_text()) == [
        "root=UUID=3b9e61a2-7c4d-4f1e-9a0b-5d2c8e7f1a64", "rw", "quiet", LIMIT]
    again = ojai("setup", "--root", str(root), *ARGS)
    line = step_text(again.output, "gpu-memory")
    assert line.split()[0] == "ok" and "/boot/loader/entries/arch.conf" in line, line
    finding, _ = ttm_finding(root)
    assert "reboot pending" in finding["evidence"]
    assert "grub" not in (finding["fix"] or "").lower()
    back = ojai("rollback", "--root", str(root), "--yes")
    assert back.exit_code == 0, back.output
    assert LIMIT not in (root / "boot/loader/entries/arch.conf").read_text()


def test_arch_doctor_reads_the_entry_not_the_leftover_grub_file(machine):
    """A limit in the leftover /etc/default/grub is not "configured": doctor says what boots."""
    root = machine("arch-sdboot-leftover-grub")
    text = (root / "etc/default/grub").read_text()
    (root / "etc/default/grub").write_text(text.replace('"loglevel=3 quiet"', f'"loglevel=3 quiet {LIMIT}"'))
    finding, report = ttm_finding(root)
    assert finding["evidence"].startswith("GPU memory limit not configured"), finding
    assert "systemd-boot with hand-written entries" in finding["evidence"]
    loader = report["facts"]["boot"]["loader"]
    assert loader["kind"] == "systemd-boot-entries"
    assert any("GRUB did not boot" in c for c in loader["conflicts"])


def test_ubuntu_uki_rebuilds_with_kernel_install_not_update_grub(machine):
    """kernel-install is replayed here and rebuilds nothing, so the image is taken away first
    (with it, the re-plan after applying rightly says the image still lacks the limit)."""
    root = machine("ubuntu-uki-sdboot")
    for image in (root / "boot/efi/EFI/Linux").glob("*.efi"):
        image.unlink()
    grub = (root / "etc/default/grub").read_bytes()
    result = ojai("setup", "--root", str(root), "--apply", "--yes", *ARGS)
    assert result.exit_code == 0, result.output
    assert "kernel-install add 6.17.0-1012-oem" in result.output
    assert "update-grub" not in result.output
    assert (root / "etc/default/grub").read_bytes() == grub
    assert tokens_of((root / "etc/kernel/cmdline").read_text())[-1] == LIMIT
    finding, _ = ttm_finding(root)
    assert "reboot pending" in finding["evidence"], finding


def test_uki_without_the_configured_limit_is_rebuilt_with_kernel_install(machine):
    """Configured in /etc/kernel/cmdline, but the UKI's embedded command line lacks it: doctor
    names kernel-install, setup plans it."""
    root = machine("ubuntu-uki-sdboot")
    cmdline = root / "etc/kernel/cmdline"
    cmdline.write_text(cmdline.read_text().rstrip("\n") + f" {LIMIT}\n")
    finding, _ = ttm_finding(root)
    assert "boots with no ttm.pages_limit" in finding["evidence"], finding
    assert "kernel-install add" in finding["fix"] and "grub" not in finding["fix"]
    plan = ojai("setup", "--root", str(root), *ARGS)
    line = step_text(plan.output, "gpu-memory")
    assert "run kernel-install add 6.17.0-1012-oem" in line, line


@pytest.mark.parametrize("name,kind", [
    ("arch-sdboot-leftover-grub", "systemd-boot-entries"),
    ("ubuntu-uki-sdboot", "uki"),
    ("cachyos-limine", "limine"),
    ("popos-kernelstub", "kernelstub"),
    ("fedora-bls-stale", "grub-bls"),
    ("opensuse-grub", "grub"),
    ("strix-halo-z13-nixos", "nixos"),
    ("ojai-fresh", "grub"),
    ("strix-halo-96g-rocminfo-excerpt", "unknown"),
])
def test_boot_loader_fact_names_the_path_and_its_evidence(name, kind):
    result = ojai("doctor", "--root", str(MACHINES / name), "--json")
    loader = json.loads(result.stdout)["facts"]["boot"]["loader"]
    assert loader["kind"] == kind
    assert loader["evidence"] or loader["conflicts"]


# -- the markers, decided (pure) ------------------------------------------------------------
SD = dict(sd_boot=("/boot",), entries=("/boot/loader/entries/arch.conf",))


@pytest.mark.parametrize("markers,kind", [
    (Markers(cmdline=["root=x"], grub_default=True, **SD,
             default_entry="/boot/loader/entries/arch.conf"), "systemd-boot-entries"),
    (Markers(cmdline=["root=x"], grub_default=True, **SD, kernel_cmdline=True),
     "systemd-boot-kernel-install"),
    # Debian: no /etc/kernel/cmdline, but the entries carry kernel-install's names
    (Markers(cmdline=["root=x"], **SD, ki_entries=("/boot/loader/entries/0123-6.12.conf",)),
     "systemd-boot-kernel-install"),
    (Markers(cmdline=["root=x"], sd_boot=("/efi",), ukis=("/efi/EFI/Linux/a.efi",),
             install_conf=True), "uki"),
    (Markers(cmdline=["root=x"], **SD, kernelstub=True), "kernelstub"),
    (Markers(cmdline=["BOOT_IMAGE=/vmlinuz", "root=x"], grub_default=True), "grub"),
    (Markers(cmdline=["BOOT_IMAGE=/vmlinuz"], grub_default=True, grub_bls=True), "grub-bls"),
    # markers that disagree, or none: unknown
    (Markers(cmdline=["BOOT_IMAGE=/vmlinuz"], grub_default=True, limine_default=True), "unknown"),
    (Markers(cmdline=["root=x"], grub_default=True), "unknown"),
    (Markers(cmdline=["root=x"], **SD, limine_conf=("/boot/limine.conf",)), "unknown"),
    (Markers(cmdline=None, grub_default=True, limine_default=True), "unknown"),
    (Markers(cmdline=None, grub_default=True), "grub"),
    (Markers(cmdline=["root=x"], loader_type="grub2-bls", grub_default=True), "unknown"),
    (Markers(cmdline=["BOOT_IMAGE=x"], loader_type="grub2-efi", grub_default=True), "grub"),
    (Markers(cmdline=["root=x"], loader_type="systemd-boot", **SD),
     "systemd-boot-kernel-install"),
    (Markers(cmdline=["root=x"], nixos="/etc/NIXOS exists", **SD), "nixos"),
])
def test_decide(markers, kind):
    loader = decide(markers)
    assert loader.kind == kind, loader
    if kind == "unknown":
        assert loader.conflicts


def test_loader_conf_default_picks_by_glob_and_menu_order():
    ids = ["arch.conf", "arch-fallback.conf", "fedora-6.9.conf", "fedora-6.10.conf"]
    assert default_loader_entry("arch.conf", ids) == "arch.conf"
    assert default_loader_entry("fedora-*", ids) == "fedora-6.10.conf"
    assert default_loader_entry("nothing*", ids) is None
    assert default_loader_entry(None, ["a-1.conf", "a-2.conf"]) == "a-2.conf"


# -- the formats ----------------------------------------------------------------------------
def test_edit_params_by_key_keeps_everyone_else():
    text = "# made by hand\nroot=UUID=x rw  ttm.pages-limit=1 amdgpu.gttsize=9 quiet\n"
    out = edit_params(text, "ttm.pages_limit", "12582912", ("amdgpu.gttsize", "amdttm.pages_limit"))
    assert out == "# made by hand\nroot=UUID=x rw  ttm.pages_limit=12582912 quiet\n"
    assert edit_params(out, "ttm.pages_limit", "12582912") == out  # a second run changes nothing
    assert edit_params("root=x\n", "ttm.pages_limit", "5") == "root=x ttm.pages_limit=5\n"
    with pytest.raises(CmdlineFormatError, match="CRLF"):
        edit_params("root=x\r\n", "ttm.pages_limit", "5")
    with pytest.raises(CmdlineFormatError, match="quote"):
        edit_params('root=x "a=b\n', "ttm.pages_limit", "5")


def test_entry_options_edit_touches_only_the_options_lines():
    entry = "title A\nlinux /vmlinuz\noptions root=x quiet\noptions amdttm.pages_limit=3\n"
    out = edit_entry_options(entry, "ttm.pages_limit", "7", ("amdttm.pages_limit",), source="e")
    assert out.splitlines()[:3] == ["title A", "linux /vmlinuz", "options root=x quiet"]
    assert entry_options(out) == ["root=x", "quiet", "ttm.pages_limit=7"]
    assert edit_entry_options(out, "ttm.pages_limit", "7", source="e") == out
    assert edit_entry_options("title B\n", "ttm.pages_limit", "7", source="e") == (
        "title B\noptions ttm.pages_limit=7\n")


def test_kernelstub_edit_is_what_kernelstub_would_write():
    text = (MACHINES / "popos-kernelstub/etc/kernelstub/configuration").read_text()
    out = edit_kernel_options(text, "ttm.pages_limit", "12582912", ("amdgpu.gttsize",))
    assert kernel_options(out)[-1] == LIMIT
    assert kernel_options(out)[:-1] == kernel_options(text)
    assert json.loads(out)["default"] == json.loads(text)["default"]
    assert edit_kernel_options(out, "ttm.pages_limit", "12582912") == out
    with pytest.raises(CmdlineFormatError, match="not valid JSON"):
        kernel_options('{"user": {"kernel_options": ["quiet",]}}')


def test_limine_settings_are_read_as_limine_entry_tool_joins_them():
    files = [("/etc/limine-entry-tool.d/10-a.conf", 'KERNEL_CMDLINE[default]+=" a=1 b"\n'),
             ("/etc/default/limine", 'KERNEL_CMDLINE[default]+="root=x quiet"\n'
                                     'KERNEL_CMDLINE[fallback]="root=x"\n')]
    tokens, seen = default_cmdline(files)
    assert seen and [t.text for t in tokens] == ["a=1", "b", "root=x", "quiet"]
    tokens, _ = default_cmdline([*files, ("/etc/default/limine", 'KERNEL_CMDLINE[default]="only"\n')])
    assert [t.text for t in tokens] == ["only"]
    with pytest.raises(CmdlineFormatError, match="quoted literal"):
        assignments('KERNEL_CMDLINE[default]+="$(cat /etc/kernel/cmdline)"\n', "/etc/default/limine")
    entries, default = parse_limine_conf((MACHINES / "cachyos-limine/boot/limine.conf").read_text())
    assert default == 0 and entries[0].title == "linux-cachyos" and "quiet" in entries[0].cmdline
    assert [e.title for e in entries] == ["linux-cachyos", "linux-cachyos (fallback)"]


def test_uki_sections_are_read_from_the_pe_image():
    image = next((MACHINES / "ubuntu-uki-sdboot/boot/efi/EFI/Linux").glob("*.efi")).read_bytes()
    sections = read_sections(image)
    assert sections.uname.strip() == "6.17.0-1012-oem"
    assert tokens_of(sections.cmdline)[-1] == "splash"
    with pytest.raises(UkiError):
        read_sections(b"\x7fELF" + bytes(100))
    with pytest.raises(UkiError):
        read_sections(b"MZ" + bytes(0x3A) + struct.pack("<I", 0x40) + b"XX\0\0")


# -- doctor: three states, each path's own command ------------------------------------------
def test_fedora_stale_entries_are_named_with_the_one_command_that_rewrites_them():
    """One command that can be copied as it is: grub2-mkconfig asked to rewrite the BLS
    entries, not a grubby with a literal `--args=...` placeholder beside it."""
    finding, _ = ttm_finding(MACHINES / "fedora-bls-stale")
    assert "boots with no ttm.pages_limit" in finding["evidence"]
    assert "`sudo grub2-mkconfig -o /boot/grub2/grub.cfg --update-bls-cmdline`" in finding["fix"]
    assert "--args=..." not in finding["fix"] and "grubby" not in finding["fix"]


@pytest.mark.parametrize("name,command", [
    ("cachyos-limine", "limine-update"), ("popos-kernelstub", "kernelstub"),
    ("ubuntu-uki-sdboot", "kernel-install add"), ("opensuse-grub", "grub2-mkconfig"),
])
def test_unconfigured_fix_names_the_paths_own_command(name, command):
    finding, _ = ttm_finding(MACHINES / name)
    assert finding["evidence"].startswith("GPU memory limit not configured")
    assert command in finding["fix"]
    if name != "opensuse-grub":
        assert "grub" not in finding["fix"].lower()


def test_limine_generated_state_is_read_from_limine_conf(machine):
    root = machine("cachyos-limine")
    (root / "etc/limine-entry-tool.d").mkdir()
    (root / "etc/limine-entry-tool.d/99-ojai.conf").write_text(f'KERNEL_CMDLINE[default]+=" {LIMIT}"\n')
    finding, _ = ttm_finding(root)
    assert "/boot/limine.conf (default entry 'linux-cachyos') boots with no" in finding["evidence"]
    assert "limine-update" in finding["fix"]


def test_modprobe_and_command_line_disagree_and_doctor_says_which_wins(machine):
    root = machine("ojai-applied")
    (root / "etc/modprobe.d").mkdir(exist_ok=True)
    (root / "etc/modprobe.d/ttm.conf").write_text("options ttm pages_limit=4194304\n")
    result = ojai("doctor", "--root", str(root), "--json")
    agree = next(f for f in json.loads(result.stdout)["findings"] if f["id"] == "ttm.sources-agree")
    assert "the kernel command line wins" in agree["evidence"]


# -- --root: no host command ----------------------------------------------------------------
def test_grub_defaults_under_a_root_run_no_host_command(machine, tmp_path):
    """Fedora's GRUB_DISTRIBUTOR="$(sed ... /etc/system-release)": under --root, bash runs no
    program of the host; a command the file runs is answered from the root's own capture."""
    from ojai_setup.apply.validate import bash_read_var
    from ojai_setup.facts.grub_env import read_grub_config

    root = machine("fedora-bls-stale")
    marker = tmp_path / "host-command-ran"
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text() + f'GRUB_X="$(touch {marker})"\n'
                    'GRUB_Y="$(echo-from-capture a/b)"\nGRUB_CMDLINE_LINUX_DEFAULT="$GRUB_Y"\n')
    (root / ".ojai/commands/echo-from-capture a%2Fb").mkdir(parents=True)
    (root / ".ojai/commands/echo-from-capture a%2Fb/stdout").write_text("from-capture\n")
    config = read_grub_config(Root(root))
    assert config.error is None, config.error
    assert not marker.exists()
    assert config.tokens[-1] == "from-capture"
    assert bash_read_var(grub, "GRUB_CMDLINE_LINUX_DEFAULT", root=Root(root)) == "from-capture"
    assert not marker.exists()


def test_validator_rejects_a_kernel_cmdline_with_two_limits(tmp_path):
    from ojai_setup.apply.validate import validate_kernel_cmdline
    from ojai_setup.model.actions import CmdlineCheck, WriteFile

    bad = "root=x ttm.pages_limit=1 ttm.pages_limit=2\n"
    candidate = tmp_path / "cmdline"
    candidate.write_text(bad)
    action = WriteFile(path="/etc/kernel/cmdline", before="root=x\n", after=bad,
                       cmdline=CmdlineCheck(param="ttm.pages_limit=2", others=("root=x",)))
    with pytest.raises(ValueError, match="exactly one"):
        validate_kernel_cmdline(candidate, action)


# -- the modprobe.d route, as amd-ttm takes it -----------------------------------------------
REL = "6.17.0-1012-oem"
IMAGE = f"/boot/initrd.img-{REL}"


def fresh_with_initramfs(machine, listing: list[str]) -> Path:
    """ojai-fresh with a grub.cfg that boots IMAGE, and lsinitramfs's listing of it."""
    from support.machine_state import store_capture

    from ojai_setup.core.root import CommandResult

    root = machine("ojai-fresh")
    cfg = (Path(__file__).parents[1] / "data/boot/ubuntu-24.04-grub.cfg").read_text()
    (root / "boot/grub").mkdir(parents=True)
    (root / "boot/grub/grub.cfg").write_text(cfg.replace("@ARGS@", "quiet splash"))
    (root / f"boot/vmlinuz-{REL}").write_bytes(b"")
    (root / IMAGE.lstrip("/")).write_bytes(b"")
    store_capture(root, CommandResult(("lsinitramfs", IMAGE), 0, "\n".join([IMAGE, *listing]) + "\n"))
    store_capture(root, CommandResult(("update-initramfs", "-u", "-k", "all"), 0, ""))
    return root


@pytest.mark.parametrize("carries,rebuilds", [(True, True), (False, False)])
def test_modprobe_route_rebuilds_the_initramfs_only_when_it_carries_ttm(machine, carries, rebuilds):
    listing = ["usr/lib/modules/6.17.0-1012-oem/kernel/drivers/gpu/drm/drm.ko.zst"]
    if carries:
        # the replayed listing is what the rebuilt image holds: ttm and ojai's file, built
        # after it (the re-plan after applying checks exactly that)
        listing += ["usr/lib/modules/6.17.0-1012-oem/kernel/drivers/gpu/drm/ttm/ttm.ko.zst",
                    "etc/modprobe.d/99-ojai-ttm.conf"]
    root = fresh_with_initramfs(machine, listing)
    later = time.time() + 86400
    os.utime(root / IMAGE.lstrip("/"), (later, later))
    grub = (root / "etc/default/grub").read_bytes()
    result = ojai("setup", "--root", str(root), "--ttm-via", "modprobe", "--apply", "--yes", *ARGS)
    assert result.exit_code == 0, result.output
    assert ("update-initramfs -u -k all" in result.output) is rebuilds, result.output
    assert (root / "etc/default/grub").read_bytes() == grub
    assert (root / "etc/modprobe.d/99-ojai-ttm.conf").read_text().splitlines()[-1] == (
        "options ttm pages_limit=12582912")
    again = ojai("setup", "--root", str(root), "--ttm-via", "modprobe", *ARGS)
    line = step_text(again.output, "gpu-memory")
    assert line.split()[0] == "ok" and "/etc/modprobe.d/99-ojai-ttm.conf" in line, line
    back = ojai("rollback", "--root", str(root), "--yes")
    assert back.exit_code == 0, back.output
    assert not (root / "etc/modprobe.d/99-ojai-ttm.conf").exists()


def test_ttm_via_rejects_an_unknown_route():
    result = ojai("setup", "--root", str(MACHINES / "ojai-fresh"), "--ttm-via", "grub", *ARGS)
    assert result.exit_code == 64, result.output
    assert "--ttm-via" in result.output


@pytest.mark.parametrize("line", ['GRUB_X="$(/usr/bin/sed -n 1p /etc/hostname)"',
                                  ". /etc/default/grub-extra", "GRUB_Y=`/bin/true`"])
def test_grub_defaults_naming_host_paths_are_refused_under_a_root(machine, line):
    from ojai_setup.facts.grub_env import read_grub_config

    root = machine("ojai-fresh")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text() + line + "\n")
    config = read_grub_config(Root(root))
    assert config.error and "absolute" in config.error


def test_debian_kernel_install_entries_without_etc_kernel_cmdline(machine):
    """Debian's systemd-boot: kernel-install names the entries <machine-id>-<kver>.conf and,
    with no /etc/kernel/cmdline, takes /proc/cmdline; ojai makes the file from the running
    command line and passes Debian's kernel and initrd, as its zz-systemd-boot hook does."""
    from support.context import OFFLINE

    from ojai_setup.model.settings import Settings
    from ojai_setup.planning.gather import gather
    from ojai_setup.steps.ttm import TtmStep

    root = machine("arch-sdboot-leftover-grub")
    (root / "etc/machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    entries = root / "boot/loader/entries"
    (entries / "arch.conf").rename(entries / "0123456789abcdef0123456789abcdef-6.17.9-arch1-1.conf")
    (root / "boot/loader/loader.conf").write_text("timeout 3\n")
    (root / "boot/vmlinuz-6.17.9-arch1-1").write_bytes(b"")
    (root / "boot/initrd.img-6.17.9-arch1-1").write_bytes(b"")
    (root / ".ojai/commands/kernel-install").mkdir()
    ctx = gather(Root(root), Settings(llamacpp="none", npu=False), remote=OFFLINE)
    assert ctx.facts.boot.loader.kind == "systemd-boot-kernel-install"
    result = TtmStep().plan(ctx)
    assert [a.path for a in result.actions] == ["/etc/kernel/cmdline"]
    assert result.actions[0].after == ("root=UUID=3b9e61a2-7c4d-4f1e-9a0b-5d2c8e7f1a64 rw quiet "
                                       f"{LIMIT}\n")
    assert [h.argv for h in result.handlers.values()] == [
        ("kernel-install", "add", "6.17.9-arch1-1", "/boot/vmlinuz-6.17.9-arch1-1",
         "/boot/initrd.img-6.17.9-arch1-1")]


def test_kernelstub_entry_without_the_configured_limit_names_kernelstub(machine):
    root = machine("popos-kernelstub")
    config = root / "etc/kernelstub/configuration"
    config.write_text(edit_kernel_options(config.read_text(), "ttm.pages_limit", "12582912"))
    finding, _ = ttm_finding(root)
    assert "Pop_OS-current.conf (default entry 'Pop!_OS') boots with no" in finding["evidence"]
    assert "kernelstub --verbose --preserve-live-mode" in finding["fix"]
    plan = ojai("setup", "--root", str(root), *ARGS)
    line = step_text(plan.output, "gpu-memory")
    assert "run kernelstub --verbose --preserve-live-mode" in line, line


def test_nomodeset_fix_speaks_of_the_boot_path_not_grub(machine):
    root = machine("arch-sdboot-leftover-grub")
    (root / "proc/cmdline").write_text((root / "proc/cmdline").read_text().replace(" rw", " rw nomodeset"))
    result = ojai("doctor", "--root", str(root), "--json")
    finding = next(f for f in json.loads(result.stdout)["findings"] if f["id"] == "kernel.nomodeset")
    assert "grub" not in finding["fix"].lower() and "options line" in finding["fix"], finding


def test_kernel_cmdline_is_made_from_usr_lib_kernel_cmdline_when_the_distribution_ships_one(machine):
    """kernel-install reads /usr/lib/kernel/cmdline before /proc/cmdline: the new
    /etc/kernel/cmdline starts from it."""
    from support.context import OFFLINE

    from ojai_setup.model.settings import Settings
    from ojai_setup.planning.gather import gather
    from ojai_setup.steps.ttm import TtmStep

    root = machine("arch-sdboot-leftover-grub")
    (root / "etc/kernel").mkdir()
    (root / "etc/kernel/install.conf").write_text("layout=bls\n")
    (root / "usr/lib/kernel").mkdir(parents=True)
    (root / "usr/lib/kernel/cmdline").write_text("root=LABEL=os rw\n")
    (root / ".ojai/commands/kernel-install").mkdir()
    ctx = gather(Root(root), Settings(llamacpp="none", npu=False), remote=OFFLINE)
    result = TtmStep().plan(ctx)
    assert [(a.path, a.before, a.after) for a in result.actions] == [
        ("/etc/kernel/cmdline", None, f"root=LABEL=os rw {LIMIT}\n")]
    assert "/usr/lib/kernel/cmdline" in result.sentence


def test_loader_info_efi_variable_decides_between_loaders_that_left_files(machine):
    """systemd-boot's LoaderInfo says it booted this kernel: Limine's leftover files then
    decide nothing (without it, the two would leave the path unknown)."""
    from ojai_setup.facts.boot import LOADER_GUID, read_loader

    root = machine("arch-sdboot-leftover-grub")
    (root / "etc/default/limine").write_text('KERNEL_CMDLINE[default]+="root=x"\n')
    assert read_loader(Root(root), ["root=x"]).kind == "unknown"
    var = root / f"sys/firmware/efi/efivars/LoaderInfo-{LOADER_GUID}"
    var.parent.mkdir(parents=True)
    var.write_bytes(b"\x06\x00\x00\x00" + "systemd-boot 257.9-1\0".encode("utf-16-le"))
    loader = read_loader(Root(root), ["root=x"])
    assert loader.kind == "systemd-boot-entries"
    assert any("systemd-boot 257.9-1" in e for e in loader.evidence)
    assert any("Limine" in c for c in loader.conflicts)
    assert read_loader(Root(root), ["BOOT_IMAGE=/vmlinuz-linux", "root=x"]).kind == "unknown"


def test_every_boot_path_has_a_planner_and_words_for_people():
    from typing import get_args

    from ojai_setup.boot.base import BootPath
    from ojai_setup.boot.table import PATHS
    from ojai_setup.model.facts import LoaderKind

    assert set(PATHS) == set(get_args(LoaderKind))
    for kind, path in PATHS.items():  # its own planner, and words for people
        assert path.kind == kind and path.title and path.edits and path.runs, kind
        assert type(path).plan is not BootPath.plan, kind


def test_rollback_of_a_created_kernel_cmdline_writes_it_back_without_the_limit(machine):
    """kernel-install takes /proc/cmdline when /etc/kernel/cmdline is missing, and after the
    reboot /proc/cmdline carries the limit: a rollback that removed the file ojai created would
    have its own `kernel-install add` write the limit straight back into the entries. It writes
    the file back as the running command line read before the apply instead, and the
    follow-up runs on that."""
    root = machine("arch-sdboot-leftover-grub")
    (root / "etc/kernel").mkdir()
    (root / "etc/kernel/install.conf").write_text("layout=bls\n")
    replay = root / ".ojai/commands" / ("kernel-install add 6.17.9-arch1-1 "
                                        "%2Fusr%2Flib%2Fmodules%2F6.17.9-arch1-1%2Fvmlinuz")
    replay.mkdir(parents=True)
    (replay / "stdout").write_text("")
    # the replayed kernel-install writes no entry: with the old ones gone, the re-plan after
    # applying does not read a stale one
    for entry in (root / "boot/loader/entries").glob("*.conf"):
        entry.unlink()
    original = "root=UUID=3b9e61a2-7c4d-4f1e-9a0b-5d2c8e7f1a64 rw quiet"
    applied = ojai("setup", "--root", str(root), "--apply", "--yes", *ARGS)
    assert applied.exit_code == 0, applied.output
    assert tokens_of((root / "etc/kernel/cmdline").read_text()) == [*original.split(), LIMIT]
    # the reboot: the entries kernel-install wrote now boot with the limit
    cmdline = root / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().rstrip("\n") + f" {LIMIT}\n")

    preview = ojai("rollback", "--root", str(root))
    assert "written back without the apply's change" in preview.output, preview.output
    back = ojai("rollback", "--root", str(root), "--yes")
    assert back.exit_code == 0, back.output
    assert "kernel-install" in back.output, back.output
    assert (root / "etc/kernel/cmdline").read_text() == original + "\n"
    again = ojai("rollback", "--root", str(root), "--yes")
    assert again.exit_code == 0 and "nothing to roll back" in again.output, again.output


DEB_REL = "6.1.0-50-amd64"
DEB_MID = "16e105145e2343f784ff6eacac81bd0d"
BOOT_DATA = Path(__file__).parents[1] / "data/boot"


def debian_dracut_sdboot(machine, listing: str) -> Path:
    """Debian 12 with systemd-boot, kernel-install's type 1 entry (its initramfs copied to the
    ESP as ``<machine-id>/<release>/initrd.img-<release>``) and dracut 059 in place of
    initramfs-tools; ``lsinitrd`` of the ESP's copy replays ``listing`` (tests/data/boot)."""
    from support.machine_state import store_capture

    from ojai_setup.core.root import CommandResult

    root = machine("arch-sdboot-leftover-grub")
    (root / "etc/machine-id").write_text(DEB_MID + "\n")
    entries = root / "boot/loader/entries"
    for old in entries.iterdir():
        old.unlink()
    (entries / f"{DEB_MID}-{DEB_REL}.conf").write_text(
        (BOOT_DATA / "debian12-kernel-install-entry.conf").read_text())
    (root / "boot/loader/loader.conf").write_text("timeout 3\n")
    (root / "proc/cmdline").write_text(f"root=UUID=x ro console=ttyS0 systemd.machine_id={DEB_MID}\n")
    (root / "proc/sys/kernel/osrelease").write_text(DEB_REL + "\n")
    esp_copy = f"/boot/{DEB_MID}/{DEB_REL}/initrd.img-{DEB_REL}"
    for path in (f"/boot/vmlinuz-{DEB_REL}", f"/boot/initrd.img-{DEB_REL}", esp_copy):
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_bytes(b"")
    store_capture(root, CommandResult(("lsinitrd", esp_copy), 0, (BOOT_DATA / listing).read_text()))
    for argv in (("dracut", "--force", f"/boot/initrd.img-{DEB_REL}", DEB_REL),
                 ("kernel-install", "add", DEB_REL, f"/boot/vmlinuz-{DEB_REL}",
                  f"/boot/initrd.img-{DEB_REL}")):
        store_capture(root, CommandResult(argv, 0, ""))
    return root


def test_dracut_on_kernel_install_rebuilds_the_initramfs_the_entry_loads(machine):
    """The entry loads the ESP's initrd.img-R, which kernel-install copied from
    /boot/initrd.img-R. ``dracut --regenerate-all`` reaches neither (with the ESP's
    <machine-id> folder there it writes <machine-id>/R/initrd, which no entry loads), so the
    limit in /etc/modprobe.d would never reach the ttm that loads from the initramfs: the
    rebuild is /boot/initrd.img-R, then kernel-install add copies it to the ESP."""
    from support.context import OFFLINE

    from ojai_setup.model.settings import Settings
    from ojai_setup.planning.gather import gather
    from ojai_setup.steps.ttm import TtmStep

    root = debian_dracut_sdboot(machine, "debian12-dracut-059-lsinitrd-drm.txt")
    # the replayed listing is what the rebuilt image holds: ttm and ojai's file, built after
    # it (the re-plan after applying checks exactly that)
    esp_copy = root / f"boot/{DEB_MID}/{DEB_REL}/initrd.img-{DEB_REL}"
    listing = next((root / ".ojai/commands").glob("lsinitrd *")) / "stdout"
    listing.write_text(listing.read_text() + "-rw-r--r--   1 root     root           "
                       "98 Dec  2 13:05 etc/modprobe.d/99-ojai-ttm.conf\n")
    later = time.time() + 86400
    os.utime(esp_copy, (later, later))
    ctx = gather(Root(root), Settings(llamacpp="none", npu=False, ttm_via="modprobe"),
                 remote=OFFLINE)
    assert ctx.facts.boot.loader.kind == "systemd-boot-kernel-install"
    assert ctx.facts.boot.initramfs.carries_ttm is True, ctx.facts.boot.initramfs
    result = TtmStep().plan(ctx)
    # Debian's dracut builds without host-only, where it leaves /etc/modprobe.d out of the
    # image: ojai's dracut.conf.d drop-in names the file (the UEFI guest's rebuild proved it)
    assert [a.path for a in result.actions] == ["/etc/modprobe.d/99-ojai-ttm.conf",
                                                "/etc/dracut.conf.d/99-ojai-ttm.conf"]
    assert 'install_items+=" /etc/modprobe.d/99-ojai-ttm.conf "' in result.actions[1].after
    assert [h.argv for h in result.handlers.values()] == [
        ("dracut", "--force", f"/boot/initrd.img-{DEB_REL}", DEB_REL),
        ("kernel-install", "add", DEB_REL, f"/boot/vmlinuz-{DEB_REL}", f"/boot/initrd.img-{DEB_REL}")]
    assert all(a.notify == tuple(result.handlers) for a in result.actions)
    applied = ojai("setup", "--root", str(root), "--ttm-via", "modprobe", "--apply", "--yes", *ARGS)
    assert applied.exit_code == 0, applied.output
    assert "kernel-install add" in applied.output and "--regenerate-all" not in applied.output


def test_dracut_image_without_ttm_needs_no_rebuild_on_kernel_install(machine):
    """Debian's dracut leaves the drm module (and so ttm) out of the image unless asked: ttm
    loads from the root file system and reads /etc/modprobe.d there, so nothing is rebuilt."""
    root = debian_dracut_sdboot(machine, "debian12-dracut-059-lsinitrd.txt")
    result = ojai("setup", "--root", str(root), "--ttm-via", "modprobe", *ARGS)
    line = step_text(result.output, "gpu-memory")
    assert line.split()[0] == "change", line
    assert "does not carry ttm" in line and "no rebuild" in line, line
    assert "dracut" not in line and "kernel-install" not in line, line


def test_lsinitrd_files_splits_what_dracuts_lsinitrd_printed_for_several_files():
    """The real output of dracut 059's lsinitrd for three -f (tests/data/boot): each file by
    its name, whole; the one the image lacks (empty) left out; one -f is the bare contents."""
    out = (BOOT_DATA / "debian12-dracut-059-lsinitrd-f-three.txt").read_text()
    asked = ["/usr/lib/modprobe.d/aliases.conf", "/usr/lib/modprobe.d/fbdev-blacklist.conf",
             "/etc/modprobe.d/nothing.conf"]
    files = dict(lsinitrd_files(out, asked))
    assert sorted(files) == sorted(asked[:2])
    aliases = files["/usr/lib/modprobe.d/aliases.conf"]
    assert aliases.startswith("# These are the standard aliases and dependencies.\n")
    assert aliases.endswith("softdep ohci-hcd pre: ehci-hcd\n\n") and "=====" not in aliases
    blacklist = files["/usr/lib/modprobe.d/fbdev-blacklist.conf"]
    assert blacklist.splitlines()[-1] == "blacklist vt8623fb", blacklist
    # byte for byte: the sizes the same image's listing gives (624 and 390 bytes)
    assert [len(aliases.encode()), len(blacklist.encode())] == [624, 390]
    assert lsinitrd_files("options ttm pages_limit=7\n", ["/etc/modprobe.d/a.conf"]) == [
        ("/etc/modprobe.d/a.conf", "options ttm pages_limit=7\n")]
    assert lsinitrd_files("", ["/etc/modprobe.d/a.conf"]) == []


def test_dracut_image_limit_is_read_with_one_lsinitrd_run_and_a_stale_one_is_rebuilt(machine):
    """Every modprobe.d file inside a dracut image comes out of one ``lsinitrd -f ... -f ...``
    (lsinitrd unpacks the image once for all; one run a file unpacks it again each time, 80 s
    a time for a generic image under qemu's TCG), and the limit found there decides: an image
    holding an older limit than /etc/modprobe.d is rebuilt and copied to the ESP."""
    from support.context import OFFLINE
    from support.machine_state import store_capture

    from ojai_setup.core.root import CommandResult
    from ojai_setup.model.settings import Settings
    from ojai_setup.planning.gather import gather
    from ojai_setup.steps.ttm import TtmStep

    root = debian_dracut_sdboot(machine, "debian12-dracut-059-lsinitrd-drm.txt")
    pages, old = 262144, 131072
    (root / "etc/modprobe.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/modprobe.d/99-ojai-ttm.conf").write_text(f"options ttm pages_limit={pages}\n")
    listing = next((root / ".ojai/commands").glob("lsinitrd *")) / "stdout"
    listing.write_text(listing.read_text() + "-rw-r--r--   1 root     root           "
                       "98 Dec  2 13:05 etc/modprobe.d/99-ojai-ttm.conf\n")
    inside = ["/etc/modprobe.d/99-ojai-ttm.conf", "/usr/lib/modprobe.d/aliases.conf",
              "/usr/lib/modprobe.d/fbdev-blacklist.conf", "/usr/lib/modprobe.d/systemd.conf"]
    rule = "=" * 72
    shown = "".join(f"initramfs:{p}\n{rule}\n{text}{rule}\n\n" for p, text in (
        (inside[2], "blacklist arkfb\n"), (inside[0], f"options ttm pages_limit={old}\n"),
        (inside[1], "options snd-pcsp index=-2\n"), (inside[3], "options bonding max_bonds=0\n")))
    esp_copy = f"/boot/{DEB_MID}/{DEB_REL}/initrd.img-{DEB_REL}"
    store_capture(root, CommandResult(
        ("lsinitrd", *(a for p in inside for a in ("-f", p.lstrip("/"))), esp_copy), 0, shown))
    ctx = gather(Root(root), Settings(llamacpp="none", npu=False, ttm_via="modprobe",
                                      gpu_memory_gib=1), remote=OFFLINE)
    found = ctx.facts.boot.initramfs
    assert found.modprobe_files == inside and found.pages == old, found
    result = TtmStep().plan(ctx)
    assert result.status == "change" and "was built without it" in result.sentence, result
    # the whole plan holds together (every notified follow-up is one of the plan's), and its
    # review names the drop-in and the commands after it
    planned = ojai("setup", "--root", str(root), "--ttm-via", "modprobe", "--gpu-memory", "1",
                   *ARGS)
    assert planned.exit_code == 2, planned.output
    line = " ".join(step_text(planned.output, "gpu-memory").split())
    assert "was built without it" in line and "/etc/dracut.conf.d/99-ojai-ttm.conf" in line, line
    assert f"dracut --force /boot/initrd.img-{DEB_REL} {DEB_REL}" in line, line
    (dropin,) = result.actions
    assert (dropin.path, dropin.before) == ("/etc/dracut.conf.d/99-ojai-ttm.conf", None)
    assert 'install_items+=" /etc/modprobe.d/99-ojai-ttm.conf "' in dropin.after
    assert dropin.notify == tuple(result.handlers)
    assert [h.argv for h in result.handlers.values()] == [
        ("dracut", "--force", f"/boot/initrd.img-{DEB_REL}", DEB_REL),
        ("kernel-install", "add", DEB_REL, f"/boot/vmlinuz-{DEB_REL}",
         f"/boot/initrd.img-{DEB_REL}")]


def test_a_capture_of_a_long_command_has_a_name_a_file_system_takes(tmp_path):
    """A command line longer than a file name (255 bytes) is stored and replayed under its
    first 222 bytes and a digest of the whole: two such commands that share the beginning
    do not share a capture."""
    from support.machine_state import store_capture

    from ojai_setup.core.root import CommandResult, command_key

    files = [f"-f usr/lib/modprobe.d/file-{i:02d}.conf" for i in range(12)]
    a = ("lsinitrd", *" ".join(files).split(), "/boot/initrd.img-6.1.0-50-amd64")
    b = (*a[:-1], "/boot/initrd.img-6.1.0-51-amd64")
    assert len(" ".join(a)) > 255
    keys = {command_key(a), command_key(b)}
    assert len(keys) == 2 and all(len(k.encode()) <= 240 for k in keys), keys
    assert command_key(a) == command_key(list(a))
    assert command_key(("lsinitrd", "/boot/x")) == "lsinitrd %2Fboot%2Fx"  # short ones as before
    store_capture(tmp_path, CommandResult(a, 0, "first\n"))
    store_capture(tmp_path, CommandResult(b, 0, "second\n"))
    root = Root(tmp_path)
    assert [root.run(list(argv)).stdout for argv in (a, b)] == ["first\n", "second\n"]
