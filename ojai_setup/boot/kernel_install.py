"""systemd-boot with kernel-install (type 1 entries), and unified kernel images it builds.

- Detected by systemd-boot on an ESP (``loader/loader.conf`` or ``EFI/systemd/``) with
  ``/etc/kernel/cmdline``, ``/etc/kernel/install.conf`` or an entry named
  ``<entry token>-<kver>.conf``; ``layout=uki`` (or UKIs in ``EFI/Linux/`` and no type 1
  entries) makes it ``uki``.
- Deciding file: ``/etc/kernel/cmdline``, edited by key (``formats/kernel_cmdline.py``); when
  missing it is made from ``/usr/lib/kernel/cmdline`` or the running command line, as
  kernel-install falls back, and one made from the running command line is written back
  without the limit on rollback (``rollback_to``), not removed.
- Regeneration: ``kernel-install add KVER IMAGE`` for every installed kernel (or the
  distribution's wrapper, ``reinstall-kernels``, ``sdbootutil update-all-entries``); the same
  command copies a rebuilt initramfs to the ESP (:meth:`KernelInstall.initramfs`).
- Generated state: the default loader entry kernel-install wrote, or the UKI's ``.cmdline``
  (``formats/uki.py``).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from ojai_setup.boot.base import (
    REBOOT,
    Blocked,
    BootPath,
    Claim,
    Machine,
    Markers,
    Plan,
    Planned,
    Want,
    changes,
    check,
    loader_entry,
    read,
)
from ojai_setup.core.root import Root
from ojai_setup.formats.boot_files import default_loader_entry, parse_loader_conf
from ojai_setup.formats.kernel_cmdline import (
    CmdlineFormatError,
    edit_params,
    tokens_of,
    without_per_boot,
)
from ojai_setup.formats.kernel_params import cmdline_param
from ojai_setup.model.facts import BootEntry, BootLoader, LoaderKind

if TYPE_CHECKING:  # built only when a step plans (doctor never imports the actions)
    from ojai_setup.model.actions import RunCommand

KERNEL_CMDLINE = "/etc/kernel/cmdline"
INSTALL_CONF = "/etc/kernel/install.conf"
#: the distribution's command line, which kernel-install reads when /etc/kernel/cmdline is missing
USR_KERNEL_CMDLINE = "/usr/lib/kernel/cmdline"


def installed_kernels(machine: Machine) -> list[tuple[str, ...]]:
    """``kernel-install add`` arguments for every installed kernel: the release and its image,
    /usr/lib/modules/R/vmlinuz (Fedora, Arch, where kernel-install takes it from) or
    /boot/vmlinuz-R with /boot/initrd.img-R (Debian and Ubuntu, as their zz-systemd-boot
    kernel hook passes them)."""
    root = machine.root
    found: dict[str, tuple[str, ...]] = {}
    for image in root.glob("/usr/lib/modules/*/vmlinuz"):
        found[PurePosixPath(image).parent.name] = (PurePosixPath(image).parent.name, image)
    for image in root.glob("/boot/vmlinuz-*"):
        release = PurePosixPath(image).name.removeprefix("vmlinuz-")
        initrd = f"/boot/initrd.img-{release}"
        found.setdefault(release, (release, image) + ((initrd,) if root.exists(initrd) else ()))
    if not found and machine.facts.kernel:
        release = machine.facts.kernel.release
        found[release] = (release, f"/usr/lib/modules/{release}/vmlinuz")
    return [found[r] for r in sorted(found)]


def handlers(machine: Machine, why: str) -> dict[str, RunCommand] | str:
    """What makes /etc/kernel/cmdline reach the entries or UKIs: the distribution's wrapper
    (EndeavourOS ``reinstall-kernels``, openSUSE ``sdbootutil update-all-entries``), else
    ``kernel-install add KVER /usr/lib/modules/KVER/vmlinuz`` for every installed kernel.
    A string says why there is none."""
    from ojai_setup.model.actions import RunCommand

    if machine.which("reinstall-kernels"):
        return {"reinstall-kernels": RunCommand(argv=("reinstall-kernels",), needs_root=True,
                                                reason=why)}
    if machine.which("sdbootutil"):
        return {"sdbootutil": RunCommand(argv=("sdbootutil", "update-all-entries"),
                                         needs_root=True, reason=why)}
    if not machine.which("kernel-install"):
        return (f"kernel-install is not installed, so nothing would write {KERNEL_CMDLINE} into "
                "the boot entries; install systemd's kernel-install (Debian: systemd) and run "
                "ojai again")
    out: dict[str, RunCommand] = {}
    for args in installed_kernels(machine):
        out[f"kernel-install {args[0]}"] = RunCommand(
            argv=("kernel-install", "add", *args), needs_root=True,
            reason=f"{why} (kernel {args[0]})")
    return out or "no installed kernel found under /usr/lib/modules or /boot to run kernel-install for"


def _default(root: Root, esp: str, pattern: str) -> str | None:
    """The file of ``esp``'s ``pattern`` that loader.conf's ``default`` picks."""
    found = root.glob(f"{esp}/{pattern}")
    conf = read(root, f"{esp}/loader/loader.conf") or ""
    picked = default_loader_entry(parse_loader_conf(conf).get("default"),
                                  [PurePosixPath(p).name for p in found])
    return next((p for p in found if PurePosixPath(p).name == picked), None)


class KernelInstall(BootPath):
    systemd_boot = True
    outweighs = ("systemd-boot-entries",)  # kernel-install writes the entries

    def __init__(self, kind: LoaderKind, title: str, edits: str, runs: str) -> None:
        self.kind, self.title, self.edits, self.runs = kind, title, edits, runs

    def claim(self, m: Markers) -> Claim | None:
        if not m.sd_boot:
            return None
        where = ", ".join(m.sd_boot)
        uki = m.layout == "uki" or (m.ukis and not m.entries and (m.kernel_cmdline
                                                                  or m.install_conf))
        if self.kind == "uki":
            if not uki:
                return None
            why = (f"systemd-boot on {where}; "
                   + (f"{INSTALL_CONF} says layout=uki" if m.layout == "uki"
                      else f"unified kernel images in EFI/Linux ({', '.join(m.ukis)}) and no "
                      "type 1 entries")
                   + f"; kernel-install embeds {KERNEL_CMDLINE} in the image it builds")
            return Claim("uki", why, KERNEL_CMDLINE)
        if uki or not (m.kernel_cmdline or m.install_conf or m.ki_entries):
            return None
        named = (f"{KERNEL_CMDLINE} exists" if m.kernel_cmdline else
                 f"{INSTALL_CONF} exists" if m.install_conf else
                 f"{m.ki_entries[0]} is named <entry token>-<kernel>.conf")
        return Claim(self.kind, f"systemd-boot on {where}; {named}: kernel-install writes the "
                     "entries", KERNEL_CMDLINE)

    def hint(self, family: str) -> str:
        return ("`sudo kernel-install add $(uname -r) /usr/lib/modules/$(uname -r)/vmlinuz` for "
                "each installed kernel")

    def configured(self, root: Root, loader: BootLoader) -> tuple[list[str], str] | None:
        for path in (KERNEL_CMDLINE, USR_KERNEL_CMDLINE):  # kernel-install's order
            text = read(root, path)
            if text is not None:
                return tokens_of(text), path
        return None

    def generated(self, root: Root, loader: BootLoader | None, bls: bool) -> BootEntry | None:
        esp = loader.esp if loader else None
        if not esp:
            return None
        if self.kind != "uki":
            path = _default(root, esp, "loader/entries/*.conf")
            return loader_entry(root, path, esp) if path else None
        from ojai_setup.formats.uki import read_sections

        path = _default(root, esp, "EFI/Linux/*.efi")
        if path is None:
            return None
        sections = read_sections(root.read_bytes(path), path)
        return BootEntry(config=path, title=PurePosixPath(path).stem,
                         release=(sections.uname or "").strip() or None,
                         tokens=tokens_of(sections.cmdline or ""))

    def plan(self, machine: Machine, want: Want, loader: BootLoader, reads: list[str]) -> Plan:
        """``/etc/kernel/cmdline`` by key, then kernel-install for every kernel."""
        from ojai_setup.model.actions import WriteFile

        reads.append(KERNEL_CMDLINE)
        text = read(machine.root, KERNEL_CMDLINE)
        shipped = read(machine.root, USR_KERNEL_CMDLINE) if text is None else None
        if text is None and shipped is not None:
            # kernel-install's next source after /etc/kernel/cmdline (kernel-install(8))
            reads.append(USR_KERNEL_CMDLINE)
            base = shipped
        elif text is None:
            if machine.facts.cmdline is None:
                return Blocked(
                    f"{KERNEL_CMDLINE} does not exist and /proc/cmdline could not be read "
                    f"to make it from; write the running command line into {KERNEL_CMDLINE} "
                    f"with {want.param} added, then run ojai again")
            base = " ".join(without_per_boot(machine.facts.cmdline)) + "\n"
        else:
            base = text
        try:
            before = tokens_of(base)
            after = edit_params(base, want.key, str(want.pages), want.drop, source=KERNEL_CMDLINE)
        except CmdlineFormatError as exc:
            return Blocked(f"{exc} (no file was changed)")
        current = cmdline_param(before, want.key) if text is not None else None
        if text is not None and after == text:
            return Planned([], {}, KERNEL_CMDLINE, current=current)
        image = "unified kernel images" if self.kind == "uki" else "loader entries"
        follow = handlers(machine, f"rebuild the {image} from {KERNEL_CMDLINE}")
        if isinstance(follow, str):
            return Blocked(follow)
        # made from the running command line: removing it on rollback would make kernel-install
        # take /proc/cmdline again, which carries the limit once the machine rebooted, so
        # rollback writes it back as it read before the limit instead
        from_running = text is None and shipped is None
        action = WriteFile(path=KERNEL_CMDLINE, before=text, after=after,
                           validate_with="kernel-cmdline", cmdline=check(want, before),
                           reason=f"set {want.param} ({want.gib} GiB for the GPU)",
                           needs_root=True, needs_reboot=REBOOT, notify=tuple(follow),
                           rollback_to=base if from_running else None)
        why = ("kernel-install writes it into every entry it adds" if self.kind != "uki" else
               "kernel-install embeds it in the unified kernel image it builds")
        if text is None and shipped is not None:
            why += f"; created from {USR_KERNEL_CMDLINE}, which kernel-install reads without it"
        elif text is None:
            why += ("; created from the running command line, less BOOT_IMAGE= and initrd= "
                    "(rollback writes it back without the limit)")
        return Planned([action], follow, KERNEL_CMDLINE, detail=f" in {KERNEL_CMDLINE} ({why})",
                       said=changes(before, tokens_of(after), KERNEL_CMDLINE, want),
                       current=current)

    def regenerate(self, machine: Machine, want: Want, loader: BootLoader,
                   gen: BootEntry) -> list[RunCommand] | None:
        follow = handlers(machine, f"rebuild {gen.config} from {KERNEL_CMDLINE}")
        if isinstance(follow, str):
            return None
        return [h.model_copy(update={"needs_reboot": REBOOT}) for h in follow.values()]

    def initramfs(self, machine: Machine, loader: BootLoader,
                  release: str | None) -> dict[str, RunCommand] | str:
        """On a kernel-install machine the initramfs that boots is the copy kernel-install put
        beside the entry on the ESP (``initrd.img-R`` under ``<entry-token>/R/``), or the one
        inside the UKI it built: a rebuild in place of the distribution's tool does not reach it
        (``dracut --regenerate-all`` writes ``<entry-token>/R/initrd`` there, a file the entry
        does not load). So the image kernel-install is handed is rebuilt first (Debian's
        ``/boot/initrd.img-R``: ``update-initramfs -u -k R``, or ``dracut --force`` with that
        file, as Debian's dracut kernel hook does), then ``kernel-install add`` copies it to the
        ESP or builds the UKI from it; a kernel kernel-install is given without an initramfs
        (``/usr/lib/modules/R/vmlinuz``) gets it from kernel-install's own plugins (dracut's
        50-dracut.install, mkinitcpio's). The distribution's wrapper (``reinstall-kernels``,
        ``sdbootutil``) does all of it. ``release``: only that kernel."""
        from ojai_setup.model.actions import RunCommand

        image = "unified kernel images" if self.kind == "uki" else "loader entries"
        why = f"put the initramfs (it carries /etc/modprobe.d) into the {image}"
        if machine.which("reinstall-kernels") or machine.which("sdbootutil"):
            return handlers(machine, why)
        if not machine.which("kernel-install"):
            return (f"kernel-install is not installed, so nothing would put a rebuilt initramfs "
                    f"into the {image}; install systemd's kernel-install (Debian: systemd) and "
                    "run ojai again")
        kernels = installed_kernels(machine)
        if release is not None and any(k[0] == release for k in kernels):
            kernels = [k for k in kernels if k[0] == release]
        out: dict[str, RunCommand] = {}
        for args in kernels:
            kver = args[0]
            if len(args) > 2:  # kernel-install is given this initramfs: rebuild it first
                initrd = args[2]
                if machine.which("update-initramfs"):
                    argv: tuple[str, ...] = ("update-initramfs", "-u", "-k", kver)
                elif machine.which("dracut"):
                    argv = ("dracut", "--force", initrd, kver)
                else:
                    return (f"kernel-install is handed {initrd}, but neither update-initramfs "
                            "nor dracut is installed to rebuild it with /etc/modprobe.d; rebuild "
                            f"it with your distribution's tool, then run kernel-install add {kver}")
                out[f"initramfs {kver}"] = RunCommand(
                    argv=argv, needs_root=True,
                    reason=f"rebuild {initrd} (it carries /etc/modprobe.d)")
            out[f"kernel-install {kver}"] = RunCommand(
                argv=("kernel-install", "add", *args), needs_root=True,
                reason=f"{why} (kernel {kver})")
        return out or ("no installed kernel found under /usr/lib/modules or /boot to run "
                       "kernel-install for")


SYSTEMD_BOOT_KERNEL_INSTALL = KernelInstall(
    "systemd-boot-kernel-install", "systemd-boot with kernel-install",
    f"{KERNEL_CMDLINE}, by key (made from the running command line when missing)",
    "kernel-install add KVER /usr/lib/modules/KVER/vmlinuz for every kernel (or "
    "reinstall-kernels, sdbootutil update-all-entries)")
UKI = KernelInstall(
    "uki", "unified kernel images built by kernel-install", f"{KERNEL_CMDLINE}, by key",
    "kernel-install add KVER /usr/lib/modules/KVER/vmlinuz for every kernel (ukify rebuilds "
    "the image)")
