"""A real Debian 12 machine for the tests: built once from Debian's packages, booted with qemu.

The image is made without loop devices or mounts, so it builds in a container as well:

1. ``debootstrap --variant=minbase bookworm`` with the kernel, GRUB (BIOS), systemd, udev,
   kmod, initramfs-tools and python3-venv (:data:`PACKAGES`), kept as a tarball of the tree
   keyed by its own recipe (:func:`ensure_base`: ``vm/base/<hash>/rootfs.tar``), so that a
   change to the steps below, or a second guest made from the same packages, unpacks it in
   seconds instead of debootstrapping again;
2. a few files of our own in it (:func:`configure_rootfs`): fstab, a short GRUB timeout, the
   kernel console on the serial port, and the control channel of the driver below
   (``tests/support/vm_guest/``); the units and drivers of every boot that no test uses masked
   and blacklisted (:data:`UNUSED_UNITS`, :data:`UNUSED_MODULES`); then ojai's dependencies
   (:func:`install_dependencies`);
3. ``mke2fs -t ext4 -d ROOTFS`` makes the root file system from the folder, ``sfdisk`` gives a
   raw disk one MBR partition, the file system is copied into it;
4. a first boot with ``-kernel``/``-initrd`` runs ``grub-install /dev/vda``,
   ``update-initramfs -u`` (``MODULES=dep``: the modules this machine needs) and ``update-grub``
   inside the guest, so that from then on SeaBIOS boots the disk through its own GRUB;
5. the disk is stored as qcow2 in the cache, keyed by a hash of this recipe::

    ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/vm/<recipe hash>/disk.qcow2, image.json

Its first boot from the disk alone, the one the snapshot of a booted guest with ojai is taken
in (:func:`booted_snapshot`), checks the result before anything else (:func:`check_image`, once
per image: a ``checked.json`` beside it says it was):
GRUB started the kernel and the ``ttm`` module is live (``-vga std``: the bochs DRM driver uses
TTM). Tests never write to that disk: each boots a copy-on-write overlay (``qemu-img create -b``).
The guest runs under TCG (``-accel tcg``; KVM guests hang on the CI machines), with 1 CPU, no
network device (unless a test asks for SSH: :mod:`support.vm_ssh`), and one way in: a virtio console whose host end is a socket file, where
``/usr/local/sbin/test-shell`` runs the commands the :class:`Machine` driver sends (in the style
of the NixOS test driver: ``machine.succeed(...)``, ``machine.fail(...)``, ``machine.reboot()``).

ojai goes in as a person would install it, with pip into a venv, from wheels (the guest has no
network): its dependencies' wheels are downloaded on the host into a cached wheelhouse
(``vm/wheels/<hash>/``) and installed into the venv ``/opt/ojai`` while the image is built, by
the image's own python3 and pip run in a ``chroot`` (pip under TCG would take many minutes);
the wheel built from this checkout goes in once per checkout (:func:`booted_snapshot`), from a
small second disk (``mke2fs -d``), with pip in the guest's first boot, on one more overlay
whose snapshot of that running guest the tests start from.

Building needs root (debootstrap, and ``mke2fs -d`` keeps owners and modes), qemu, debootstrap,
sfdisk and mke2fs (``apt-get install qemu-system-x86 qemu-utils debootstrap fdisk``). A file
lock keeps two processes from building at once. Run this file as a script to build ahead of
pytest (CI does); ``--boot-shell`` then boots the image and gives you a shell in it.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GUEST_FILES = Path(__file__).resolve().parent / "vm_guest"

SUITE = "bookworm"
#: the mirror is not part of the recipe: any Debian mirror gives the same packages
MIRROR = os.environ.get("OJAI_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ("linux-image-amd64", "grub-pc", "systemd-sysv", "udev", "kmod", "initramfs-tools",
            "python3", "python3-venv", "e2fsprogs", "openssh-server")
DISK_MIB = 4096
PART_START_MIB = 1
ROOT_UUID = "0a1e5c2d-8b7f-4c3e-9d21-6f0b3a7c9e15"
HOSTNAME = "ojai-vm"
#: the guest's RAM: ojai's GPU budget must leave the OS 4 GiB, so 1 GiB for the GPU needs ~5.
#: Under TCG the host only backs the pages the guest touches.
MEMORY_MIB = 6144
#: one vCPU: with two, a guest under multi-threaded TCG once hung at boot with both vCPUs in
#: soft lockup (systemd, journald); with one, every boot of the scenarios came up
CPUS = 1
#: x86-64-v2: what the wheels of NumPy 2 (a dependency of gguf) need; plain qemu64 lacks
#: SSE4.2 and POPCNT
GUEST_CPU = "qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt"
#: the Python of bookworm, for the dependency wheels
GUEST_PYTHON = "3.11"
GUEST_GLIBC_MINOR = 36
#: raise when the recipe changes in a way the hash does not see
RECIPE_VERSION = 1

BOOT_TIMEOUT = float(os.environ.get("OJAI_VM_BOOT_TIMEOUT", "1800"))
COMMAND_TIMEOUT = 600.0
#: the longest line the guest's control channel takes: it is a tty (the virtio console), whose
#: line discipline keeps 4096 bytes of a line, newline included, and drops the rest
CHANNEL_LINE = 4095
#: bytes of a file per command of :meth:`Machine.write_bytes` (base64 twice stays inside a line)
WRITE_CHUNK = 2048

#: started in every boot and used by no test (masked; see :func:`configure_rootfs`): the
#: binfmt, hugepage, POSIX-queue and kernel debug/tracing mounts, the utmp records, the
#: random seed kept across boots
UNUSED_UNITS = ("systemd-binfmt.service", "proc-sys-fs-binfmt_misc.automount",
                "dev-hugepages.mount", "dev-mqueue.mount", "sys-kernel-debug.mount",
                "sys-kernel-tracing.mount", "systemd-update-utmp.service",
                "systemd-update-utmp-runlevel.service", "systemd-random-seed.service")
#: drivers of qemu's emulated hardware that udev loads in every boot and no test uses: KVM (the
#: guest CPU model carries svm), the floppy, parallel port, PC speaker, PS/2 mouse, the IDE and
#: SATA controllers (the disks are virtio), the CD-ROM, SMBus, cpufreq and fw_cfg. The GPU's
#: (bochs, drm, ttm) stay: the tests need TTM live.
UNUSED_MODULES = ("kvm_amd", "kvm", "irqbypass", "ccp", "floppy", "parport_pc", "ppdev", "parport",
                  "pcspkr", "psmouse", "serio_raw", "i2c_piix4", "i2c_i801", "lpc_ich", "sr_mod",
                  "cdrom", "sg", "ata_piix", "ata_generic", "ahci", "libahci", "powernow_k8",
                  "qemu_fw_cfg")
#: the guest kernel's arguments besides its root: the serial console, and no mitigations of
#: speculative execution. With them, the kernel sends every indirect call through a retpoline
#: thunk (the guest reports "spectre_v2: Mitigation: Retpolines" on this CPU model) and adds
#: barriers on every entry, all of it emulated instruction by instruction under TCG, for no
#: protection a throwaway guest needs. Measured in one guest: ``update-initramfs -u`` 92.9 ->
#: 81.4 s, a reboot 41.8 -> 32.1 s.
GUEST_KERNEL_ARGS = "console=ttyS0,115200n8 mitigations=off"
GRUB_SETTINGS = {"GRUB_TIMEOUT": "0", "GRUB_CMDLINE_LINUX": f'"{GUEST_KERNEL_ARGS}"'}
KERNEL_APPEND = f"root=UUID={ROOT_UUID} ro {GUEST_KERNEL_ARGS}"


class VMError(RuntimeError):
    """The virtual machine could not be built, booted or driven."""


def log(message: str) -> None:
    print(f"[vm] {message}", file=sys.stderr, flush=True)


# -- the recipe and the cache ----------------------------------------------------------------
def recipe() -> dict:
    """Everything the built disk depends on; its hash names the cache folder."""
    guest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(GUEST_FILES.iterdir()) if p.is_file()}
    return {"version": RECIPE_VERSION, "base": base_recipe(),
            "disk_mib": DISK_MIB, "part_start_mib": PART_START_MIB, "root_uuid": ROOT_UUID,
            "hostname": HOSTNAME, "grub": GRUB_SETTINGS, "guest_files": guest,
            "unused": {"units": UNUSED_UNITS, "modules": UNUSED_MODULES},
            "configure": hashlib.sha256(_configure_source().encode()).hexdigest(),
            "dependencies": _dependencies(), "guest_python": GUEST_PYTHON}


def _configure_source() -> str:
    """The code that makes the disk (not the driver): a change to it is a new recipe."""
    import inspect

    return "".join(inspect.getsource(f) for f in (configure_rootfs, make_disk, build_image))


def recipe_hash() -> str:
    return hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()[:16]


def cache_base() -> Path:
    base = os.environ.get("OJAI_TEST_CACHE") or str(Path.home() / ".cache" / "ojai-tests")
    return Path(base).expanduser() / "vm"


def image_dir() -> Path:
    return cache_base() / recipe_hash()


@dataclass(frozen=True)
class Image:
    """A built disk: boot overlays of it, never the file itself."""

    disk: Path
    kernel_release: str
    info: dict


def _priv(argv: list[str]) -> list[str]:
    """``argv`` run as root: directly when we are root, else through ``sudo -n``."""
    if os.geteuid() == 0:
        return argv
    if shutil.which("sudo") is None:
        raise VMError(f"building the test machine needs root for `{argv[0]}`; run as root "
                      "or install sudo")
    return ["sudo", "-n", *argv]


def _run(argv: list[str], *, log_to: Path | None = None, check: bool = True,
         timeout: float | None = None, **kw) -> subprocess.CompletedProcess:
    if log_to is not None:
        with log_to.open("ab") as out:
            out.write(f"\n$ {' '.join(argv)}\n".encode())
            out.flush()
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, **kw)
    else:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        detail = ""
        if log_to is not None:
            detail = log_to.read_text(errors="replace")[-3000:]
        else:
            detail = (proc.stderr or b"").decode(errors="replace")[-3000:]
        raise VMError(f"`{' '.join(argv)}` failed with exit code {proc.returncode}:\n{detail}")
    return proc


def check_host_tools() -> None:
    missing = [t for t in ("qemu-system-x86_64", "qemu-img", "debootstrap", "sfdisk", "mke2fs")
               if shutil.which(t) is None and not Path("/usr/sbin", t).exists()
               and not Path("/sbin", t).exists()]
    if missing:
        raise VMError("missing host tools: " + ", ".join(missing) + "; install them with "
                      "`apt-get install qemu-system-x86 qemu-utils debootstrap fdisk e2fsprogs`")


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/sbin"):
        if Path(d, name).exists():
            return str(Path(d, name))
    raise VMError(f"{name} is not installed")


# -- building the image ----------------------------------------------------------------------
def debootstrap(rootfs: Path, logfile: Path) -> None:
    log(f"debootstrap {SUITE} into {rootfs} (about 5 minutes)")
    _run(_priv([_tool("debootstrap"), "--variant=minbase",
                "--include=" + ",".join(PACKAGES), SUITE, str(rootfs), MIRROR]), log_to=logfile)


def base_recipe() -> dict:
    """What the debootstrapped tree depends on (the mirror is not part of it)."""
    return {"version": 1, "suite": SUITE, "variant": "minbase", "packages": list(PACKAGES)}


def base_dir() -> Path:
    key = hashlib.sha256(json.dumps(base_recipe(), sort_keys=True).encode()).hexdigest()[:16]
    return cache_base() / "base" / key


def ensure_base(logfile: Path) -> tuple[Path, float]:
    """The tarball of the debootstrapped tree of :func:`base_recipe` (built once, under a file
    lock; owners, modes and extended attributes kept) and how long making it took."""
    dest = base_dir()
    tarball = dest / "rootfs.tar"
    info = dest / "base.json"
    dest.mkdir(parents=True, exist_ok=True)
    with (dest / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (tarball.is_file() and info.is_file()):
            started = time.monotonic()
            rootfs = dest / "rootfs"
            if rootfs.exists():
                _run(_priv(["rm", "-rf", "--one-file-system", str(rootfs)]))
            debootstrap(rootfs, logfile)
            part = dest / "rootfs.tar.part"
            _run(_priv(["tar", "--numeric-owner", "--xattrs", "--acls", "-C", str(rootfs),
                        "-cf", str(part), "."]), log_to=logfile)
            os.replace(part, tarball)
            _run(_priv(["rm", "-rf", "--one-file-system", str(rootfs)]))
            info.write_text(json.dumps({"recipe": base_recipe(), "seconds": round(
                time.monotonic() - started, 1)}, indent=2) + "\n")
        return tarball, float(json.loads(info.read_text())["seconds"])


def unpack_base(tarball: Path, rootfs: Path, logfile: Path) -> None:
    """A fresh tree from the base tarball (as root: devices, owners and modes as debootstrap
    made them)."""
    if rootfs.exists():
        _run(_priv(["rm", "-rf", "--one-file-system", str(rootfs)]))
    rootfs.mkdir(parents=True)
    _run(_priv(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls", "-C",
                str(rootfs), "-xpf", str(tarball)]), log_to=logfile)


def _set_shell_var(text: str, name: str, value: str) -> str:
    """Set ``NAME=value`` in a shell-variable file (GRUB's defaults), replacing the line."""
    pattern = re.compile(rf"^#?\s*{re.escape(name)}=.*$", re.M)
    line = f"{name}={value}"
    if pattern.search(text):
        return pattern.sub(line, text, count=1)
    return text.rstrip("\n") + "\n" + line + "\n"


def configure_rootfs(rootfs: Path) -> None:
    """Our files in the debootstrapped tree: how it mounts its root, how GRUB shows the boot,
    and the driver's control channel. Everything else is Debian's."""
    etc = rootfs / "etc"
    (etc / "fstab").write_text(f"UUID={ROOT_UUID} / ext4 errors=remount-ro 0 1\n")
    (etc / "hostname").write_text(HOSTNAME + "\n")
    (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME}\n")
    (etc / "resolv.conf").unlink(missing_ok=True)
    grub = etc / "default" / "grub"
    text = grub.read_text()
    for name, value in GRUB_SETTINGS.items():
        text = _set_shell_var(text, name, value)
    grub.write_text(text)
    sbin = rootfs / "usr" / "local" / "sbin"
    sbin.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(GUEST_FILES / "test-shell", sbin / "test-shell")
    os.chmod(sbin / "test-shell", 0o755)
    units = etc / "systemd" / "system"
    shutil.copyfile(GUEST_FILES / "test-shell.service", units / "test-shell.service")
    wants = units / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / "test-shell.service"
    link.unlink(missing_ok=True)
    link.symlink_to("/etc/systemd/system/test-shell.service")
    # only the modules this machine needs in the initramfs (Debian's own choice besides
    # "most"): under TCG a small initramfs loads and rebuilds several times faster
    conf = etc / "initramfs-tools" / "initramfs.conf"
    conf.write_text(_set_shell_var(conf.read_text(), "MODULES", "dep"))
    # under TCG on a busy host a boot can be ten times slower than on hardware: no start job,
    # device wait or service watchdog may give up after Debian's 90 s / 3 min
    confd = etc / "systemd" / "system.conf.d"
    confd.mkdir(parents=True, exist_ok=True)
    (confd / "slow-host.conf").write_text("[Manager]\nDefaultTimeoutStartSec=30min\n"
                                          "DefaultDeviceTimeoutSec=30min\nServiceWatchdogs=no\n")
    # SSH, for the boots that ask for it (:mod:`support.vm_ssh`): off at boot until a test
    # enables it, keys only (the key comes in at test time), the one virtio NIC such a boot
    # gets at the address qemu's user-mode network expects; systemd-networkd stays disabled
    for link in (units / "multi-user.target.wants" / "ssh.service", units / "sshd.service"):
        link.unlink(missing_ok=True)
    sshd = etc / "ssh" / "sshd_config.d"
    sshd.mkdir(parents=True, exist_ok=True)
    (sshd / "test.conf").write_text("PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                                    "PermitRootLogin prohibit-password\nUseDNS no\n")
    network = etc / "systemd" / "network"
    network.mkdir(parents=True, exist_ok=True)
    (network / "20-user-net.network").write_text(
        "[Match]\nName=en*\n\n[Network]\nAddress=10.0.2.15/24\nLinkLocalAddressing=no\n"
        "IPv6AcceptRA=no\n")
    # no network: timers that would try it only add noise to the boots; and what a boot starts
    # that no test uses, each competing for the guest's one vCPU under TCG (systemd-analyze
    # on a reboot of the scenarios' guest: 31.6 s to the default target, the login prompts on
    # tty1-6 and ttyS0 on its critical chain, e2scrub_reap 9.3 s beside it; the kernel's
    # messages still go to ttyS0, and the tests come in through the virtio console)
    for unit in ("apt-daily.timer", "apt-daily-upgrade.timer", "getty-static.service",
                 "getty@tty1.service", "serial-getty@ttyS0.service", "e2scrub_reap.service",
                 "e2scrub_all.timer", "fstrim.timer", "dpkg-db-backup.timer",
                 "systemd-tmpfiles-clean.timer", "modprobe@dm_mod.service",
                 "modprobe@efi_pstore.service", "modprobe@fuse.service", "modprobe@loop.service",
                 "sys-fs-fuse-connections.mount", "sys-kernel-config.mount",
                 *UNUSED_UNITS):
        masked = units / unit
        masked.unlink(missing_ok=True)
        masked.symlink_to("/dev/null")
    # the drivers udev would load for qemu's other devices: each module load (and its
    # signature check) is seconds of the one vCPU in every boot
    (etc / "modprobe.d" / "test-guest-unused.conf").write_text(
        "# devices of qemu's machine that no test uses\n"
        + "".join(f"blacklist {module}\n" for module in UNUSED_MODULES))
    # the .deb files debootstrap kept
    for deb in (rootfs / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        deb.unlink()


def install_dependencies(rootfs: Path, wheelhouse: Path, logfile: Path) -> None:
    """A venv ``/opt/ojai`` in the tree with ojai's dependencies, made by the tree's own
    python3 and pip (``chroot``: native speed, where pip under TCG takes many minutes) from
    the wheelhouse, with no index."""
    wheels = rootfs / "var" / "tmp" / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    shutil.copytree(wheelhouse, wheels)
    # a clean environment: the host's PIP_* settings are not the guest's
    chroot = ["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
              "chroot", str(rootfs)]
    try:
        _run(_priv([*chroot, "/usr/bin/python3", "-m", "venv", "/opt/ojai"]), log_to=logfile)
        _run(_priv([*chroot, "/opt/ojai/bin/pip", "install", "--quiet",
                    "--no-index", "--no-cache-dir", "--find-links", "/var/tmp/wheels",
                    "-r", "/var/tmp/wheels/requirements.txt"]), log_to=logfile)
    finally:
        shutil.rmtree(wheels, ignore_errors=True)


def _kernel_files(rootfs: Path) -> tuple[str, Path, Path]:
    kernels = sorted((rootfs / "boot").glob("vmlinuz-*"))
    if len(kernels) != 1:
        raise VMError(f"expected one kernel in {rootfs / 'boot'}, found {kernels}")
    release = kernels[0].name.removeprefix("vmlinuz-")
    initrd = rootfs / "boot" / f"initrd.img-{release}"
    if not initrd.is_file():
        raise VMError(f"no {initrd}")
    return release, kernels[0], initrd


def make_disk(rootfs: Path, disk: Path, logfile: Path) -> None:
    """A raw disk: one bootable MBR partition holding an ext4 made from ``rootfs``."""
    part_mib = DISK_MIB - PART_START_MIB
    part = disk.with_name("root.ext4")
    part.unlink(missing_ok=True)
    log(f"mke2fs -d {rootfs} ({part_mib} MiB)")
    _run(_priv([_tool("mke2fs"), "-q", "-F", "-t", "ext4", "-U", ROOT_UUID, "-L", "root",
                "-d", str(rootfs), str(part), f"{part_mib}M"]), log_to=logfile)
    with disk.open("wb") as f:
        f.truncate(DISK_MIB << 20)
    start = PART_START_MIB << 20 >> 9
    _run([_tool("sfdisk"), "--quiet", str(disk)], input=f"start={start}, type=83, bootable\n".encode(),
         log_to=None)
    with _open_readable(part) as src, disk.open("r+b") as dst:
        dst.seek(PART_START_MIB << 20)
        for chunk in iter(lambda: src.read(4 << 20), b""):
            if chunk.count(0) == len(chunk):
                dst.seek(len(chunk), os.SEEK_CUR)  # keep the raw disk sparse
            else:
                dst.write(chunk)
    _run(_priv(["rm", "-f", str(part)]))


def _open_readable(path: Path):
    if os.access(path, os.R_OK):
        return path.open("rb")
    _run(_priv(["chmod", "a+r", str(path)]))
    return path.open("rb")


def build_image(dest: Path) -> Image:
    """Build the disk into ``dest`` (a new folder); see the module docstring."""
    check_host_tools()
    work = dest.with_name(dest.name + ".build")
    work.mkdir(parents=True, exist_ok=True)
    logfile = work / "build.log"
    started = time.monotonic()
    rootfs = work / "rootfs"
    tarball, debootstrap_s = ensure_base(logfile)
    t = time.monotonic()
    unpack_base(tarball, rootfs, logfile)
    timings = {"debootstrap_s": debootstrap_s, "unpack_s": round(time.monotonic() - t, 1)}
    configure_rootfs(rootfs)
    t = time.monotonic()
    install_dependencies(rootfs, ensure_wheelhouse(), logfile)
    timings["dependencies_s"] = round(time.monotonic() - t, 1)
    release, vmlinuz, initrd = _kernel_files(rootfs)
    kernel = work / "vmlinuz"
    initramfs = work / "initrd.img"
    shutil.copyfile(vmlinuz, kernel)
    shutil.copyfile(initrd, initramfs)
    t = time.monotonic()
    raw = work / "disk.raw"
    make_disk(rootfs, raw, logfile)
    timings["make_disk_s"] = round(time.monotonic() - t, 1)

    log("first boot (direct kernel): grub-install /dev/vda, update-initramfs, update-grub")
    t = time.monotonic()
    with Machine(raw, work / "boot1", disk_format="raw", kernel=kernel, initrd=initramfs,
                 append=KERNEL_APPEND, name="image-build") as m:
        m.wait_for_boot()
        m.succeed("grub-install --target=i386-pc /dev/vda 2>&1 && update-initramfs -u 2>&1 "
                  "&& update-grub 2>&1", timeout=1800)
        m.succeed("test -s /boot/grub/grub.cfg")
        m.shutdown()
    timings["first_boot_s"] = round(time.monotonic() - t, 1)

    t = time.monotonic()
    tmp_dest = dest.with_name(dest.name + ".new")
    if tmp_dest.exists():
        shutil.rmtree(tmp_dest)
    tmp_dest.mkdir(parents=True)
    _run([_tool("qemu-img"), "convert", "-O", "qcow2", str(raw), str(tmp_dest / "disk.qcow2")])
    timings["convert_s"] = round(time.monotonic() - t, 1)
    timings["total_s"] = round(time.monotonic() - started, 1)
    info = {"recipe": recipe(), "recipe_hash": recipe_hash(), "kernel_release": release,
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "timings": timings}
    (tmp_dest / "image.json").write_text(json.dumps(info, indent=2) + "\n")
    os.chmod(tmp_dest / "disk.qcow2", 0o444)
    os.replace(tmp_dest, dest)
    _run(_priv(["rm", "-rf", "--one-file-system", str(work)]))
    log(f"image ready in {dest} ({timings['total_s']:.0f} s: {timings})")
    return Image(dest / "disk.qcow2", release, info)


def _load_image(dest: Path) -> Image | None:
    try:
        info = json.loads((dest / "image.json").read_text())
    except (OSError, ValueError):
        return None
    disk = dest / "disk.qcow2"
    if not disk.is_file():
        return None
    return Image(disk, info["kernel_release"], info)


def cached(dest: Path, load, build):
    """``load(dest)``, or, when nothing is cached there yet, ``build(dest)`` under a file lock
    beside it (checked again once the lock is held: another process may have built it)."""
    found = load(dest)
    if found is not None:
        return found
    dest.parent.mkdir(parents=True, exist_ok=True)
    with (dest.parent / f".{dest.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = load(dest)
        return found if found is not None else build(dest)


def ensure_image() -> Image:
    """The cached disk of this recipe; builds it on first use (a file lock serialises builds)."""
    return cached(image_dir(), _load_image, build_image)


# -- ojai in the guest -----------------------------------------------------------------------
def _dependencies() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return sorted(project["dependencies"])


def _guest_platforms() -> list[str]:
    return [f"manylinux_2_{minor}_x86_64" for minor in range(GUEST_GLIBC_MINOR, 4, -1)] + [
        "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]


def _wheelhouse_key() -> str:
    return hashlib.sha256(json.dumps({"deps": _dependencies(), "python": GUEST_PYTHON,
                                      "glibc": GUEST_GLIBC_MINOR}).encode()).hexdigest()[:16]


def ensure_wheelhouse() -> Path:
    """Wheels of ojai's dependencies for the guest's Python, cached by the dependency list.

    The guest has no network, so they are downloaded here (``pip download`` for CPython
    3.11 on glibc 2.36, wheels only) and copied in.
    """
    deps = _dependencies()
    key = _wheelhouse_key()
    dest = cache_base() / "wheels" / key
    if (dest / "requirements.txt").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with (dest.parent / f".{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (dest / "requirements.txt").is_file():
            return dest
        tmp = dest.with_name(key + ".new")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        log(f"downloading the wheels of {', '.join(deps)} for CPython {GUEST_PYTHON}")
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(tmp),
                "--only-binary=:all:", "--python-version", GUEST_PYTHON, "--implementation",
                "cp", "--abi", "cp" + GUEST_PYTHON.replace(".", ""), "--abi", "abi3", "--abi", "none"]
        for platform in _guest_platforms():
            argv += ["--platform", platform]
        _run(argv + deps)
        (tmp / "requirements.txt").write_text("\n".join(deps) + "\n")
        os.replace(tmp, dest)
    return dest


def build_ojai_wheel(out: Path) -> Path:
    """The wheel of this checkout (``pip wheel --no-deps``)."""
    out.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out),
          str(REPO)])
    wheels = sorted(out.glob("ojai-*.whl"))
    if len(wheels) != 1:
        raise VMError(f"expected one ojai wheel in {out}, found {wheels}")
    return wheels[0]


def make_payload_disk(folder: Path, image: Path) -> Path:
    """A small ext4 image holding ``folder`` (no partition table), for a second virtio disk."""
    size_mib = 32 + sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) * 2 // (1 << 20)
    _run([_tool("mke2fs"), "-q", "-F", "-t", "ext4", "-L", "payload", "-d", str(folder),
          str(image), f"{size_mib}M"])
    return image


def wheel_payload(workdir: Path, wheel: Path) -> Path:
    """``workdir/payload.ext4``: a small read-only disk holding ``wheel``, for a second virtio
    disk. It stays attached to the guests started from a snapshot taken with it (``-loadvm``
    wants the same devices)."""
    folder = workdir / "payload"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copyfile(wheel, folder / wheel.name)
    payload = make_payload_disk(folder, workdir / "payload.ext4")
    shutil.rmtree(folder)
    os.chmod(payload, 0o444)
    return payload


#: how the wheel on the payload disk goes into the booted guest's venv ``/opt/ojai``
INSTALL_WHEEL = ("mkdir -p /mnt/payload && mount -o ro /dev/vdb /mnt/payload",
                 "/opt/ojai/bin/pip install --quiet --no-index --no-cache-dir --no-deps "
                 "/mnt/payload/ojai-*.whl && ln -sf /opt/ojai/bin/ojai /usr/local/bin/ojai",
                 "umount /mnt/payload && /opt/ojai/bin/pip check && ojai --version && sync")


def check_image(m: Machine) -> None:
    """What the image must be, checked in its first boot from its own disk (the boot
    :func:`booted_snapshot` makes for a new wheel anyway; :func:`check_once`): SeaBIOS booted the
    GRUB on the disk, the ttm module's limit is there, the venv's dependencies are whole, and
    sshd is configured but not started (tests/support/vm_ssh.py starts it)."""
    cmdline = m.succeed("cat /proc/cmdline")
    if "BOOT_IMAGE=" not in cmdline:
        raise VMError(f"the disk did not boot through its GRUB: /proc/cmdline is {cmdline!r}; "
                      f"the cached image is wrong: remove {image_dir()} to make it again")
    m.succeed("test -e /sys/module/ttm/parameters/pages_limit")
    m.succeed("/opt/ojai/bin/pip check")
    # sshd's config and host keys (``-t`` wants the folder ssh.service makes at start)
    m.succeed("install -d -m 755 /run/sshd && /usr/sbin/sshd -t "
              "&& ! systemctl is-enabled ssh.service")


#: written beside a cached image once its first boot has checked it: later snapshots of it (a
#: new wheel) skip the check
CHECKED = "checked.json"


def check_once(image: Path, check) -> None:
    """``check()`` unless the image in folder ``image`` has been checked before; marks it
    checked when it passes (the callers hold the snapshot's lock)."""
    marker = image / CHECKED
    if marker.is_file():
        return
    started = time.monotonic()
    check()
    marker.write_text(json.dumps({"seconds": round(time.monotonic() - started, 1)}) + "\n")


def install_wheel(m: Machine) -> None:
    """Install the payload disk's wheel in the booted guest ``m`` (:data:`INSTALL_WHEEL`)."""
    for command in INSTALL_WHEEL:
        m.succeed(command, timeout=1200)


def wheel_digest(wheel: Path) -> str:
    """What a wheel holds: its name and its RECORD (every file's sha256), without the dates
    of the zip, so that the same checkout built twice gives the same digest."""
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        lines = sorted(line for line in z.read(record).decode().splitlines()
                       if line and not line.startswith(record + ","))
    return hashlib.sha256("\n".join([wheel.name, *lines]).encode()).hexdigest()[:16]


#: the installed images and snapshots the cache keeps (the newest), one per checkout tested
KEEP_INSTALLED = 2


def installed_entry(top: Path, key: str, build) -> Path:
    """``top/key``, made by ``build(dest)`` once under a file lock and marked ``done``, so that
    both test workers and every later run with the same key use it; entries beyond
    :data:`KEEP_INSTALLED` are removed, oldest first."""
    dest = top / key
    if (dest / "done").is_file():
        return dest
    top.mkdir(parents=True, exist_ok=True)
    with (top / f".{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (dest / "done").is_file():
            return dest
        shutil.rmtree(dest, ignore_errors=True)
        started = time.monotonic()
        build(dest)
        (dest / "done").write_text(json.dumps({"seconds": round(time.monotonic() - started, 1)})
                                   + "\n")
    others = sorted((d for d in top.iterdir() if (d / "done").is_file() and d != dest),
                    key=lambda d: (d / "done").stat().st_mtime)
    for old in others[:max(0, len(others) - (KEEP_INSTALLED - 1))]:
        shutil.rmtree(old, ignore_errors=True)
    return dest


def ensure_ojai_snapshot(work: Path) -> Path:
    """The snapshot of a booted guest with this checkout's ojai installed
    (:func:`booted_snapshot`), cached by the image's recipe and the wheel's contents
    (:func:`wheel_digest`)::

        ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/vm/installed/<key>/booted.qcow2, payload.ext4,
        done

    Built once (:func:`installed_entry`), so that both test workers, and every later run of
    the same checkout, start their guests from it without a boot."""
    wheel = build_ojai_wheel(work / "wheel")
    key = hashlib.sha256(f"{recipe_hash()} {wheel_digest(wheel)}".encode()).hexdigest()[:16]

    def build(dest: Path) -> None:
        booted_snapshot(ensure_image().disk, dest, wheel)
        shutil.rmtree(dest / "boot", ignore_errors=True)

    return installed_entry(cache_base() / "installed", key, build) / "booted.qcow2"


def overlay(backing: Path, path: Path, *, relative: bool = False) -> Path:
    """A new qcow2 file at ``path`` whose unwritten blocks read from ``backing`` (named by a
    path relative to ``path``'s folder with ``relative``, so that a cache can move)."""
    path.unlink(missing_ok=True)
    ref = os.path.relpath(backing.resolve(), path.parent.resolve()) if relative else str(
        backing.resolve())
    _run([_tool("qemu-img"), "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", ref,
          str(path)], cwd=path.parent)
    return path


# -- the driver ------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """In the child before qemu starts: be killed when the test process ends, however it
    ends (a timeout's SIGTERM or a SIGKILL would otherwise leave the guest running)."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _line(tag: str, command: str) -> bytes:
    """One line of the control channel: ``tag``, then the command in base64."""
    line = f"{tag} {base64.b64encode(command.encode()).decode()}\n".encode()
    if len(line) > CHANNEL_LINE:
        raise VMError(f"a command of {len(command)} bytes does not fit the guest's control "
                      f"channel ({CHANNEL_LINE} bytes a line, in base64): {command[:80]}...")
    return line


@dataclass
class Result:
    command: str
    exit_code: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (f"$ {self.command}\n(exit code {self.exit_code})\n--- stdout\n{self.stdout}"
                f"--- stderr\n{self.stderr}")


_READY = re.compile(rb"@@READY ([0-9a-f-]{36})\r?\n")
_DONE = re.compile(rb"@@DONE (\S+) (\d+) out=([A-Za-z0-9+/=]*) err=([A-Za-z0-9+/=]*)\r?\n")


@dataclass
class Machine:
    """One qemu guest, driven through its virtio console.

    ``succeed(cmd)`` runs ``cmd`` with bash as root in the guest and returns its stdout,
    raising AssertionError (with stdout, stderr and the end of the serial console) when it
    exits non-zero; ``fail(cmd)`` expects a non-zero exit; ``reboot()`` reboots the guest
    (through SeaBIOS and the disk's own GRUB) and waits for the new boot; ``shutdown()`` powers
    it off cleanly; ``crash()`` pulls the plug. Only this machine's own qemu process is ever
    killed.
    """

    disk: Path
    workdir: Path
    name: str = "vm"
    disk_format: str = "qcow2"
    kernel: Path | None = None
    initrd: Path | None = None
    append: str | None = None
    payload: Path | None = None
    #: a host port on 127.0.0.1 forwarded to the guest's port 22 (see :mod:`support.vm_ssh`);
    #: None (the default): no network device at all
    ssh_port: int | None = None
    memory_mib: int = MEMORY_MIB
    #: start from this internal snapshot of ``disk`` (``-loadvm``: a running guest, see
    #: :func:`booted_snapshot`) instead of booting; then :meth:`resume`, not wait_for_boot
    loadvm: str | None = None
    #: UEFI instead of SeaBIOS: OVMF's code (read-only) and this guest's own copy of its
    #: variable store (qcow2, so that savevm/loadvm take it along), both as ``-drive
    #: if=pflash`` (tests/support/vm_uefi.py)
    firmware: Path | None = None
    efi_vars: Path | None = None
    boot_id: str | None = None
    boot_times: list[float] = field(default_factory=list)
    _proc: subprocess.Popen | None = None
    _sock: socket.socket | None = None
    _buf: bytearray = field(default_factory=bytearray)
    _boot_started: float = 0.0
    #: guards _proc, _sock and the fields below between the test's thread and the watcher
    #: thread that starts qemu again after a guest reset (:meth:`_watch`)
    _lock: threading.Condition = field(default_factory=threading.Condition)
    #: qemu processes started for this machine since :meth:`start` (one more per guest reset)
    _generation: int = 0
    #: the driver ends qemu (kill, quit, power-off): its exit is no reset
    _stopping: bool = False
    #: the watcher saw qemu end for good (not a reset) and starts no other
    _ended: bool = False
    _serial_from: int = 0

    @property
    def serial_log(self) -> Path:
        return self.workdir / "serial.log"

    def argv(self) -> list[str]:
        argv = [_tool("qemu-system-x86_64"), "-name", self.name, "-accel", "tcg", "-no-reboot",
                "-machine", "pc", "-cpu", GUEST_CPU, "-m", str(self.memory_mib), "-smp", str(CPUS),
                "-vga", "std", "-display", "none", *self._network(),
                "-drive", f"file={self.disk},if=virtio,format={self.disk_format},cache=unsafe",
                "-chardev", f"socket,id=shell,path={self.workdir / 'shell.sock'},server=on,wait=off",
                "-device", "virtio-serial-pci", "-device", "virtconsole,chardev=shell",
                "-chardev", f"file,id=serial,path={self.serial_log},append=on",
                "-serial", "chardev:serial",
                "-monitor", f"unix:{self.workdir / 'monitor.sock'},server=on,wait=off"]
        if self.firmware is not None:
            argv += ["-drive", f"if=pflash,unit=0,format=raw,readonly=on,file={self.firmware}",
                     "-drive", f"if=pflash,unit=1,format=qcow2,file={self.efi_vars}"]
        if self.payload is not None:
            argv += ["-drive", f"file={self.payload},if=virtio,format=raw,readonly=on"]
        if self.kernel is not None:
            argv += ["-kernel", str(self.kernel), "-initrd", str(self.initrd),
                     "-append", self.append or KERNEL_APPEND]
        if self.loadvm is not None:
            argv += ["-loadvm", self.loadvm]
        return argv

    def _network(self) -> list[str]:
        """No network device, or (``ssh_port``) one virtio NIC on qemu's user-mode network
        that reaches nothing (``restrict=on``: no packet of the guest leaves qemu) and whose
        only way in is the host's 127.0.0.1:``ssh_port`` forwarded to the guest's port 22."""
        if self.ssh_port is None:
            return ["-nic", "none"]
        return ["-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22",
                "-device", "virtio-net-pci,netdev=n0"]

    # lifecycle
    def start(self) -> None:
        """Start qemu, and the thread that starts it again whenever the guest resets."""
        if self._proc is not None:
            raise VMError(f"{self.name} is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._boot_started = time.monotonic()
        with self._lock:
            self._stopping = self._ended = False
            self._generation = 0
            self._spawn()
            self._buf.clear()
        threading.Thread(target=self._watch, name=f"{self.name}-resets", daemon=True).start()

    def _spawn(self) -> None:
        """Start one qemu process and connect to its control channel (``_proc``, ``_sock``)."""
        sock_path = self.workdir / "shell.sock"
        sock_path.unlink(missing_ok=True)
        self._serial_from = self.serial_log.stat().st_size if self.serial_log.exists() else 0
        with (self.workdir / "qemu.log").open("ab") as err:
            proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=err,
                                    stderr=err, start_new_session=True,
                                    preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise VMError(f"qemu exited with code {proc.returncode}: "
                              + (self.workdir / "qemu.log").read_text(errors="replace")[-2000:])
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(str(sock_path))
                break
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    raise VMError(f"qemu did not open {sock_path}") from None
                time.sleep(0.1)
        self._proc, self._sock = proc, s
        self._generation += 1

    def _watch(self) -> None:
        """A reset of the guest (``-no-reboot``: qemu exits instead) starts a new qemu on the
        same disk and variable store: the guest's reboot stays whole (its shutdown, then the
        firmware, its boot loader and kernel from the start, as after a power cycle). Under TCG
        a reset inside the same process boots several times slower after a busy session: after
        ``update-grub`` the new kernel took 63 s to reach userspace (most of it in
        ``clear_page_rep``, sampled from qemu's monitor) against 6 s in a new process, whose
        memory and translated code start empty. qemu exiting with an error, after a power-off, or
        ended by the driver is not a reset. The thread lives as long as the qemu it started
        (``_die_with_parent`` follows the thread that started the process)."""
        while True:
            with self._lock:
                proc = self._proc
            if proc is None:
                return
            proc.wait()
            with self._lock:
                if self._stopping or self._proc is not proc:
                    return
                if proc.returncode != 0 or self._powered_off():
                    self._ended = True
                    self._lock.notify_all()
                    return
                self.loadvm = None  # the new process boots from the disk as it now is
                try:
                    self._spawn()
                except VMError as e:
                    self.log(f"(the guest reset and qemu did not start again: {e})")
                    self._ended = True
                    self._lock.notify_all()
                    return
                self._lock.notify_all()

    def _powered_off(self) -> bool:
        """The guest's kernel said it powers off since the current qemu started."""
        try:
            with self.serial_log.open("rb") as f:
                f.seek(self._serial_from)
                return b"reboot: Power down" in f.read()
        except OSError:
            return False

    def __enter__(self) -> Machine:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait_for_boot(self, timeout: float = BOOT_TIMEOUT) -> str:
        """Wait until a new boot's control channel answers and systemd finished starting up;
        returns the new boot id."""
        if self._proc is None:
            self.start()
        previous = self.boot_id
        deadline = time.monotonic() + timeout
        while True:
            match = self._expect(_READY, deadline, what="the guest to boot")
            if match.group(1).decode() != previous:
                break
        self.boot_id = match.group(1).decode()
        state = self.execute("systemctl is-system-running --wait",
                             timeout=max(30.0, deadline - time.monotonic())).stdout.strip()
        if state not in ("running", "degraded"):
            raise VMError(f"{self.name}: systemd says {state!r} after boot\n{self._serial_tail()}")
        self.boot_times.append(time.monotonic() - self._boot_started)
        self.log(f"(booted in {self.boot_times[-1]:.1f} s)")
        return self.boot_id

    def resume(self, timeout: float = COMMAND_TIMEOUT) -> str:
        """Take over a guest started from a snapshot (``loadvm``): it runs on from where the
        snapshot was taken, its control channel waiting for a command, so no boot is awaited.
        Its clock is set to the host's (it stood still while the snapshot was stored), and its
        boot id, the snapshot's boot, is returned."""
        if self._proc is None:
            self.start()
        self.boot_id = self.execute(f"date -u -s @{time.time():.3f} >/dev/null && "
                                    "cat /proc/sys/kernel/random/boot_id",
                                    timeout=timeout).stdout.strip()
        self.boot_times.append(time.monotonic() - self._boot_started)
        return self.boot_id

    def monitor(self, command: str, timeout: float = 600.0) -> str:
        """One command of qemu's human monitor (its socket in the work folder); its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mon:
            mon.settimeout(timeout)
            mon.connect(str(self.workdir / "monitor.sock"))
            out = bytearray()

            def prompt() -> bytes:
                while not out.rstrip().endswith(b"(qemu)"):
                    data = mon.recv(1 << 16)
                    if not data:
                        break
                    out.extend(data)
                answer = bytes(out)
                out.clear()
                return answer

            prompt()  # the banner
            mon.sendall(command.encode() + b"\n")
            answer = prompt().decode(errors="replace")
        # the echoed command and the prompt around the answer
        lines = [ln for ln in answer.replace("\r", "").splitlines() if "(qemu)" not in ln
                 and not ln.startswith("\x1b")]
        return "\n".join(lines).strip()

    def savevm(self, tag: str) -> None:
        """Store the running guest (memory, devices, disk) as internal snapshot ``tag`` of
        its qcow2 disk, then stop qemu cleanly (its caches written out)."""
        answer = self.monitor(f"savevm {tag}")
        if "error" in answer.lower():
            raise VMError(f"{self.name}: savevm {tag} failed: {answer}")
        snapshots = self.monitor("info snapshots")
        if tag not in snapshots.split():
            raise VMError(f"{self.name}: no snapshot {tag!r} after savevm:\n{snapshots}")
        self.send_monitor_quit()

    def send_monitor_quit(self, timeout: float = 120.0) -> None:
        with self._lock:
            self._stopping = True
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mon:
            mon.connect(str(self.workdir / "monitor.sock"))
            mon.sendall(b"quit\n")
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise VMError(f"{self.name}: qemu did not quit") from None
        self._close()

    def reboot(self, timeout: float = BOOT_TIMEOUT) -> str:
        """Reboot the guest (the firmware, then the disk's GRUB reading its grub.cfg) and wait
        for the new boot; returns the new boot id."""
        if self.boot_id is None:
            raise VMError("reboot() before wait_for_boot()")
        self._boot_started = time.monotonic()
        self.send("systemctl reboot")
        return self.wait_for_boot(timeout)

    def shutdown(self, timeout: float = 180.0) -> None:
        """Power off cleanly and wait for qemu to exit (killed when it does not in time)."""
        if not self.running:
            return
        with self._lock:
            self._stopping = True
        try:
            self.send("systemctl poweroff")
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise VMError(f"{self.name} did not power off within {timeout:.0f} s\n"
                          + self._serial_tail()) from None
        finally:
            self._close()

    def crash(self) -> None:
        """Stop the guest at once, as a power cut would (writes qemu holds are kept)."""
        self.kill()

    def kill(self) -> None:
        """Kill this machine's qemu process (only it) and wait for it."""
        with self._lock:
            self._stopping = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        self._close()

    def _close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            self._proc = None
            self.boot_id = None
            self._lock.notify_all()

    # commands
    def send(self, command: str) -> None:
        """Start ``command`` in the guest without waiting for its answer (which a reboot or a
        power-off may never let it give)."""
        if self._sock is None:
            raise VMError(f"{self.name} is not running")
        self._sock.sendall(_line(secrets.token_hex(6), command))
        self.log(f"$ {command}  (not waiting for an answer)")

    def execute(self, command: str, timeout: float = COMMAND_TIMEOUT) -> Result:
        """Run ``command`` with bash as root in the guest: exit code, stdout, stderr."""
        if self._sock is None:
            raise VMError(f"{self.name} is not running")
        tag = secrets.token_hex(6)
        self._sock.sendall(_line(tag, command))
        self.log(f"$ {command}")
        started = time.monotonic()
        deadline = started + timeout
        pattern = re.compile(rb"@@DONE " + tag.encode() + rb" (\d+) out=([A-Za-z0-9+/=]*) "
                             rb"err=([A-Za-z0-9+/=]*)\r?\n")
        match = self._expect(pattern, deadline, what=f"`{command}`")
        result = Result(command, int(match.group(1)), base64.b64decode(match.group(2)).decode(
            errors="replace"), base64.b64decode(match.group(3)).decode(errors="replace"))
        self.log(f"(exit code {result.exit_code}, {time.monotonic() - started:.1f} s)\n"
                 f"{result.stdout}{result.stderr}")
        return result

    def log(self, text: str) -> None:
        """Append to ``commands.log`` in the work folder: what ran, and what it said."""
        with (self.workdir / "commands.log").open("a", encoding="utf-8") as f:
            f.write(text.rstrip("\n") + "\n")

    def succeed(self, command: str, timeout: float = COMMAND_TIMEOUT) -> str:
        result = self.execute(command, timeout)
        if result.exit_code != 0:
            raise AssertionError(f"command failed in the guest:\n{result}")
        return result.stdout

    def fail(self, command: str, timeout: float = COMMAND_TIMEOUT) -> Result:
        result = self.execute(command, timeout)
        if result.exit_code == 0:
            raise AssertionError(f"command succeeded in the guest, expected a failure:\n{result}")
        return result

    def write_file(self, path: str, content: str, mode: int = 0o644) -> None:
        self.write_bytes(path, content.encode(), mode)

    def write_bytes(self, path: str, content: bytes, mode: int = 0o644) -> None:
        """``content`` into ``path`` (via ``path.tmp``, renamed once complete), sent in pieces:
        the channel is a tty, whose line discipline cuts a line at 4096 bytes."""
        tmp = f"{path}.tmp"
        self.succeed(f"mkdir -p \"$(dirname {path})\" && : > {tmp}")
        for at in range(0, len(content), WRITE_CHUNK):
            data = base64.b64encode(content[at:at + WRITE_CHUNK]).decode()
            self.succeed(f"echo {data} | base64 -d >> {tmp}")
        self.succeed(f"test $(stat -c %s {tmp}) -eq {len(content)} && chmod {mode:o} {tmp} "
                     f"&& mv {tmp} {path}")

    # the channel
    def _expect(self, pattern: re.Pattern, deadline: float, *, what: str) -> re.Match:
        while True:
            match = pattern.search(bytes(self._buf))
            if match:
                del self._buf[:match.end()]
                return match
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise VMError(f"{self.name}: timed out waiting for {what}\n{self._serial_tail()}")
            with self._lock:
                proc, sock, generation = self._proc, self._sock, self._generation
            if proc is None or sock is None:
                raise VMError(f"{self.name} is not running (waiting for {what})")
            if proc.poll() is not None:
                self._await_restart(generation, deadline, what)
                sock.close()
                continue
            sock.settimeout(min(remaining, 1.0))
            try:
                data = sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not data:  # qemu is exiting: a reset (then a new qemu) or its end
                self._await_restart(generation, deadline, what)
                sock.close()
                continue
            self._buf += data

    def _await_restart(self, generation: int, deadline: float, what: str) -> None:
        """The control channel of qemu number ``generation`` ended: wait until :meth:`_watch`
        has started the next one after a guest reset, or raise when qemu ended for good."""
        with self._lock:
            while self._generation == generation and not (self._ended or self._stopping):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise VMError(f"{self.name}: timed out waiting for {what} (qemu ended)\n"
                                  + self._serial_tail())
                self._lock.wait(min(remaining, 1.0))
            if self._generation == generation:
                raise VMError(f"{self.name}: qemu exited while waiting for {what}\n"
                              + self._serial_tail())

    def _serial_tail(self, n: int = 4000) -> str:
        try:
            return "--- serial console (end)\n" + self.serial_log.read_text(errors="replace")[-n:]
        except OSError:
            return ""


#: the internal snapshot of a booted guest that the scenarios start from
SNAPSHOT = "booted"


def booted_snapshot(disk: Path, workdir: Path, wheel: Path) -> Path:
    """An overlay of ``disk`` holding snapshot :data:`SNAPSHOT` of a guest that has booted
    (systemd finished starting, the control channel waiting) and installed ``wheel`` from a
    payload disk (:func:`wheel_payload`, kept beside it): one boot. Copies of it start in
    seconds where a boot under TCG takes one to several minutes. The boots a scenario is about
    (the reboot after an apply) stay real."""
    workdir.mkdir(parents=True, exist_ok=True)
    payload = wheel_payload(workdir, wheel)
    snap = overlay(disk, workdir / "booted.qcow2")
    m = Machine(snap, workdir / "boot", name="snapshot", payload=payload)
    try:
        m.wait_for_boot()
        check_once(disk.parent, lambda: check_image(m))
        install_wheel(m)
        m.savevm(SNAPSHOT)
    finally:
        m.kill()
    os.chmod(snap, 0o444)
    log(f"snapshot of a booted guest with ojai after {m.boot_times[-1]:.0f} s of boot: {snap} "
        f"({snap.stat().st_size >> 20} MiB)")
    return snap


def from_snapshot(snapshot: Path, workdir: Path, name: str, **kw) -> Machine:
    """A running guest on a copy of ``snapshot`` (its own disk: the copy is written, the
    snapshot never), with the payload disk the snapshot was taken with, taken over with
    :meth:`Machine.resume`."""
    workdir.mkdir(parents=True, exist_ok=True)
    disk = workdir / "disk.qcow2"
    shutil.copyfile(snapshot, disk)
    os.chmod(disk, 0o644)
    return take_over(Machine(disk, workdir, name=name, loadvm=SNAPSHOT,
                             payload=snapshot.parent / "payload.ext4", **kw))


def take_over(machine: Machine) -> Machine:
    """Start ``machine`` from its snapshot and :meth:`Machine.resume` it; its qemu is killed
    when that fails."""
    machine.start()
    try:
        machine.resume()
    except BaseException:
        machine.kill()
        raise
    return machine


@pytest.fixture(scope="session")
def vm_booted(tmp_path_factory) -> Path:
    """A booted guest of the image with this checkout's ojai installed, stored as a snapshot
    (:func:`ensure_ojai_snapshot`: once per checkout, shared by the test workers)."""
    return ensure_ojai_snapshot(tmp_path_factory.mktemp("vm-ojai"))


def main(argv: list[str]) -> int:
    started = time.monotonic()
    image = ensure_image()
    print(image.disk)
    log(f"image {image.disk} ready after {time.monotonic() - started:.0f} s "
        f"(kernel {image.kernel_release})")
    if "--boot-shell" in argv:
        with tempfile.TemporaryDirectory(prefix="ojai-vm-") as tmp:
            disk = overlay(image.disk, Path(tmp) / "disk.qcow2")
            with Machine(disk, Path(tmp)) as m:
                m.wait_for_boot()
                log(f"booted in {m.boot_times[-1]:.1f} s; type commands, end with EOF")
                for line in sys.stdin:
                    r = m.execute(line.rstrip("\n"))
                    sys.stdout.write(r.stdout + r.stderr + f"[exit {r.exit_code}]\n")
                m.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
