"""What the machine shows about its boot: the boot path's markers, and the *configured* and
*generated* states of the kernel command line as that path keeps them, with the initramfs of
the kernel that will boot.

- the markers every boot path is detected by (:func:`read_markers`), decided by
  :func:`ojai_setup.boot.detect.decide` into ``boot.loader``;
- the configured command line and the generated default entry, read by the boot path's own
  module (:meth:`~ojai_setup.boot.base.BootPath.configured`,
  :meth:`~ojai_setup.boot.base.BootPath.generated`: grub.cfg or the BLS entries, the loader
  entry kernel-install wrote, the UKI's ``.cmdline``, limine.conf, kernelstub's ESP entry);
- the initramfs, listed with ``lsinitramfs`` (Debian/Ubuntu), ``lsinitrd`` (dracut) or
  ``lsinitcpio`` (mkinitcpio)
  through the root (replayed from captures under a test root): whether it carries the TTM
  module and the modprobe.d files that set ``pages_limit``, with their value where
  ``lsinitrd -f`` can print it, and whether it was built before a modprobe.d file changed.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from ojai_setup.boot.base import ESPS, Markers
from ojai_setup.boot.detect import SYSCONFIG_BOOTLOADER, decide
from ojai_setup.boot.grub import GRUB_CFGS
from ojai_setup.boot.kernel_install import INSTALL_CONF, KERNEL_CMDLINE
from ojai_setup.boot.kernelstub import KERNELSTUB_CONFIG
from ojai_setup.boot.limine import LIMINE_CONFS, LIMINE_DEFAULT
from ojai_setup.boot.table import PATHS, path_of
from ojai_setup.core.paths import GRUB_DEFAULT
from ojai_setup.core.root import Root
from ojai_setup.formats.boot_files import (
    default_loader_entry,
    lsinitrd_files,
    parse_assignments,
    parse_loader_conf,
)
from ojai_setup.formats.grub_cfg import GrubCfgError
from ojai_setup.formats.modprobe import module_option_settings
from ojai_setup.model.facts import Boot, BootLoader, Initramfs, ModprobeSetting


def _read(root: Root, path: str) -> str | None:
    try:
        return root.read_text(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def read_initramfs(root: Root, image: str, modprobe: list[ModprobeSetting]) -> Initramfs:
    """What the initramfs ``image`` carries that decides ``pages_limit`` at boot."""
    found = Initramfs(image=image)
    if root.which("lsinitramfs"):
        found.tool, result = "lsinitramfs", root.run(["lsinitramfs", image], timeout=300)
        names = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    elif root.which("lsinitrd"):
        found.tool, result = "lsinitrd", root.run(["lsinitrd", image], timeout=300)
        names = [line.split()[-1] for line in result.stdout.splitlines() if line.strip()]
    elif root.which("lsinitcpio"):  # mkinitcpio's lister (Arch): one path a line
        found.tool, result = "lsinitcpio", root.run(["lsinitcpio", image], timeout=300)
        names = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    else:
        found.error = "none of lsinitramfs, lsinitrd or lsinitcpio is installed"
        return found
    if not result.ok:
        found.error = (f"`{found.tool} {image}` failed (exit {result.exit_code}): "
                       f"{(result.stderr or result.stdout).strip()[:200]}")
        return found
    found.carries_ttm = any(n.endswith(tuple(f"/{m}.ko{z}" for m in ("ttm", "amdttm", "amd_ttm",
                                                                     "amd-ttm")
                                             for z in ("", ".xz", ".zst"))) for n in names)
    inside = sorted({"/" + n.lstrip("/") for n in names
                     if "modprobe.d/" in n and n.endswith(".conf")})
    found.modprobe_files = inside
    if found.tool == "lsinitrd" and inside:
        # one run for every file: lsinitrd decompresses the image once for all its -f
        shown = root.run(["lsinitrd", *(a for path in inside for a in ("-f", path.lstrip("/"))),
                          image], timeout=300)
        texts = lsinitrd_files(shown.stdout, inside) if shown.ok else []
        from ojai_setup.core.paths import TTM_MODULES

        values = [s.value for mod in reversed(TTM_MODULES)
                  for s in module_option_settings(texts, mod, "pages_limit")]
        found.pages = int(values[-1]) if values and values[-1] and values[-1].isdigit() else None
    try:
        built = root.resolve(image).stat().st_mtime
    except OSError:
        built = None
    for setting in modprobe:
        if setting.path not in inside:
            found.missing.append(setting.path)
        elif built is not None:
            try:
                if root.resolve(setting.path).stat().st_mtime > built:
                    found.older_than.append(setting.path)
            except OSError:
                pass
    return found


def read_boot(root: Root, bls: bool, modprobe: list[ModprobeSetting],
              loader: BootLoader | None = None) -> Boot:
    """The generated state the boot path keeps (GRUB's without a boot path), and the
    initramfs it loads."""
    boot = Boot(loader=loader)
    try:
        path = PATHS["grub"] if loader is None else path_of(loader.kind)
        boot.generated = path.generated(root, loader, bls)
    except (GrubCfgError, OSError, ValueError) as exc:
        boot.generated_error = str(exc)
    image = boot.generated.initrd if boot.generated else None
    if image and modprobe:  # listing an initramfs takes seconds: only when modprobe.d matters
        boot.initramfs = read_initramfs(root, image, modprobe)
    return boot


def _os_id(root: Root) -> str | None:
    text = _read(root, "/etc/os-release") or _read(root, "/usr/lib/os-release")
    return parse_assignments(text).get("ID") if text else None


#: systemd-boot's vendor GUID: it sets LoaderInfo, LoaderEntrySelected, ... (bootctl status)
LOADER_GUID = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"


def _loader_info(root: Root) -> str | None:
    """The LoaderInfo EFI variable systemd-boot sets ("systemd-boot 252"), or None."""
    try:
        raw = root.read_bytes(f"/sys/firmware/efi/efivars/LoaderInfo-{LOADER_GUID}")
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    from ojai_setup.formats.boot_files import efi_string

    return efi_string(raw) or None


def read_markers(root: Root, cmdline: list[str] | None) -> Markers:
    """What the machine shows about its boot path (see :mod:`ojai_setup.boot.detect`)."""
    from ojai_setup.formats.grub import GrubEditError, bls_enabled

    grub_text = _read(root, GRUB_DEFAULT)
    try:
        bls = bool(grub_text) and bls_enabled(grub_text)
    except GrubEditError:
        bls = False
    esps = list(ESPS)
    if root.which("bootctl"):  # bootctl knows the ESP when it is mounted elsewhere
        where = root.run(["bootctl", "--print-esp-path"])
        path = where.stdout.strip()
        if where.ok and path.startswith("/") and path not in esps:
            esps.append(path)
    sd = tuple(esp for esp in esps
               if root.exists(f"{esp}/loader/loader.conf") or root.glob(f"{esp}/EFI/systemd/*.efi"))
    entries = tuple(p for esp in sd for p in root.glob(f"{esp}/loader/entries/*.conf"))
    ukis = tuple(p for esp in sd for p in root.glob(f"{esp}/EFI/Linux/*.efi"))
    token = (_read(root, "/etc/kernel/entry-token") or _read(root, "/etc/machine-id") or "").strip()
    ki_entries = tuple(p for p in entries if token and PurePosixPath(p).name.startswith(token + "-"))
    install = _read(root, INSTALL_CONF)
    layout = parse_assignments(install).get("layout") if install else None
    default_entry = None
    if entries:
        conf = _read(root, f"{sd[0]}/loader/loader.conf") or ""
        ids = [PurePosixPath(p).name for p in entries]
        picked = default_loader_entry(parse_loader_conf(conf).get("default"), ids)
        default_entry = next((p for p in entries if PurePosixPath(p).name == picked), None)
    limine = tuple(dict.fromkeys(
        f"{mount}{conf}".replace("//", "/") for mount in ("/boot", *ESPS)
        for conf in LIMINE_CONFS if root.exists(f"{mount}{conf}")))
    sysconfig = _read(root, SYSCONFIG_BOOTLOADER)
    return Markers(
        cmdline=cmdline, grub_default=grub_text is not None, grub_bls=bls,
        grub_cfg=next((p for p in GRUB_CFGS if root.exists(p)), None),
        sd_boot=sd, entries=entries, ukis=ukis, ki_entries=ki_entries,
        kernel_cmdline=root.exists(KERNEL_CMDLINE), install_conf=install is not None,
        layout=layout, limine_conf=limine, limine_default=root.exists(LIMINE_DEFAULT),
        kernelstub=root.exists(KERNELSTUB_CONFIG),
        nixos=("/etc/NIXOS exists" if root.exists("/etc/NIXOS") else
               "/etc/os-release says ID=nixos" if _os_id(root) == "nixos" else None),
        loader_type=(parse_assignments(sysconfig).get("LOADER_TYPE") or None) if sysconfig else None,
        default_entry=default_entry, loader_info=_loader_info(root))


def read_loader(root: Root, cmdline: list[str] | None) -> BootLoader:
    """The boot path, decided from the machine's markers (``boot.loader``)."""
    return decide(read_markers(root, cmdline))


def read_configured(root: Root, loader: BootLoader) -> tuple[list[str], str] | None:
    """The *configured* kernel command line on a boot path other than GRUB's, with the file
    that holds it; None where ojai does not read one (GRUB has its own fact, NixOS, unknown)."""
    return path_of(loader.kind).configured(root, loader)
