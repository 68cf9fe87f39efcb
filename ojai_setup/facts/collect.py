"""Reading the machine: I/O through a :class:`~ojai_setup.core.root.Root`, parsing elsewhere.

Each ``read_*`` function returns one section of :class:`Facts`; :func:`collect` runs them all
and turns any failure into an ``unknown`` entry with its reason, so doctor never crashes on a
machine it does not understand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import PurePosixPath

from ojai_setup.core.paths import (
    GRUB_DEFAULT,
    LLAMA_SERVER,
    STATE_FILE,
)
from ojai_setup.core.root import Root
from ojai_setup.domain.check_engine import igpu
from ojai_setup.facts.environ import environment, environment_unknown
from ojai_setup.facts.state import read_apply_status
from ojai_setup.formats import machine as parsers
from ojai_setup.model.facts import (
    Bios,
    BootLoader,
    Cpu,
    Distro,
    DrmCard,
    Facts,
    Gpu,
    GrubConfig,
    Kernel,
    Memory,
    ModelPair,
    ModprobeSetting,
    Npu,
    Tool,
    Ttm,
    TtmRecord,
)

AMD_PCI_VENDOR = "0x1002"
#: where ojai installs llama-server (see ojai_setup.domain.nightly)
OJAI_LLAMA_SERVER = LLAMA_SERVER


def _read(root: Root, path: str) -> str | None:
    try:
        return root.read_text(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def read_cpu(root: Root) -> Cpu:
    return parsers.parse_cpuinfo(root.read_text("/proc/cpuinfo"))


def read_memory(root: Root) -> Memory:
    return parsers.parse_meminfo(root.read_text("/proc/meminfo"))


def read_kernel(root: Root) -> Kernel:
    text = _read(root, "/proc/sys/kernel/osrelease")
    if text is None:
        result = root.run(["uname", "-r"])
        if not result.ok:
            raise FileNotFoundError("neither /proc/sys/kernel/osrelease nor `uname -r` is available")
        text = result.stdout
    return parsers.parse_kernel_release(text)


def read_cmdline(root: Root) -> list[str]:
    from ojai_setup.formats.kernel_params import parse_cmdline

    return parse_cmdline(root.read_text("/proc/cmdline"))


def read_rocm_version(root: Root) -> str:
    """The version of the ROCm in /opt/rocm, in every layout a real install has: the
    ``.info/version`` of ROCm up to 7.x (``/opt/rocm`` itself, or the ``/opt/rocm-X.Y.Z`` it links
    to); from 7.14 on, a ``/opt/rocm/core-<major.minor>/`` per version (its own ``.info/version``
    where it has one, else the directory's name; the newest when there are several), whether or
    not the version-less ``bin``/``lib`` links were installed. ROCm that is there but says no
    version is unknown, with a reason that says it is there."""
    from ojai_setup.formats.machine import ROCM_CORE_DIR, ROCM_PRESENT, version_tuple

    for path in ("/opt/rocm/.info/version", "/opt/rocm/.info/version-dev"):
        text = _read(root, path)
        if text:
            return parsers.parse_rocm_version(text)
    cores = sorted(((m.group(1), path) for path in root.glob("/opt/rocm/core-*")
                    if (m := ROCM_CORE_DIR.match(path.rsplit("/", 1)[-1]))
                    and root.resolve(path).is_dir() and not root.resolve(path).is_symlink()),
                   key=lambda c: version_tuple(c[0]), reverse=True)
    for version, path in cores:
        text = _read(root, f"{path}/.info/version")
        return parsers.parse_rocm_version(text) if text else version
    older = [p for p in root.glob("/opt/rocm-*/.info/version")]
    for path in sorted(older, key=lambda p: version_tuple(p.split("/")[2]), reverse=True):
        text = _read(root, path)
        if text:
            return parsers.parse_rocm_version(text)
    if root.exists("/opt/rocm/bin") or root.exists("/opt/rocm/lib"):
        raise ValueError(f"{ROCM_PRESENT} in /opt/rocm, but its version is in none of the places "
                         "ojai reads (.info/version, core-<version>/)")
    raise FileNotFoundError("no /opt/rocm/.info/version (ROCm not installed in /opt/rocm)")


def read_bios(root: Root) -> Bios:
    base = "/sys/class/dmi/id/"
    values = {k: (_read(root, base + k) or "").strip() or None for k in Bios.model_fields}
    if not any(values.values()):
        raise FileNotFoundError(f"no DMI data under {base}")
    return Bios(**values)


def read_distro(root: Root) -> Distro:
    import distro

    if root.is_host:
        d = distro.LinuxDistribution()
    else:
        d = distro.LinuxDistribution(root_dir=str(root.resolve("/")),
                                     include_lsb=False, include_uname=False)
    if not d.id():
        raise FileNotFoundError("no /etc/os-release")
    root.reads.extend(p for p in ("/etc/os-release", "/usr/lib/os-release") if root.exists(p))
    return Distro(id=d.id(), version=d.version(best=True), name=d.name(pretty=True),
                  like=d.like().split())


def read_gpu(root: Root) -> Gpu:
    gpu = Gpu()
    result = root.run(["rocminfo"])
    if result.ok:
        try:
            report = parsers.read_rocminfo(result.stdout)
            agents = report.agents
            gpu.rocminfo_notes = report.notes
            for agent in agents:  # what the silicon is, whatever an override renamed it to
                row = igpu(agent.chip_id)
                agent.native_target = row.target if row else None
            gpu.agents = [a for a in agents if a.device_type == "GPU"]
            gpu.npu_agents = [a for a in agents if a.device_type == "DSP" or a.name.startswith("aie")]
        except parsers.ParseError as exc:
            gpu.rocminfo_error = str(exc)
    elif not result.found:
        gpu.rocminfo_error = "rocminfo is not installed"
    else:
        gpu.rocminfo_error = (f"rocminfo exited {result.exit_code}: "
                              f"{(result.stderr or result.stdout).strip()[:200]}")
    for dev in root.glob("/sys/class/drm/card*/device"):
        card = PurePosixPath(dev).parent.name
        if not re.fullmatch(r"card\d+", card):
            continue
        vendor = (_read(root, dev + "/vendor") or "").strip() or None
        if vendor != AMD_PCI_VENDOR:
            continue
        device = (_read(root, dev + "/device") or "").strip().lower() or None
        row = igpu(device)
        gpu.cards.append(DrmCard(
            card=card, pci_vendor=vendor, pci_device=device,
            vram_total=_int(_read(root, dev + "/mem_info_vram_total")),
            gtt_total=_int(_read(root, dev + "/mem_info_gtt_total")),
            vis_vram_total=_int(_read(root, dev + "/mem_info_vis_vram_total")),
            native_target=row.target if row else None))
    gpu.hsa_override = environment(root).get("HSA_OVERRIDE_GFX_VERSION")
    gpu.environment_unknown = environment_unknown(root)
    gpu.amdgpu_loaded = root.exists("/sys/module/amdgpu")
    return gpu


def read_npu(root: Root) -> Npu:
    npu = Npu(accel_devices=root.glob("/dev/accel/accel*"))
    version = _read(root, "/sys/module/amdxdna/version")
    npu.amdxdna_version = version.strip() if version else None
    from ojai_setup.facts.npu import read_validate

    status = read_validate(root)
    if status is not None:
        npu.flm = status.model_dump(mode="json")
        if status.firmware.observed:
            npu.firmware_version = status.firmware.observed
            npu.firmware_source = "flm validate"
        if status.amdxdna.observed and not npu.amdxdna_version:
            npu.amdxdna_version = status.amdxdna.observed
    if npu.firmware_version is None:
        xrt = root.run(["xrt-smi", "examine"])
        if xrt.found:
            info = parsers.parse_xrt_smi(xrt.stdout)
            if "firmware_version" in info:
                npu.firmware_version = info["firmware_version"]
                npu.firmware_source = "xrt-smi examine"
            if not npu.amdxdna_version and "amdxdna_version" in info:
                npu.amdxdna_version = info["amdxdna_version"]
    return npu


def token_origin(root: Root, grub: GrubConfig, key: str) -> str | None:
    """The file whose assignment puts the configured ``key`` parameter on the command line:
    the last file assigning the variable that holds it and naming the key in its own text."""
    from ojai_setup.formats.grub import DEFAULT_VAR, LINUX_VAR, GrubEditError, get_kernel_param
    from ojai_setup.formats.kernel_params import cmdline_param, parse_cmdline

    var = DEFAULT_VAR if cmdline_param(parse_cmdline(grub.default or ""), key) is not None else LINUX_VAR
    for src in reversed(grub.files):
        if var not in src.assigns:
            continue
        try:
            if get_kernel_param(root.read_text(src.path), key, var=var, source=src.path) is not None:
                return src.path
        except (GrubEditError, OSError):
            continue
    return grub.winners.get(var)


def read_builtin(root: Root, module: str, release: str | None) -> str | None:
    """Why ``module`` is built into the running kernel (``modules.builtin`` lists it), or None."""
    if not release:
        return None
    for base in ("/usr/lib/modules", "/lib/modules"):
        text = _read(root, f"{base}/{release}/modules.builtin")
        if text is None:
            continue
        if any(PurePosixPath(line.strip()).name.split(".ko")[0] == module
               for line in text.splitlines()):
            return f"{base}/{release}/modules.builtin lists {module}.ko"
        return None
    return None


def read_ttm(root: Root, cmdline: list[str] | None, grub: GrubConfig | None = None,  # noqa: C901
             loader: BootLoader | None = None) -> Ttm:
    from ojai_setup.formats.grub import GrubEditError, get_kernel_param
    from ojai_setup.formats.kernel_params import cmdline_param
    from ojai_setup.formats.modprobe import (
        ModprobeEditError,
        kmod_order,
        module_option_settings,
    )

    from ojai_setup.core.paths import TTM_MODULES

    keys = tuple(f"{m}.pages_limit" for m in TTM_MODULES)
    ttm = Ttm()
    for module in TTM_MODULES:
        value = _read(root, f"/sys/module/{module}/parameters/pages_limit")
        if value is not None:
            ttm.live_module = module  # amdttm wins when both are loaded: amdgpu-dkms uses it
            ttm.active_pages = _int(value)
            break
    if cmdline is not None:
        for key in keys:
            value = cmdline_param(cmdline, key)
            if value is not None:
                ttm.cmdline_pages, ttm.cmdline_key = _int(value), key
                break
        ttm.deprecated_gttsize = [t for t in cmdline
                                  if re.match(r"amdgpu\.gtt_?size=", t)]
    grub_text = _read(root, GRUB_DEFAULT)
    if grub is not None and grub.error is None:
        for key in keys:
            value = cmdline_param(grub.tokens, key)
            if value is not None:
                ttm.config_pages, ttm.config_key = _int(value), key
                ttm.config_file = token_origin(root, grub, key)
                break
    elif grub is not None:
        ttm.read_error = grub.error
    elif grub_text is not None:
        try:
            for key in keys:
                for var in ("GRUB_CMDLINE_LINUX_DEFAULT", "GRUB_CMDLINE_LINUX"):
                    value = get_kernel_param(grub_text, key, var=var)
                    if value is not None and ttm.config_pages is None:
                        ttm.config_pages, ttm.config_key = _int(value), key
        except GrubEditError as exc:
            ttm.read_error = str(exc)
    from ojai_setup.boot.table import path_of

    if loader is not None and not path_of(loader.kind).grub:
        # a GRUB file on a machine GRUB does not boot configures nothing
        ttm.config_pages = ttm.config_key = ttm.config_file = None
        from ojai_setup.facts.boot import read_configured

        try:
            configured = read_configured(root, loader)
        except ValueError as exc:
            ttm.read_error = str(exc)
            configured = None
        if configured is not None:
            tokens, where = configured
            for key in keys:
                value = cmdline_param(tokens, key)
                if value is not None:
                    ttm.config_pages, ttm.config_key, ttm.config_file = _int(value), key, where
                    break
    release = _read(root, "/proc/sys/kernel/osrelease")
    ttm.builtin = read_builtin(root, ttm.live_module or "ttm", release.strip() if release else None)
    files = [(p, _read(root, p) or "") for p in kmod_order(root.glob("/etc/modprobe.d/*.conf"))]
    for module in reversed(TTM_MODULES):
        try:
            settings = module_option_settings(files, module, "pages_limit")
        except ModprobeEditError as exc:
            ttm.read_error = (ttm.read_error + "; " if ttm.read_error else "") + str(exc)
            continue
        for s in settings:
            pages = _int(s.value)
            if pages is not None:
                ttm.modprobe.append(ModprobeSetting(path=s.path, line=s.line, module=module, pages=pages))
    boot_id = _read(root, "/proc/sys/kernel/random/boot_id")
    ttm.boot_id = boot_id.strip() if boot_id else None
    # what ``ojai setup --apply`` recorded, read as plain JSON through the root (so that
    # ``doctor --capture`` keeps it)
    state = _read(root, STATE_FILE)
    if state:
        record = json.loads(state).get("records", {}).get("ttm")
        if record:
            ttm.record = TtmRecord.model_validate(record)
    return ttm


def _version_of(result) -> str | None:
    text = (result.stdout + "\n" + result.stderr).strip()
    for line in text.splitlines():
        if re.search(r"\d+\.\d+|version", line, re.I):
            return line.strip()
    return text.splitlines()[0].strip() if text else None


def _install_record(root: Root) -> dict | None:
    from ojai_setup.core.paths import LLAMACPP_CURRENT

    text = _read(root, f"{LLAMACPP_CURRENT}/ojai-install.json")
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def installed_nightly_tag(root: Root) -> str | None:
    """The llamacpp-rocm release tag of ojai's install, when it is a nightly of Lemonade's
    (not upstream's Vulkan build, whose tags are another series)."""
    record = _install_record(root)
    tag = record.get("tag") if record else None
    return tag if isinstance(tag, str) and record.get("family") != "vulkan" else None


def installed_backend(root: Root) -> str | None:
    """The ggml backend of ojai's install (its ``ojai-install.json``): a source build's
    ``backend``, ``hip`` for a nightly of Lemonade's ROCm builds, ``vulkan`` for upstream's."""
    record = _install_record(root)
    if record is None:
        return None
    backend = record.get("backend")
    if backend:
        return str(backend)
    if record.get("family") == "vulkan":
        return "vulkan"
    return "hip" if record.get("tag") or record.get("family") else None


def read_tools(root: Root) -> dict[str, Tool]:
    tools: dict[str, Tool] = {}
    llama = OJAI_LLAMA_SERVER if root.exists(OJAI_LLAMA_SERVER) else "llama-server"
    candidates: list[tuple[str, list[str]]] = [
        ("lemonade", ["lemonade", "--version"]),
        ("lemond", ["lemond", "--version"]),
        ("flm", ["flm", "version"]),
    ]
    from ojai_setup.facts.probe import ProbeError, probe

    dialect = probe(root, llama)
    if not isinstance(dialect, ProbeError):
        detail: dict = {"dialect": dialect.summary_lines()}
        backend = installed_backend(root) if llama == OJAI_LLAMA_SERVER else None
        if backend:
            detail["backend"] = backend
        tag = installed_nightly_tag(root) if llama == OJAI_LLAMA_SERVER else None
        if tag:
            detail["nightly_tag"] = tag
        tools["llama-server"] = Tool(
            name="llama-server", path=llama if llama.startswith("/") else root.which(llama),
            version=dialect.version_label(), detail=detail)
    elif dialect.exit_code != 127:
        tools["llama-server"] = Tool(name="llama-server", path=llama,
                                     detail={"error": dialect.describe()})
    for name, argv in candidates:
        result = root.run(argv)
        if not result.found:
            continue
        tools[name] = Tool(name=name, path=root.which(argv[0]), version=_version_of(result))
    lemonade = tools.get("lemonade") or tools.get("lemond")
    if lemonade is not None:
        from ojai_setup.facts.lemonade import lemonade_detail

        server = tools.get("lemond")
        lemonade.detail = lemonade_detail(root, (server or lemonade).version)
    return tools


def read_models(root: Root) -> list[ModelPair]:
    """Every model route ojai set up (recorded at apply): are its files a matched pair?"""
    text = _read(root, STATE_FILE)
    routes = json.loads(text).get("records", {}).get("routes", {}) if text else {}
    pairs: dict[str, ModelPair] = {}
    for record in routes.values():
        if not isinstance(record, dict) or not record.get("main") or record.get("model") in pairs:
            continue
        main, draft = record["main"], record.get("draft")
        kind = record.get("pairing") or record.get("mtp") or ("sidecar" if draft else "in_file")
        pair = ModelPair(route=record["model"], main=main, draft=draft, kind=kind)
        missing = [p for p in (main, draft) if p and not root.exists(p)]
        if missing:
            pair.ok, pair.reasons = False, [f"{p}: missing" for p in missing]
        else:
            from ojai_setup.facts.gguf import kept_model_info
            from ojai_setup.formats.gguf import GGUFError, check_pair

            try:
                main_info, note = kept_model_info(root, root.resolve(main))
                draft_info, draft_note = (kept_model_info(root, root.resolve(draft)) if draft
                                          else (None, None))
                verdict = check_pair(main_info, draft_info, kind)
                pair.ok, pair.reasons = verdict.ok, list(verdict.reasons)
                pair.note = "; ".join(n for n in (note, draft_note) if n) or None
            except GGUFError as exc:
                pair.ok, pair.reasons = False, [str(exc)]
        pairs[pair.route] = pair
    return list(pairs.values())


#: the kernel settings doctor reads (``/proc/sys/<name with / for .>``)
SYSCTLS = ("kernel.numa_balancing",)


def read_sysctl(root: Root) -> dict[str, str]:
    values = {}
    for name in SYSCTLS:
        text = _read(root, "/proc/sys/" + name.replace(".", "/"))
        if text is not None:
            values[name] = text.strip()
    return values


def read_amdgpu_dkms(root: Root) -> bool:
    return bool(root.glob("/var/lib/dkms/amdgpu/*")) or root.exists("/sys/module/amdttm")


def read_dkms_amdgpu(root: Root) -> list[str]:
    return sorted(PurePosixPath(p).name for p in root.glob("/var/lib/dkms/amdgpu/*")
                  if PurePosixPath(p).name[:1].isdigit())


def _packages(root: Root):
    from ojai_setup.facts.packages import read_packages

    return read_packages(root)


def _kernel_log(root: Root):
    from ojai_setup.facts.packages import read_kernel_log

    return read_kernel_log(root)


def _power(root: Root):
    from ojai_setup.facts.packages import read_power

    return read_power(root)


SECTIONS: dict[str, Callable[[Root], object]] = {
    "cpu": read_cpu,
    "memory": read_memory,
    "kernel": read_kernel,
    "cmdline": read_cmdline,
    "rocm_version": read_rocm_version,
    "bios": read_bios,
    "distro": read_distro,
    "gpu": read_gpu,
    "npu": read_npu,
    "tools": read_tools,
    "amdgpu_dkms": read_amdgpu_dkms,
    "dkms_amdgpu": read_dkms_amdgpu,
    "models": read_models,
    "sysctl": read_sysctl,
    "packages": _packages,
    "kernel_log": _kernel_log,
    "power": _power,
    "apply": lambda root: read_apply_status(root),
}


def _machine_path(root: Root, filename) -> str:
    """A path as the machine names it (``/proc/meminfo``), not where a capture keeps it."""
    name = str(filename)
    prefix = str(root.path).rstrip("/")
    if not root.is_host and (name == prefix or name.startswith(prefix + "/")):
        return name[len(prefix):] or "/"
    return name


def _reason(exc: BaseException, root: Root) -> str:
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"cannot read {_machine_path(root, exc.filename)}: not found"
    if isinstance(exc, PermissionError) and exc.filename:
        return (f"cannot read {_machine_path(root, exc.filename)}: permission denied "
                "(run as root for this fact)")
    if isinstance(exc, (FileNotFoundError, ValueError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def collect(root: Root) -> Facts:
    """Read every fact; one that cannot be read is recorded as unknown, with the reason."""
    facts = Facts(root=str(root.path))
    for name, reader in SECTIONS.items():
        try:
            setattr(facts, name, reader(root))
        except Exception as exc:  # noqa: BLE001 - a fact must never crash doctor
            facts.unknown[name] = _reason(exc, root)
    try:
        from ojai_setup.facts.packages import read_distro_llama

        facts.distro_llama = read_distro_llama(root, facts.packages)
    except Exception as exc:  # noqa: BLE001
        facts.unknown["distro_llama"] = _reason(exc, root)
    try:
        from ojai_setup.facts.vulkan import read_vulkan

        facts.vulkan = read_vulkan(root)
    except Exception as exc:  # noqa: BLE001
        facts.unknown["vulkan"] = _reason(exc, root)
    try:
        from ojai_setup.facts.grub_env import read_grub_config

        facts.grub = read_grub_config(root)
    except Exception as exc:  # noqa: BLE001
        facts.unknown["grub"] = _reason(exc, root)
    loader = None
    try:
        from ojai_setup.facts.boot import read_loader

        loader = read_loader(root, facts.cmdline)
    except Exception as exc:  # noqa: BLE001
        facts.unknown["boot.loader"] = _reason(exc, root)
    try:
        facts.ttm = read_ttm(root, facts.cmdline, facts.grub, loader)
    except Exception as exc:  # noqa: BLE001
        facts.unknown["ttm"] = _reason(exc, root)
    try:
        from ojai_setup.facts.boot import read_boot
        from ojai_setup.formats.grub import bls_enabled

        main = _read(root, GRUB_DEFAULT)
        bls = bool(main) and _safe(lambda: bls_enabled(main))
        facts.boot = read_boot(root, bls, facts.ttm.modprobe if facts.ttm else [], loader)
    except Exception as exc:  # noqa: BLE001
        facts.unknown["boot"] = _reason(exc, root)
        if loader is not None:
            from ojai_setup.model.facts import Boot

            facts.boot = Boot(loader=loader)
    return facts


def _safe(fn: Callable[[], bool]) -> bool:
    try:
        return fn()
    except ValueError:
        return False
