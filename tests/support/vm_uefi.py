"""A real Debian 12 machine that boots through UEFI and systemd-boot, for the boot path tests.

It is made from the same debootstrapped tree as the BIOS/GRUB guest of :mod:`support.vm`
(:func:`support.vm.ensure_base`: no second debootstrap), and like it without loop devices:

1. the base tarball unpacked, :func:`support.vm.configure_rootfs` (the driver's control
   channel, fstab, the slow-host timeouts) and ojai's dependencies in ``/opt/ojai``, as for
   the BIOS guest; GRUB stays installed, so ``/etc/default/grub`` is there, as on a machine
   that moved to systemd-boot with the grub package left behind;
2. in a ``chroot``, at native speed (:func:`prepare_esp`), with ``/proc`` and a tmpfs on
   ``/boot/efi`` mounted in a private mount namespace (``unshare -m``: both go away with it):
   ``apt-get install systemd-boot dracut python3-pefile`` (bookworm: dracut 059, which replaces
   initramfs-tools, as on the distributions that pair it with kernel-install, and builds
   without host-only, which would size the image for the host the chroot runs on, and with
   only the drivers this guest boots from, :data:`DRIVERS`), then systemd, systemd-boot and
   udev 254 from bookworm-backports (:data:`BACKPORTS`: 254's package carries ukify), ``bootctl install
   --esp-path=/boot/efi --no-variables``, two initramfs images (``dracut --force``):
   :data:`WITHOUT_TTM` (no ttm), then ``initrd.img-R`` with the GPU's driver loaded early
   (:data:`DRM_CONF`: ttm inside, so a modprobe.d limit needs a rebuild), and
   ``kernel-install add`` with a build-time ``/etc/kernel/cmdline`` (the host's
   /proc/cmdline is not the guest's), which is removed again: the image has none, so
   kernel-install in the guest takes the running command line, as on a fresh install;
3. the ESP's files copied into a FAT32 image file (``mkfs.fat -C``, ``mcopy -s``), the root
   file system made with ``mke2fs -d``, both placed in a GPT disk made with ``sfdisk``
   (an EFI system partition and a Linux partition);
4. disk and variable store stored as qcow2 in the cache, keyed by a hash of this recipe::

    ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/vm/uefi-<recipe hash>/disk.qcow2, vars.qcow2

For each new wheel, :func:`uefi_booted` boots an overlay once, under OVMF (Debian's ``ovmf``,
``-drive if=pflash``, a copy of ``OVMF_VARS_4M.fd`` per disk, kept as qcow2 so that
``savevm``/``-loadvm`` take it along). That boot first checks the image, once
per image (:func:`check_uefi_image`: systemd-boot started the kernel (``LoaderInfo``), ``ttm`` is live,
the entry's initramfs holds ttm while the other does not (``lsinitrd``)), then installs this
checkout's ojai (from a small read-only second disk, which stays attached) and stores the
running guest as a snapshot; each test starts a copy of it (:func:`uefi_from_snapshot`).

Building needs what :mod:`support.vm` needs, plus ``ovmf``, ``dosfstools`` and ``mtools``.
Run this file as a script to build ahead of pytest (``.ci/run`` does).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

if __name__ == "__main__":  # run as a script: tests/ on the path, as pytest puts it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support import vm  # noqa: E402
from support.vm import Machine, VMError, _run, _tool, log  # noqa: E402

OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")
#: dracut in place of initramfs-tools (apt removes it), as Fedora, Arch and EndeavourOS pair
#: it with kernel-install; the BIOS guest keeps Debian's initramfs-tools
UEFI_PACKAGES = ("systemd-boot", "dracut", "python3-pefile")
#: systemd 254 from bookworm-backports: its package carries ukify (a package of its own from
#: 255), which builds unified kernel images through kernel-install (``layout=uki``); pefile
#: (above) is what ukify 254 reads and writes PE files with
BACKPORTS = ("systemd", "systemd-boot", "systemd-boot-efi", "udev")
#: the kernel modules of dracut's images, in place of every driver (without host-only, which
#: would size them for the host the chroot runs on): what this guest boots from. A generic
#: image is 48 MB, which ``lsinitrd`` under TCG takes 80 s to read
DRIVERS = ("virtio_pci", "virtio_blk", "virtio_console", "ext4", "vfat", "nls_cp437", "nls_ascii")
#: dracut's modules for what this guest has none of (an encrypted, LVM, RAID or btrfs root,
#: hibernation, a splash screen, console fonts and keymaps, network boots, extra kernel modules):
#: left out of both images and of every rebuild in the guest, the ones ojai's apply runs among
#: them. Measured: a ``dracut --force`` in the guest 108 -> 82 s.
DRACUT_OMIT = ("i18n", "kernel-modules-extra", "qemu", "qemu-net", "resume", "crypt", "dm", "lvm",
               "mdraid", "plymouth", "btrfs", "nss-softokn", "rngd")
#: the dracut configuration that loads the GPU's driver early (``-vga std``: bochs; an AMD box
#: adds amdgpu the same way) and so puts ttm into the initramfs
DRM_CONF = "50-ojai-early-kms.conf"
GPU_DRIVER = "bochs"
#: beside the kernel: the initramfs dracut makes without that file (no ttm)
WITHOUT_TTM = "initrd-without-ttm.img-"
ESP_MIB = 256
ESP_START_MIB = 1
ROOT_START_MIB = ESP_START_MIB + ESP_MIB
#: the ESP's FAT volume id (``mkfs.fat -i``), which fstab names as UUID=XXXX-XXXX
ESP_VOLID = "0E5A1C2D"
ESP_UUID = f"{ESP_VOLID[:4]}-{ESP_VOLID[4:]}"
DISK_GUID = "5f0c7e1a-3b2d-4e6f-8a9b-1c2d3e4f5a6b"
#: what kernel-install writes into the entries at build time (then the file is removed)
BUILD_CMDLINE = f"root=UUID={vm.ROOT_UUID} ro {vm.GUEST_KERNEL_ARGS}"
RECIPE_VERSION = 3

#: the chroot stage: systemd-boot from the mirror, then the ESP filled in a private mount
#: namespace (a tmpfs for the ESP, /proc for bootctl), copied out to $2
PREPARE = r"""
set -eu
R=$1 OUT=$2
C="env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive SYSTEMD_RELAX_ESP_CHECKS=1 chroot $R"
mkdir -p "$R/etc/dracut.conf.d" "$R/boot/efi"
printf '%s\n' 'hostonly="no"' 'drivers="{drivers}"' 'omit_dracutmodules+=" {omit} "' \
    > "$R/etc/dracut.conf.d/10-ojai-guest.conf"
mount -t proc proc "$R/proc"
cp /etc/resolv.conf "$R/etc/resolv.conf"
echo "deb {mirror} bookworm-backports main" > "$R/etc/apt/sources.list.d/backports.list"
$C apt-get -q -o Acquire::Retries=3 update
$C apt-get install -y -q --no-install-recommends {packages}
$C apt-get install -y -q --no-install-recommends -t bookworm-backports {backports}
rm "$R/etc/apt/sources.list.d/backports.list"
$C apt-get clean
rm -f "$R/etc/resolv.conf"
rm -rf "$R"/var/lib/apt/lists/*
mount -t tmpfs -o size={esp_mib}m,mode=0755 ojai-esp "$R/boot/efi"
$C bootctl install --esp-path=/boot/efi --no-variables
echo '{cmdline}' > "$R/etc/kernel/cmdline"
rel=$(ls "$R/boot" | sed -n 's/^vmlinuz-//p')
$C dracut --force "/boot/{without_ttm}$rel" "$rel"
echo 'add_drivers+=" {gpu_driver} "' > "$R/etc/dracut.conf.d/{drm_conf}"
$C dracut --force "/boot/initrd.img-$rel" "$rel"
$C kernel-install add "$rel" "/boot/vmlinuz-$rel" "/boot/initrd.img-$rel"
rm "$R/etc/kernel/cmdline"
umount "$R/proc"
cp -a "$R/boot/efi/." "$OUT/"
"""

def recipe() -> dict:
    import inspect

    source = "".join(inspect.getsource(f) for f in (prepare_esp, make_gpt_disk, build_uefi_image))
    return {"version": RECIPE_VERSION, "bios": vm.recipe(), "packages": list(UEFI_PACKAGES),
            "backports": list(BACKPORTS),
            "drm_conf": DRM_CONF, "without_ttm": WITHOUT_TTM, "drivers": list(DRIVERS),
            "dracut_omit": list(DRACUT_OMIT),
            "gpu_driver": GPU_DRIVER, "esp_mib": ESP_MIB, "esp_volid": ESP_VOLID,
            "build_cmdline": BUILD_CMDLINE,
            "prepare": PREPARE, "source": hashlib.sha256(source.encode()).hexdigest(),
            "ovmf": hashlib.sha256(OVMF_CODE.read_bytes() + OVMF_VARS.read_bytes()).hexdigest()
            if OVMF_CODE.is_file() and OVMF_VARS.is_file() else None}


def image_dir() -> Path:
    key = hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()[:16]
    return vm.cache_base() / f"uefi-{key}"


@dataclass(frozen=True)
class UefiImage:
    disk: Path
    efi_vars: Path
    kernel_release: str
    info: dict


def check_host_tools() -> None:
    vm.check_host_tools()
    missing = [str(p) for p in (OVMF_CODE, OVMF_VARS) if not p.is_file()]
    for tool in ("mkfs.fat", "mcopy", "unshare"):
        try:
            _tool(tool)
        except VMError:
            missing.append(tool)
    if missing:
        raise VMError("missing for the UEFI guest: " + ", ".join(missing) + "; install them "
                      "with `apt-get install ovmf dosfstools mtools util-linux`")


def prepare_esp(rootfs: Path, esp: Path, logfile: Path) -> None:
    """systemd-boot installed in the tree and the ESP's files made in ``esp`` (see module)."""
    esp.mkdir(parents=True, exist_ok=True)
    script = PREPARE.replace("{packages}", " ".join(UEFI_PACKAGES)).replace(
        "{backports}", " ".join(BACKPORTS)).replace("{mirror}", vm.MIRROR).replace(
        "{esp_mib}", str(ESP_MIB)).replace("{cmdline}", BUILD_CMDLINE).replace(
        "{drm_conf}", DRM_CONF).replace("{without_ttm}", WITHOUT_TTM).replace(
        "{drivers}", " ".join(DRIVERS)).replace("{gpu_driver}", GPU_DRIVER).replace(
        "{omit}", " ".join(DRACUT_OMIT))
    _run(vm._priv([_tool("unshare"), "-m", "--propagation", "private", "sh", "-c", script,
                   "prepare", str(rootfs), str(esp)]), log_to=logfile)
    fstab = rootfs / "etc" / "fstab"
    fstab.write_text(fstab.read_text() + f"UUID={ESP_UUID} /boot/efi vfat umask=0077 0 1\n")


def make_gpt_disk(rootfs: Path, esp: Path, disk: Path, logfile: Path) -> None:
    """A raw GPT disk: an EFI system partition (FAT32 holding ``esp``) and a Linux partition
    (ext4 made from ``rootfs``)."""
    fat = disk.with_name("esp.fat")
    fat.unlink(missing_ok=True)
    _run([_tool("mkfs.fat"), "-F", "32", "-n", "ESP", "-i", ESP_VOLID, "-C", str(fat),
          str(ESP_MIB << 10)], log_to=logfile)
    items = sorted(str(p) for p in esp.iterdir())
    _run([_tool("mcopy"), "-s", "-p", "-Q", "-i", str(fat), *items, "::/"], log_to=logfile)
    root_mib = vm.DISK_MIB - ROOT_START_MIB - 1  # the last MiB: GPT's backup header
    ext4 = disk.with_name("root.ext4")
    ext4.unlink(missing_ok=True)
    _run(vm._priv([_tool("mke2fs"), "-q", "-F", "-t", "ext4", "-U", vm.ROOT_UUID, "-L", "root",
                   "-d", str(rootfs), str(ext4), f"{root_mib}M"]), log_to=logfile)
    with disk.open("wb") as f:
        f.truncate(vm.DISK_MIB << 20)
    table = (f"label: gpt\nlabel-id: {DISK_GUID}\n"
             f"start={ESP_START_MIB << 11}, size={ESP_MIB << 11}, type=U, name=ESP\n"
             f"start={ROOT_START_MIB << 11}, size={root_mib << 11}, type=L, name=root\n")
    _run([_tool("sfdisk"), "--quiet", str(disk)], input=table.encode())
    for part, start in ((fat, ESP_START_MIB), (ext4, ROOT_START_MIB)):
        with vm._open_readable(part) as src, disk.open("r+b") as dst:
            dst.seek(start << 20)
            for chunk in iter(lambda: src.read(4 << 20), b""):
                if chunk.count(0) == len(chunk):
                    dst.seek(len(chunk), os.SEEK_CUR)
                else:
                    dst.write(chunk)
        _run(vm._priv(["rm", "-f", str(part)]))


def _vars_qcow2(dest: Path) -> Path:
    """A fresh copy of OVMF's variable store, as qcow2 (savevm needs every writable drive to
    take snapshots; raw cannot)."""
    dest.unlink(missing_ok=True)
    _run([_tool("qemu-img"), "convert", "-f", "raw", "-O", "qcow2", str(OVMF_VARS), str(dest)])
    return dest


def uefi_machine(disk: Path, efi_vars: Path, workdir: Path, **kw) -> Machine:
    return Machine(disk, workdir, firmware=OVMF_CODE, efi_vars=efi_vars, **kw)


def build_uefi_image(dest: Path) -> UefiImage:
    check_host_tools()
    work = dest.with_name(dest.name + ".build")
    if work.exists():
        _run(vm._priv(["rm", "-rf", "--one-file-system", str(work)]))
    work.mkdir(parents=True)
    logfile = work / "build.log"
    started = time.monotonic()
    rootfs = work / "rootfs"
    tarball, debootstrap_s = vm.ensure_base(logfile)
    t = time.monotonic()
    vm.unpack_base(tarball, rootfs, logfile)
    timings = {"debootstrap_s": debootstrap_s, "unpack_s": round(time.monotonic() - t, 1)}
    vm.configure_rootfs(rootfs)
    # dracut's image loads virtio_console before the switch to the root file system, so
    # systemd's getty generator finds hvc0 and would start a login prompt on it that reads the
    # test driver's channel (initramfs-tools loads the driver later, after the generators)
    getty = rootfs / "etc" / "systemd" / "system" / "serial-getty@hvc0.service"
    getty.unlink(missing_ok=True)
    getty.symlink_to("/dev/null")
    t = time.monotonic()
    vm.install_dependencies(rootfs, vm.ensure_wheelhouse(), logfile)
    timings["dependencies_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    log("chroot: systemd-boot and dracut, bootctl install, dracut, kernel-install add")
    esp = work / "esp"
    prepare_esp(rootfs, esp, logfile)
    release = vm._kernel_files(rootfs)[0]
    timings["chroot_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    raw = work / "disk.raw"
    make_gpt_disk(rootfs, esp, raw, logfile)
    timings["make_disk_s"] = round(time.monotonic() - t, 1)
    efi_vars = _vars_qcow2(work / "vars.qcow2")

    t = time.monotonic()
    tmp_dest = dest.with_name(dest.name + ".new")
    shutil.rmtree(tmp_dest, ignore_errors=True)
    tmp_dest.mkdir(parents=True)
    _run([_tool("qemu-img"), "convert", "-O", "qcow2", str(raw), str(tmp_dest / "disk.qcow2")])
    shutil.copyfile(efi_vars, tmp_dest / "vars.qcow2")
    timings["convert_s"] = round(time.monotonic() - t, 1)
    timings["total_s"] = round(time.monotonic() - started, 1)
    info = {"recipe": recipe(), "kernel_release": release, "timings": timings,
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (tmp_dest / "image.json").write_text(json.dumps(info, indent=2) + "\n")
    for name in ("disk.qcow2", "vars.qcow2"):
        os.chmod(tmp_dest / name, 0o444)
    os.replace(tmp_dest, dest)
    _run(vm._priv(["rm", "-rf", "--one-file-system", str(work)]))
    log(f"UEFI image ready in {dest} ({timings['total_s']:.0f} s: {timings})")
    return UefiImage(dest / "disk.qcow2", dest / "vars.qcow2", release, info)


def _load(dest: Path) -> UefiImage | None:
    try:
        info = json.loads((dest / "image.json").read_text())
    except (OSError, ValueError):
        return None
    if not ((dest / "disk.qcow2").is_file() and (dest / "vars.qcow2").is_file()):
        return None
    return UefiImage(dest / "disk.qcow2", dest / "vars.qcow2", info["kernel_release"], info)


def ensure_uefi_image() -> UefiImage:
    """The cached UEFI disk of this recipe; built on first use (under a file lock)."""
    return vm.cached(image_dir(), _load, build_uefi_image)


# -- a session's booted guest with ojai ------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    disk: Path
    efi_vars: Path
    #: the read-only disk that carried the wheel: attached to the snapshot's guest, so every
    #: copy started from it has it too (``-loadvm`` wants the same devices)
    payload: Path


def check_uefi_image(m: vm.Machine, release: str) -> None:
    """What the image must be, checked in its first boot (the boot :func:`uefi_booted` takes
    the snapshot in for a new wheel anyway; :func:`vm.check_once`): OVMF started systemd-boot
    from the ESP, not GRUB; dracut made both initramfs images, the entry's with ttm inside and
    the other without it; kernel-install reads the running command line; systemd 254's bootctl
    and ukify are there; the venv's dependencies are whole."""
    cmdline = m.succeed("cat /proc/cmdline")
    if "BOOT_IMAGE=" in cmdline:
        raise VMError(f"GRUB booted the UEFI disk: /proc/cmdline is {cmdline!r}; the cached "
                      f"image is wrong: remove {image_dir()} to make it again")
    m.succeed("test -d /sys/firmware/efi && findmnt /boot/efi")
    # UTF-16 after a 4-byte attribute word
    m.succeed("tr -d '\\000' < /sys/firmware/efi/efivars/"
              "LoaderInfo-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f | grep -qa systemd-boot")
    m.succeed("test -e /sys/module/ttm/parameters/pages_limit")
    m.succeed(f"lsinitrd /boot/initrd.img-{release} | grep -q '/ttm/ttm.ko' && "
              f"! lsinitrd /boot/{WITHOUT_TTM}{release} | grep -q '/ttm/ttm.ko' && "
              f"cmp /boot/initrd.img-{release} $(find /boot/efi -name 'initrd.img-{release}')")
    m.succeed("test ! -e /etc/kernel/cmdline && test -f /etc/default/grub")
    m.succeed("bootctl --version | grep -q '^systemd 254' && test -x /usr/lib/systemd/ukify "
              "&& test -x /usr/lib/kernel/install.d/60-ukify.install")
    m.succeed("/opt/ojai/bin/pip check")


def uefi_booted(workdir: Path, wheel: Path) -> Snapshot:
    """Overlays of the cached disk and variable store holding snapshot :data:`vm.SNAPSHOT` of
    a guest booted through systemd-boot with ``wheel`` installed (one boot: pip installs the
    wheel from a small read-only second disk, with no index, then ``savevm``)."""
    image = ensure_uefi_image()
    workdir.mkdir(parents=True, exist_ok=True)
    payload = vm.wheel_payload(workdir, wheel)
    disk = vm.overlay(image.disk, workdir / "booted.qcow2")
    efi_vars = vm.overlay(image.efi_vars, workdir / "booted-vars.qcow2")
    m = uefi_machine(disk, efi_vars, workdir / "boot", name="uefi-snapshot", payload=payload)
    try:
        m.wait_for_boot()
        vm.check_once(image.disk.parent, lambda: check_uefi_image(m, image.kernel_release))
        vm.install_wheel(m)
        m.savevm(vm.SNAPSHOT)
    finally:
        m.kill()
    shutil.rmtree(workdir / "boot", ignore_errors=True)
    for path in (disk, efi_vars):
        os.chmod(path, 0o444)
    log(f"UEFI snapshot after {m.boot_times[-1]:.0f} s of boot: {disk}")
    return Snapshot(disk, efi_vars, payload)


def ensure_uefi_snapshot(work: Path) -> Snapshot:
    """The snapshot of :func:`uefi_booted` for this checkout's wheel, cached like the BIOS
    guest's (:func:`vm.ensure_ojai_snapshot`) by the image's recipe and the wheel's contents::

        ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/vm/uefi-installed/<key>/booted.qcow2,
        booted-vars.qcow2, payload.ext4, done
    """
    wheel = vm.build_ojai_wheel(work / "wheel")
    key = hashlib.sha256(f"{image_dir().name} {vm.wheel_digest(wheel)}".encode()).hexdigest()[:16]
    dest = vm.installed_entry(vm.cache_base() / "uefi-installed", key,
                              lambda dest: uefi_booted(dest, wheel))
    return Snapshot(dest / "booted.qcow2", dest / "booted-vars.qcow2", dest / "payload.ext4")


def uefi_from_snapshot(snapshot: Snapshot, workdir: Path, name: str) -> Machine:
    """A running UEFI guest on copies of the snapshot's disk and variable store."""
    workdir.mkdir(parents=True, exist_ok=True)
    disk, efi_vars = workdir / "disk.qcow2", workdir / "vars.qcow2"
    for src, dst in ((snapshot.disk, disk), (snapshot.efi_vars, efi_vars)):
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o644)
    return vm.take_over(uefi_machine(disk, efi_vars, workdir, name=name, loadvm=vm.SNAPSHOT,
                                     payload=snapshot.payload))


@pytest.fixture(scope="session")
def uefi_snapshot(tmp_path_factory) -> Snapshot:
    return ensure_uefi_snapshot(tmp_path_factory.mktemp("uefi-booted"))


@pytest.fixture
def uefi_vm(uefi_snapshot, tmp_path, request):
    """A guest booted through OVMF and systemd-boot, on its own disk and variable store,
    started from the session's snapshot; killed (its qemu only) after the test."""
    machine = uefi_from_snapshot(uefi_snapshot, tmp_path / "vm", request.node.name[:40])
    yield machine
    machine.kill()


def main(argv: list[str]) -> int:
    started = time.monotonic()
    image = ensure_uefi_image()
    print(image.disk)
    log(f"UEFI image {image.disk} ready after {time.monotonic() - started:.0f} s "
        f"(kernel {image.kernel_release})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
