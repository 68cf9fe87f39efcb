"""What the distribution installed: the packages ojai's checks ask about (firmware, llama.cpp and
ggml's backends, amdgpu-dkms, power daemons), which package owns a program, the distribution's
own ``llama-server`` and whether its HIP backend has code for this GPU, the kernel log's amdgpu
and amdxdna lines, and the power profile.

Every file is read through the root; the package databases are dpkg's ``/var/lib/dpkg/status``
and ``info/*.list``, pacman's ``/var/lib/pacman/local``, and on rpm machines ``rpm -qa`` (its
database is not plain text), answered under ``--root`` from the capture like any command.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from ojai_setup.core.root import Root
from ojai_setup.formats.packages import (
    PackageRecord,
    parse_dpkg_status,
    parse_pacman_desc,
    parse_rpm_query,
    upstream_version,
)
from ojai_setup.model.facts import DistroLlama, Package, Power

#: the packages doctor reports when installed (the known-bad table and the checks ask for them)
INTERESTING = (
    # GPU firmware: Debian/Ubuntu, Arch (split package), Fedora (split package)
    "linux-firmware", "linux-firmware-amdgpu", "amd-gpu-firmware", "firmware-amd-graphics",
    # llama.cpp as the distribution packages it, and ggml's backends
    "llama.cpp-tools", "llama.cpp", "llama-cpp", "libllama0", "libggml0",
    "libggml0-backend-hip", "libggml0-backend-vulkan", "libggml0-backend-cpu",
    "amdgpu-dkms", "amdgpu-dkms-firmware",
    "tuned", "power-profiles-daemon",
)
DPKG_STATUS = "/var/lib/dpkg/status"
PACMAN_LOCAL = "/var/lib/pacman/local"
#: where Debian's ggml looks for its backends (libggml0: GGML_BACKEND_DL)
GGML_BACKENDS = "/usr/lib/x86_64-linux-gnu/ggml/backends0"


def read_packages(root: Root) -> dict[str, Package]:
    """The installed packages of :data:`INTERESTING`, by name; raises FileNotFoundError when the
    machine has no package database ojai can read."""
    wanted = set(INTERESTING)
    records: dict[str, PackageRecord] = {}
    seen_db = False
    if root.exists(DPKG_STATUS):
        seen_db = True
        records.update(parse_dpkg_status(root.read_text(DPKG_STATUS), wanted))
    if root.exists(PACMAN_LOCAL):
        seen_db = True
        for desc in root.glob(f"{PACMAN_LOCAL}/*/desc"):
            folder = PurePosixPath(desc).parent.name
            if not any(folder.startswith(n + "-") for n in wanted):
                continue
            rec = parse_pacman_desc(root.read_text(desc))
            if rec and rec.name in wanted:
                records[rec.name] = rec
    if not seen_db and (root.exists("/var/lib/rpm") or root.exists("/usr/lib/sysimage/rpm")):
        seen_db = True
        # every package, one short command (a capture's folder is named by it)
        res = root.run(["rpm", "-qa", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\\n"])
        if res.found:
            records.update({n: r for n, r in parse_rpm_query(res.stdout).items() if n in wanted})
    if not seen_db:
        raise FileNotFoundError("no package database (dpkg, pacman or rpm) on this machine")
    return {name: Package(name=r.name, version=r.version, manager=r.manager, fields=r.fields)
            for name, r in sorted(records.items())}


def package_owner(root: Root, path: str) -> tuple[str, str] | None:
    """(manager, package) of the package whose file list holds ``path``, or None."""
    likely = [f"/var/lib/dpkg/info/{n}{arch}.list" for n in INTERESTING
              for arch in ("", ":amd64") if n.startswith("llama")]
    listings = [p for p in likely if root.exists(p)]
    for listing in listings + [p for p in root.glob("/var/lib/dpkg/info/*.list")
                               if p not in listings]:
        try:
            if path in root.read_text(listing).splitlines():
                return "dpkg", PurePosixPath(listing).name.removesuffix(".list").split(":")[0]
        except (OSError, UnicodeDecodeError):
            continue
    rel = path.lstrip("/")
    for files in root.glob(f"{PACMAN_LOCAL}/*/files"):
        try:
            if rel in root.read_text(files).splitlines():
                rec = parse_pacman_desc(root.read_text(str(PurePosixPath(files).parent / "desc")))
                if rec:
                    return "pacman", rec.name
        except (OSError, UnicodeDecodeError):
            continue
    if root.exists("/var/lib/rpm") or root.exists("/usr/lib/sysimage/rpm"):
        res = root.run(["rpm", "-qf", "--qf", "%{NAME}\\n", path])
        if res.ok and res.stdout.strip() and "not owned" not in res.stdout:
            return "rpm", res.stdout.split()[0]
    return None


def hip_targets(package: Package | None) -> list[str] | None:
    """The gfx targets a ggml HIP backend package has code for, from its metadata (Debian's
    ``X-Rocm-Gpu-Architecture``), or None when the package does not say."""
    if package is None:
        return None
    value = package.fields.get("X-Rocm-Gpu-Architecture")
    return value.split() if value else None


def read_distro_llama(root: Root, packages: dict[str, Package] | None) -> DistroLlama | None:
    """The ``llama-server`` on PATH when a distribution package owns it, else None."""
    path = root.which("llama-server")
    if path is not None and not path.startswith("/"):  # a capture: find the file on PATH
        path = next((f"{d}/llama-server" for d in SEARCH_PATH
                     if root.exists(f"{d}/llama-server")), None)
    if path is None or path.startswith("/opt/ojai/"):
        return None
    owner = package_owner(root, path)
    if owner is None:
        return None
    manager, name = owner
    packages = packages or {}
    version = packages[name].version if name in packages else None
    from ojai_setup.formats.llama_help import DialectParseError, parse_version

    ver = root.run([path, "--version"])
    build = label = None
    if ver.ok:
        try:
            parsed = parse_version(ver.stderr + "\n" + ver.stdout)
            build, label = parsed.build, parsed.raw
        except DialectParseError:
            label = None
    backends = sorted(n.removeprefix("libggml0-backend-") for n in packages
                      if n.startswith("libggml0-backend-"))
    if packages.get("libggml0") and "cpu" not in backends:
        backends.insert(0, "cpu")  # Debian's libggml0 carries the CPU backend itself
    folder = [PurePosixPath(p).name for p in root.glob(f"{GGML_BACKENDS}/*.so")]
    hip = packages.get("libggml0-backend-hip")
    return DistroLlama(path=path, manager=manager, package=name, package_version=version,
                       version=label, build=build, backends=backends, backend_files=folder,
                       hip_package_version=hip.version if hip else None,
                       hip_targets=hip_targets(hip))


#: where a distribution puts its programs, in PATH order
SEARCH_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
_LOG = re.compile(r"amdgpu|amdxdna|\bMES\b|kfd", re.I)
#: the most kernel log lines kept (the newest)
LOG_LINES = 200


def read_kernel_log(root: Root) -> list[str]:
    """The kernel log's amdgpu, amdxdna and KFD lines (``dmesg``; the newest :data:`LOG_LINES`)."""
    res = root.run(["dmesg"])
    if not res.found:
        raise FileNotFoundError("dmesg is not available")
    if not res.ok:
        raise ValueError(f"dmesg exited {res.exit_code}: "
                         f"{(res.stderr or res.stdout).strip()[:160]} (run as root to read it)")
    return kernel_log_lines(res.stdout)


def kernel_log_lines(text: str) -> list[str]:
    """The amdgpu, amdxdna and KFD lines of a kernel log, the newest :data:`LOG_LINES`."""
    return [line for line in text.splitlines() if _LOG.search(line)][-LOG_LINES:]


PLATFORM_PROFILE = "/sys/firmware/acpi/platform_profile"


def read_power(root: Root) -> Power:
    """The ACPI platform profile and its choices, and the daemon that manages it, if any."""
    def text(path: str) -> str | None:
        try:
            return root.read_text(path).strip() or None
        except (FileNotFoundError, NotADirectoryError):
            return None

    power = Power(profile=text(PLATFORM_PROFILE),
                  choices=(text(PLATFORM_PROFILE + "_choices") or "").split())
    if root.which("tuned-adm") or root.exists("/etc/tuned/active_profile"):
        power.manager = "tuned"
        power.manager_profile = text("/etc/tuned/active_profile")
    elif root.which("powerprofilesctl"):
        power.manager = "power-profiles-daemon"
        res = root.run(["powerprofilesctl", "get"])
        power.manager_profile = res.stdout.strip() or None if res.ok else None
    if power.profile is None and not power.choices and power.manager is None:
        raise FileNotFoundError(f"no {PLATFORM_PROFILE} and no power daemon")
    return power


def upstream(version: str | None) -> str | None:
    return upstream_version(version) if version else None
