"""Which boot path decides the next boot's kernel command line: a fact decided from markers.

Like distro's ``id()``, the boot path is decided once, from the machine's own markers, and
every step and finding asks the fact (``boot.loader``), never a file's mere existence: a
leftover ``/etc/default/grub`` (the ``grub`` package still installed on a machine that boots
systemd-boot) decides nothing.

The markers (read by :func:`ojai_setup.facts.boot.read_markers`, claimed by each path's
:meth:`~ojai_setup.boot.base.BootPath.claim`, decided here, pure):

- ``/proc/cmdline``: GRUB's ``linux`` command always passes ``BOOT_IMAGE=<kernel>``;
  systemd-boot, Limine, kernelstub's EFI stub entries and UKIs pass none. So a running command
  line without it says that GRUB did not boot this kernel, whatever files GRUB left behind;
- GRUB: ``/etc/default/grub`` (``GRUB_ENABLE_BLSCFG=true``: the BLS entries of Fedora/RHEL)
  and ``grub.cfg``;
- systemd-boot: ``loader/loader.conf`` or ``EFI/systemd/`` on an ESP (``/boot``, ``/efi``,
  ``/boot/efi``, or where ``bootctl --print-esp-path`` says); its ``LoaderInfo`` EFI variable
  (what ``bootctl status`` reads) says it booted the running kernel; kernel-install manages it where ``/etc/kernel/cmdline`` or
  ``/etc/kernel/install.conf`` exists, or an entry carries kernel-install's name
  (``<entry token or machine id>-<kver>.conf``, as on Debian where kernel-install falls back to
  /proc/cmdline); ``layout=uki``, or UKIs in ``EFI/Linux/`` and no type 1 entries: unified
  kernel images; else the entries are hand-written;
- Limine: ``limine.conf`` on ``/boot`` or an ESP, ``/etc/default/limine``;
- kernelstub (Pop!_OS): ``/etc/kernelstub/configuration`` (it also writes systemd-boot's
  entries, so it outweighs them);
- NixOS: ``/etc/NIXOS`` (the command line comes from the NixOS configuration);
- openSUSE: ``LOADER_TYPE`` in ``/etc/sysconfig/bootloader`` (``grub2``, ``grub2-efi``,
  ``grub2-bls``, ``systemd-boot``).

Two paths that both claim the machine, or none at all, give ``unknown`` with what was seen:
the TTM step is then blocked rather than editing a file that may decide nothing.
"""

from __future__ import annotations

from ojai_setup.boot.base import Claim, Markers
from ojai_setup.boot.grub import evidence as grub_evidence
from ojai_setup.boot.kernel_install import KERNEL_CMDLINE
from ojai_setup.boot.nixos import NIXOS, NIXOS_CONFIG
from ojai_setup.boot.table import PATHS
from ojai_setup.core.paths import GRUB_DEFAULT
from ojai_setup.model.facts import BootLoader, LoaderKind

SYSCONFIG_BOOTLOADER = "/etc/sysconfig/bootloader"
#: openSUSE's LOADER_TYPE -> the boot path
SUSE_LOADERS: dict[str, LoaderKind] = {
    "grub2": "grub", "grub2-efi": "grub", "grub2-bls": "grub-bls",
    "systemd-boot": "systemd-boot-kernel-install"}


def claims(m: Markers) -> list[Claim]:
    """The claims of every path but GRUB's on the machine, less those a claiming path outweighs
    (kernelstub and kernel-install write the systemd-boot entries themselves)."""
    found = [c for p in PATHS.values() if (c := p.claim(m)) is not None]
    outweighed = {k for c in found for k in PATHS[c.kind].outweighs}
    return [c for c in found if c.kind not in outweighed]


def _suse(m: Markers, booted: bool | None) -> BootLoader:
    """openSUSE says its boot path in /etc/sysconfig/bootloader."""
    kind = SUSE_LOADERS.get(m.loader_type or "")
    why = f"{SYSCONFIG_BOOTLOADER} says LOADER_TYPE={m.loader_type}"
    if kind is None:
        return BootLoader(kind="unknown", conflicts=[why + ", which ojai does not know"],
                          loader_type=m.loader_type)
    conflicts = []
    if booted is True and not kind.startswith("grub"):
        conflicts.append("/proc/cmdline carries BOOT_IMAGE=, GRUB's mark")
    if booted is False and kind.startswith("grub"):
        conflicts.append("/proc/cmdline carries no BOOT_IMAGE=, which GRUB always passes")
    if conflicts:
        return BootLoader(kind="unknown", evidence=[why], conflicts=conflicts,
                          loader_type=m.loader_type)
    return BootLoader(kind=kind, evidence=[why], loader_type=m.loader_type,
                      config=GRUB_DEFAULT if kind.startswith("grub") else KERNEL_CMDLINE,
                      esp=m.sd_boot[0] if m.sd_boot and not kind.startswith("grub") else None)


def _not_grub(m: Markers, others: list[Claim], esp: str | None) -> BootLoader:
    """/proc/cmdline carries no BOOT_IMAGE=: GRUB did not boot this kernel."""
    leftover = ([f"{GRUB_DEFAULT} exists, but /proc/cmdline carries no BOOT_IMAGE= (GRUB "
                 "always passes it): GRUB did not boot this kernel"] if m.grub_default else [])
    if m.loader_info and len(others) > 1:
        # what booted this kernel decides between the loaders that left files
        chosen = [o for o in others if PATHS[o.kind].systemd_boot]
        if len(chosen) == 1:
            kind, why, config = chosen[0]
            return BootLoader(kind=kind, evidence=[
                f"the LoaderInfo EFI variable says {m.loader_info} booted this kernel", why],
                conflicts=[w for k, w, _ in others if not PATHS[k].systemd_boot] + leftover,
                config=config, esp=esp)
    if len(others) == 1:
        kind, why, config = others[0]
        evidence = ["/proc/cmdline carries no BOOT_IMAGE=", why]
        if m.loader_info and PATHS[kind].systemd_boot:
            evidence.append(f"the LoaderInfo EFI variable says {m.loader_info} booted it")
        return BootLoader(kind=kind, evidence=evidence, conflicts=leftover, config=config,
                          esp=esp)
    if others:
        return BootLoader(kind="unknown", evidence=["/proc/cmdline carries no BOOT_IMAGE="],
                          conflicts=[why for _, why, _ in others] + leftover)
    return BootLoader(kind="unknown", conflicts=leftover or [
        "no boot loader ojai knows left a mark (no BOOT_IMAGE= on /proc/cmdline, no "
        "systemd-boot, Limine, kernelstub or NixOS files)"])


def decide(m: Markers) -> BootLoader:
    """The boot path from the markers, with the evidence that decided and what disagreed."""
    if m.nixos:
        return BootLoader(kind="nixos", evidence=[NIXOS.evidence(m.nixos)], config=NIXOS_CONFIG)
    grub_kind, grub_why = grub_evidence(m)
    others = claims(m)
    booted = None if m.cmdline is None else any(t.startswith("BOOT_IMAGE=") for t in m.cmdline)
    if m.loader_type:
        return _suse(m, booted)
    esp = m.sd_boot[0] if m.sd_boot else None
    if booted:
        evidence = ["/proc/cmdline carries BOOT_IMAGE=: GRUB booted this kernel", *grub_why]
        if others:
            return BootLoader(kind="unknown", evidence=evidence,
                              conflicts=[why for _, why, _ in others])
        return BootLoader(kind=grub_kind, evidence=evidence,
                          config=GRUB_DEFAULT if m.grub_default else None)
    if booted is False:
        return _not_grub(m, others, esp)
    # /proc/cmdline unknown (a capture without it): the files alone
    candidates = list(others) + ([Claim(grub_kind, "; ".join(grub_why),
                                        GRUB_DEFAULT if m.grub_default else None)]
                                 if grub_why else [])
    if len(candidates) == 1:
        kind, why, config = candidates[0]
        return BootLoader(kind=kind, evidence=[why, "/proc/cmdline could not be read"],
                          config=config, esp=esp if not kind.startswith("grub") else None)
    return BootLoader(kind="unknown", conflicts=[why for _, why, _ in candidates] or [
        "/proc/cmdline could not be read and no boot loader ojai knows left a file"])
