"""Which boot path decides the next boot's kernel command line: a fact decided from markers.

Like distro's ``id()``, the boot path is decided once, from the machine's own markers, and
every step and finding asks the fact (``boot.loader``), never a file's mere existence: a
leftover ``/etc/default/grub`` (the ``grub`` package still installed on a machine that boots
systemd-boot) decides nothing.

The markers (read by :func:`ojai_setup.facts.boot.read_markers`, decided here, pure):

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

from typing import NamedTuple

from ojai_setup.core.paths import GRUB_DEFAULT
from ojai_setup.model.facts import BootLoader

KERNEL_CMDLINE = "/etc/kernel/cmdline"
INSTALL_CONF = "/etc/kernel/install.conf"
LIMINE_DEFAULT = "/etc/default/limine"
KERNELSTUB_CONFIG = "/etc/kernelstub/configuration"
SYSCONFIG_BOOTLOADER = "/etc/sysconfig/bootloader"
#: openSUSE's LOADER_TYPE -> the boot path
SUSE_LOADERS = {"grub2": "grub", "grub2-efi": "grub", "grub2-bls": "grub-bls",
                "systemd-boot": "systemd-boot-kernel-install"}


class Markers(NamedTuple):
    """What the machine shows about its boot path (machine paths; None: not there)."""

    cmdline: list[str] | None = None  # /proc/cmdline, None when unknown
    grub_default: bool = False
    grub_bls: bool = False
    grub_cfg: str | None = None
    #: ESP folders with systemd-boot (loader/loader.conf or EFI/systemd/)
    sd_boot: tuple[str, ...] = ()
    #: type 1 entries (loader/entries/*.conf) on those ESPs, and UKIs (EFI/Linux/*.efi)
    entries: tuple[str, ...] = ()
    ukis: tuple[str, ...] = ()
    #: an entry named ``<entry token>-<kver>.conf`` (the token: /etc/kernel/entry-token, else
    #: the machine id), as kernel-install's 90-loaderentry.install names them
    ki_entries: tuple[str, ...] = ()
    kernel_cmdline: bool = False  # /etc/kernel/cmdline exists
    install_conf: bool = False
    layout: str | None = None  # install.conf's layout=
    limine_conf: tuple[str, ...] = ()
    limine_default: bool = False
    kernelstub: bool = False
    nixos: str | None = None  # the marker that says NixOS
    loader_type: str | None = None  # openSUSE
    #: the default hand-written entry (loader.conf's ``default``, else the first), if any
    default_entry: str | None = None
    #: systemd-boot's LoaderInfo EFI variable ("systemd-boot 252"): it booted this kernel
    loader_info: str | None = None


def _systemd_boot(m: Markers) -> tuple[str, str, str | None] | None:
    """(kind, why, config) when systemd-boot markers are there."""
    if not m.sd_boot:
        return None
    where = ", ".join(m.sd_boot)
    if m.layout == "uki" or (m.ukis and not m.entries and (m.kernel_cmdline or m.install_conf)):
        why = (f"systemd-boot on {where}; "
               + (f"{INSTALL_CONF} says layout=uki" if m.layout == "uki"
                  else f"unified kernel images in EFI/Linux ({', '.join(m.ukis)}) and no type 1 "
                  "entries")
               + f"; kernel-install embeds {KERNEL_CMDLINE} in the image it builds")
        return "uki", why, KERNEL_CMDLINE
    if m.kernel_cmdline or m.install_conf or m.ki_entries:
        named = (f"{KERNEL_CMDLINE} exists" if m.kernel_cmdline else
                 f"{INSTALL_CONF} exists" if m.install_conf else
                 f"{m.ki_entries[0]} is named <entry token>-<kernel>.conf")
        return ("systemd-boot-kernel-install",
                f"systemd-boot on {where}; {named}: kernel-install writes the entries",
                KERNEL_CMDLINE)
    if m.entries:
        return ("systemd-boot-entries",
                f"systemd-boot on {where} with loader entries and no {KERNEL_CMDLINE} or "
                f"{INSTALL_CONF}: the entries are written by hand", m.default_entry)
    return None


def decide(m: Markers) -> BootLoader:  # noqa: C901
    """The boot path from the markers, with the evidence that decided and what disagreed."""
    if m.nixos:
        return BootLoader(kind="nixos", evidence=[f"{m.nixos}: the kernel command line comes "
                          "from the NixOS configuration (boot.kernelParams)"],
                          config="/etc/nixos/configuration.nix")
    grub_kind = "grub-bls" if m.grub_bls else "grub"
    grub_why = [f"{GRUB_DEFAULT} exists" + (" (GRUB_ENABLE_BLSCFG=true: BLS entries)"
                                            if m.grub_bls else "")] if m.grub_default else []
    if m.grub_cfg:
        grub_why.append(f"{m.grub_cfg} exists")
    others: list[tuple[str, str, str | None]] = []
    if m.kernelstub:
        others.append(("kernelstub", f"{KERNELSTUB_CONFIG} exists (kernelstub writes the EFI "
                       "stub entry" + (" and systemd-boot's entries)" if m.sd_boot else ")"),
                       KERNELSTUB_CONFIG))
    else:
        sd = _systemd_boot(m)
        if sd is not None:
            others.append(sd)
    if m.limine_conf or m.limine_default:
        seen = [*m.limine_conf] + ([LIMINE_DEFAULT] if m.limine_default else [])
        others.append(("limine", f"Limine: {', '.join(seen)}", LIMINE_DEFAULT))
    booted = None if m.cmdline is None else any(t.startswith("BOOT_IMAGE=") for t in m.cmdline)
    if m.loader_type:
        kind = SUSE_LOADERS.get(m.loader_type)
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
    esp = m.sd_boot[0] if m.sd_boot else None
    if booted:
        evidence = ["/proc/cmdline carries BOOT_IMAGE=: GRUB booted this kernel", *grub_why]
        if others:
            return BootLoader(kind="unknown", evidence=evidence,
                              conflicts=[why for _, why, _ in others])
        return BootLoader(kind=grub_kind, evidence=evidence,
                          config=GRUB_DEFAULT if m.grub_default else None)
    if booted and m.loader_info:
        return BootLoader(kind="unknown", evidence=["/proc/cmdline carries BOOT_IMAGE=, GRUB's mark"],
                          conflicts=[f"the LoaderInfo EFI variable says {m.loader_info} booted "
                                     "this kernel"])
    if booted is False:
        leftover = ([f"{GRUB_DEFAULT} exists, but /proc/cmdline carries no BOOT_IMAGE= (GRUB "
                     "always passes it): GRUB did not boot this kernel"] if m.grub_default else [])
        sd_kinds = ("systemd-boot-kernel-install", "systemd-boot-entries", "uki", "kernelstub")
        if m.loader_info and len(others) > 1:
            # what booted this kernel decides between the loaders that left files
            chosen = [o for o in others if o[0] in sd_kinds]
            if len(chosen) == 1:
                kind, why, config = chosen[0]
                return BootLoader(kind=kind, evidence=[
                    f"the LoaderInfo EFI variable says {m.loader_info} booted this kernel", why],
                    conflicts=[w for k, w, _ in others if k not in sd_kinds] + leftover,
                    config=config, esp=esp)
        if len(others) == 1:
            kind, why, config = others[0]
            evidence = ["/proc/cmdline carries no BOOT_IMAGE=", why]
            if m.loader_info and kind in sd_kinds:
                evidence.append(f"the LoaderInfo EFI variable says {m.loader_info} booted it")
            return BootLoader(kind=kind, evidence=evidence, conflicts=leftover, config=config,
                              esp=esp)
        if others:
            return BootLoader(kind="unknown", evidence=["/proc/cmdline carries no BOOT_IMAGE="],
                              conflicts=[why for _, why, _ in others] + leftover)
        return BootLoader(kind="unknown", conflicts=leftover or [
            "no boot loader ojai knows left a mark (no BOOT_IMAGE= on /proc/cmdline, no "
            "systemd-boot, Limine, kernelstub or NixOS files)"])
    # /proc/cmdline unknown (a capture without it): the files alone
    candidates = list(others) + ([(grub_kind, "; ".join(grub_why),
                                   GRUB_DEFAULT if m.grub_default else None)] if grub_why else [])
    if len(candidates) == 1:
        kind, why, config = candidates[0]
        return BootLoader(kind=kind, evidence=[why, "/proc/cmdline could not be read"],
                          config=config, esp=esp if not kind.startswith("grub") else None)
    return BootLoader(kind="unknown", conflicts=[why for _, why, _ in candidates] or [
        "/proc/cmdline could not be read and no boot loader ojai knows left a file"])


class BootPath(NamedTuple):
    """What one boot path is, for people: the README's table and doctor's fixes."""

    title: str
    edits: str  # what ojai edits there
    runs: str  # the command that makes the edit reach the boot


PATHS: dict[str, BootPath] = {
    "grub": BootPath("GRUB", f"{GRUB_DEFAULT} (or the drop-in in /etc/default/grub.d that "
                     "decides the variable), by key", "update-grub / grub-mkconfig -o "
                     "/boot/grub/grub.cfg / grub2-mkconfig -o /boot/grub2/grub.cfg"),
    "grub-bls": BootPath("GRUB with BLS entries", f"{GRUB_DEFAULT}, by key",
                         "grubby --update-kernel=ALL --args=..., else grub2-mkconfig -o "
                         "/boot/grub2/grub.cfg --update-bls-cmdline"),
    "systemd-boot-kernel-install": BootPath(
        "systemd-boot with kernel-install", f"{KERNEL_CMDLINE}, by key (made from the "
        "running command line when missing)", "kernel-install add KVER "
        "/usr/lib/modules/KVER/vmlinuz for every kernel (or reinstall-kernels, sdbootutil "
        "update-all-entries)"),
    "uki": BootPath("unified kernel images built by kernel-install", f"{KERNEL_CMDLINE}, by key",
                    "kernel-install add KVER /usr/lib/modules/KVER/vmlinuz for every kernel "
                    "(ukify rebuilds the image)"),
    "systemd-boot-entries": BootPath("systemd-boot with hand-written entries", "the options "
                                     "line of the default entry (loader.conf), by key",
                                     "nothing (systemd-boot reads the entry at boot)"),
    "limine": BootPath("Limine (limine-entry-tool)", "KERNEL_CMDLINE[default] where it is "
                       "set, else /etc/limine-entry-tool.d/99-ojai.conf", "limine-update"),
    "kernelstub": BootPath("kernelstub", f"user.kernel_options in {KERNELSTUB_CONFIG} (what "
                           "kernelstub -a / -d change)", "kernelstub --verbose "
                           "--preserve-live-mode"),
    "nixos": BootPath("NixOS", "nothing: boot.kernelParams in /etc/nixos/configuration.nix "
                      "(said, not edited)", "nixos-rebuild boot"),
    "unknown": BootPath("an unknown boot path", "nothing (blocked; --ttm-via modprobe works)",
                        "nothing"),
}


def regenerate_hint(kind: str, family: str = "") -> str:
    """The one command a person runs to make the configured command line reach the next boot on
    this boot path (``family``: os-release's ID and ID_LIKE, for GRUB's tool): a command that
    can be copied as it is, never a placeholder."""
    if kind == "grub-bls":
        # Fedora >= 38 / RHEL >= 9.3: grub2-mkconfig rewrites the BLS entries' options from
        # /etc/default/grub only when asked to
        return "`sudo grub2-mkconfig -o /boot/grub2/grub.cfg --update-bls-cmdline`"
    if kind == "grub":
        if any(x in family for x in ("fedora", "rhel", "centos", "suse", "opensuse")):
            return "`sudo grub2-mkconfig -o /boot/grub2/grub.cfg`"
        if "arch" in family:
            return "`sudo grub-mkconfig -o /boot/grub/grub.cfg`"
        return "`sudo update-grub`"
    if kind in ("systemd-boot-kernel-install", "uki"):
        return "`sudo kernel-install add $(uname -r) /usr/lib/modules/$(uname -r)/vmlinuz` for " \
               "each installed kernel"
    if kind == "limine":
        return "`sudo limine-update`"
    if kind == "kernelstub":
        return "`sudo kernelstub --verbose --preserve-live-mode`"
    if kind == "nixos":
        return "`sudo nixos-rebuild boot`"
    return "your boot loader's own tool"
