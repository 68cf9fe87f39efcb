"""The *generated* and the next boot's state of the TTM limit: grub.cfg (or BLS entries) and
the initramfs of the kernel that will boot.

- the default entry of ``/boot/grub/grub.cfg`` or ``/boot/grub2/grub.cfg`` (with ``grubenv``),
  or of ``/boot/loader/entries/*.conf`` when the distribution uses BLS entries: its kernel
  line, kernel release and initramfs;
- that initramfs, listed with ``lsinitramfs`` (Debian/Ubuntu) or ``lsinitrd`` (dracut)
  through the root (replayed from captures under a test root): whether it carries the TTM
  module and the modprobe.d files that set ``pages_limit``, with their value where
  ``lsinitrd -f`` can print it, and whether it was built before a modprobe.d file changed.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from ojai_setup.core.root import Root
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
from ojai_setup.model.facts import Boot, BootEntry, Initramfs, ModprobeSetting

GRUB_CFGS = ("/boot/grub/grub.cfg", "/boot/grub2/grub.cfg")
BLS_DIR = "/boot/loader/entries"


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
    else:
        found.error = "neither lsinitramfs nor lsinitrd is installed"
        return found
    if not result.ok:
        found.error = (f"`{found.tool} {image}` failed (exit {result.exit_code}): "
                       f"{(result.stderr or result.stdout).strip()[:200]}")
        return found
    found.carries_ttm = any(n.endswith(("/ttm.ko", "/ttm.ko.xz", "/ttm.ko.zst", "/amdttm.ko",
                                        "/amdttm.ko.xz", "/amdttm.ko.zst")) for n in names)
    inside = sorted({"/" + n.lstrip("/") for n in names
                     if "modprobe.d/" in n and n.endswith(".conf")})
    found.modprobe_files = inside
    if found.tool == "lsinitrd":
        texts = []
        for path in inside:
            shown = root.run(["lsinitrd", "-f", path.lstrip("/"), image])
            if shown.ok:
                texts.append((path, shown.stdout))
        values = [s.value for mod in ("ttm", "amdttm")
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


def read_boot(root: Root, bls: bool, modprobe: list[ModprobeSetting]) -> Boot:
    boot = Boot()
    try:
        boot.generated = read_generated(root, bls)
    except (GrubCfgError, OSError) as exc:
        boot.generated_error = str(exc)
    image = boot.generated.initrd if boot.generated else None
    if image and modprobe:  # listing an initramfs takes seconds: only when modprobe.d matters
        boot.initramfs = read_initramfs(root, image, modprobe)
    return boot
