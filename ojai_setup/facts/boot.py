"""The *generated* and the next boot's state of the TTM limit: grub.cfg (or BLS entries) and
the initramfs of the kernel that will boot.

- the default entry of ``/boot/grub/grub.cfg`` or ``/boot/grub2/grub.cfg`` (with ``grubenv``),
  or of ``/boot/loader/entries/*.conf`` when the distribution uses BLS entries: its kernel
  line, kernel release and initramfs;
- that initramfs, listed with ``lsinitramfs`` (Debian/Ubuntu), ``lsinitrd`` (dracut) or
  ``lsinitcpio`` (mkinitcpio)
  through the root (replayed from captures under a test root): whether it carries the TTM
  module and the modprobe.d files that set ``pages_limit``, with their value where
  ``lsinitrd -f`` can print it, and whether it was built before a modprobe.d file changed.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from ojai_setup.core.paths import GRUB_DEFAULT
from ojai_setup.core.root import Root
from ojai_setup.domain.boot_path import (
    INSTALL_CONF,
    KERNEL_CMDLINE,
    KERNELSTUB_CONFIG,
    LIMINE_DEFAULT,
    SYSCONFIG_BOOTLOADER,
    Markers,
    decide,
)
from ojai_setup.formats.boot_files import (
    default_loader_entry,
    lsinitrd_files,
    parse_assignments,
    parse_loader_conf,
)
from ojai_setup.formats.grub_cfg import (
    GrubCfgError,
    default_bls_entry,
    default_entry,
    kernel_release,
    parse_bls_entry,
    parse_grub_cfg,
    parse_grubenv,
)
from ojai_setup.formats.modprobe import module_option_settings
from ojai_setup.model.facts import Boot, BootEntry, BootLoader, Initramfs, ModprobeSetting

GRUB_CFGS = ("/boot/grub/grub.cfg", "/boot/grub2/grub.cfg")
BLS_DIR = "/boot/loader/entries"
#: where an ESP (or XBOOTLDR partition) is mounted (bootctl's search order)
ESPS = ("/efi", "/boot", "/boot/efi")
#: where Limine looks for its configuration on a partition (CONFIG.md), under each mount
LIMINE_CONFS = ("/limine.conf", "/limine/limine.conf", "/EFI/limine/limine.conf",
                "/EFI/BOOT/limine.conf")


def _read(root: Root, path: str) -> str | None:
    try:
        return root.read_text(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _boot_path(root: Root, path: str | None) -> str | None:
    """A path as GRUB names it (relative to the partition holding it) on the machine."""
    if not path:
        return None
    for candidate in (path, "/boot" + path if not path.startswith("/boot/") else path):
        if root.exists(candidate):
            return candidate
    return path


def read_generated(root: Root, bls: bool) -> BootEntry | None:
    cfg_path = next((p for p in GRUB_CFGS if root.exists(p)), None)
    env_text = _read(root, str(PurePosixPath(cfg_path or GRUB_CFGS[0]).parent / "grubenv"))
    env = parse_grubenv(env_text) if env_text else {}
    bls_files = root.glob(f"{BLS_DIR}/*.conf")
    if bls and bls_files:
        entries = [parse_bls_entry(PurePosixPath(p).stem, _read(root, p) or "", env) for p in bls_files]
        e = default_bls_entry(entries, env)
        if e is None:
            return None
        return BootEntry(config=f"{BLS_DIR}/{e.name}.conf", title=e.title, kernel=e.linux,
                         release=e.version or kernel_release(e.linux),
                         initrd=_boot_path(root, e.initrd[-1] if e.initrd else None),
                         tokens=e.options)
    if cfg_path is None:
        return None
    cfg = parse_grub_cfg(_read(root, cfg_path) or "")
    e = default_entry(cfg, env)
    if e is None:
        raise GrubCfgError(f"{cfg_path} has no menu entry")
    return BootEntry(config=cfg_path, title=e.title, kernel=e.kernel, release=kernel_release(e.kernel),
                     initrd=_boot_path(root, e.initrd[-1] if e.initrd else None), tokens=e.args)


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
    boot = Boot(loader=loader)
    try:
        if loader is not None and loader.kind not in ("grub", "grub-bls", "unknown"):
            boot.generated = read_loader_generated(root, loader)
        else:
            boot.generated = read_generated(root, bls)
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
    """What the machine shows about its boot path (see :mod:`ojai_setup.domain.boot_path`)."""
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
    from ojai_setup.formats.boot_files import entry_options
    from ojai_setup.formats.kernel_cmdline import tokens_of
    from ojai_setup.formats.kernelstub import kernel_options
    from ojai_setup.formats.limine import DROPIN_DIR, ENTRY_TOOL_CONF, default_cmdline

    kind = loader.kind
    if kind in ("systemd-boot-kernel-install", "uki"):
        for path in (KERNEL_CMDLINE, "/usr/lib/kernel/cmdline"):  # kernel-install's order
            text = _read(root, path)
            if text is not None:
                return tokens_of(text), path
        return None
    if kind == "systemd-boot-entries" and loader.config:
        text = _read(root, loader.config)
        return (entry_options(text), loader.config) if text is not None else None
    if kind == "kernelstub":
        text = _read(root, KERNELSTUB_CONFIG)
        return (kernel_options(text), KERNELSTUB_CONFIG) if text is not None else None
    if kind == "limine":
        chain = ([ENTRY_TOOL_CONF] if root.exists(ENTRY_TOOL_CONF) else [])
        chain += root.glob(f"{DROPIN_DIR}/*.conf")
        chain += [LIMINE_DEFAULT] if root.exists(LIMINE_DEFAULT) else []
        tokens, _ = default_cmdline([(p, _read(root, p) or "") for p in chain])
        from ojai_setup.core.paths import TTM_MODULES
        from ojai_setup.formats.kernel_params import param_key, same_key

        where = next((t.path for t in reversed(tokens)
                      if any(same_key(param_key(t.text), f"{m}.pages_limit")
                             for m in TTM_MODULES)), LIMINE_DEFAULT)
        return [t.text for t in tokens], where
    return None


def _entry(root: Root, path: str, esp: str) -> BootEntry:
    """A loader entry on the ESP mounted at ``esp`` (its paths are relative to the ESP)."""
    e = parse_bls_entry(PurePosixPath(path).stem, _read(root, path) or "")
    initrd = e.initrd[-1].replace("\\", "/") if e.initrd else None
    return BootEntry(config=path, title=e.title, kernel=e.linux,
                     release=e.version or kernel_release(e.linux),
                     initrd=f"{esp.rstrip('/')}/{initrd.lstrip('/')}" if initrd else None,
                     tokens=e.options)


def read_loader_generated(root: Root, loader: BootLoader) -> BootEntry | None:
    """The *generated* state on a boot path other than GRUB's: the default loader entry
    kernel-install wrote, the newest UKI's embedded command line, limine.conf's default entry,
    kernelstub's ESP entry."""
    from ojai_setup.formats.boot_files import parse_limine_conf
    from ojai_setup.formats.kernel_cmdline import tokens_of
    from ojai_setup.formats.uki import read_sections

    kind, esp = loader.kind, loader.esp
    if kind == "systemd-boot-kernel-install" and esp:
        entries = root.glob(f"{esp}/loader/entries/*.conf")
        conf = _read(root, f"{esp}/loader/loader.conf") or ""
        picked = default_loader_entry(parse_loader_conf(conf).get("default"),
                                      [PurePosixPath(p).name for p in entries])
        path = next((p for p in entries if PurePosixPath(p).name == picked), None)
        return _entry(root, path, esp) if path else None
    if kind == "uki" and esp:
        images = root.glob(f"{esp}/EFI/Linux/*.efi")
        conf = _read(root, f"{esp}/loader/loader.conf") or ""
        picked = default_loader_entry(parse_loader_conf(conf).get("default"),
                                      [PurePosixPath(p).name for p in images])
        path = next((p for p in images if PurePosixPath(p).name == picked), None)
        if path is None:
            return None
        sections = read_sections(root.read_bytes(path), path)
        return BootEntry(config=path, title=PurePosixPath(path).stem,
                         release=(sections.uname or "").strip() or None,
                         tokens=tokens_of(sections.cmdline or ""))
    if kind == "kernelstub":
        for mount in ESPS:
            path = f"{mount}/loader/entries/Pop_OS-current.conf"
            if root.exists(path):
                return _entry(root, path, mount)
        return None
    if kind == "limine":
        for mount in ("/boot", *ESPS):
            for conf in LIMINE_CONFS:
                path = f"{mount}{conf}"
                if root.exists(path):
                    entries, index = parse_limine_conf(_read(root, path) or "")
                    if index is None:
                        return None
                    e = entries[index]
                    return BootEntry(config=path, title=e.title, tokens=e.cmdline)
        return None
    return None
