"""Doctor checks: profiles and their preconditions are data (``checks/*.toml``).

A profile file names the hardware it is for and lists checks. Each check has an ``id``, a
``kind`` (the function below that evaluates it), the ``severity`` it reports when the
precondition does not hold, a ``fix`` and a ``link``; ``params`` go to the function. A check
function returns a :class:`Outcome` (holds or not, plus the evidence it saw); the engine turns
it into a :class:`Finding`. Severities are ordered, so the overall result is their maximum.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from enum import IntEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ojai_setup.core.errors import UsageError
from ojai_setup.core.paths import GIB, PAGE
from ojai_setup.formats.machine import bios_version_tuple, version_tuple
from ojai_setup.model.facts import Facts


class Severity(IntEnum):
    PASS = 0
    INFO = 1
    WARN = 2
    FAIL = 3

    @property
    def label(self) -> str:
        return self.name.lower()


class CheckSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    kind: str
    title: str
    severity: str = "fail"
    fix: str = ""
    link: str = ""
    params: dict[str, Any] = Field(default_factory=dict)


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    gpu_target: str | None = None
    pci_devices: list[str] = Field(default_factory=list)  # sysfs device ids of the iGPU
    cpu_match: list[str] = Field(default_factory=list)  # substrings of the CPU model name
    memory_gib: int | None = None
    apu: bool = True
    npu: bool = False
    default_gpu_memory_gib: int | None = None  # the TTM budget setup proposes
    reserve_gib: int = 4  # memory left to the OS when no default is given
    include: list[str] = Field(default_factory=list)
    checks: list[CheckSpec] = Field(default_factory=list)

    def gpu_budget_gib(self, total_gib: float) -> int:
        if self.default_gpu_memory_gib is not None:
            return self.default_gpu_memory_gib
        return max(1, int(total_gib) - self.reserve_gib)


class Finding(BaseModel):
    id: str
    title: str
    severity: str  # pass, info, warn, fail
    evidence: str
    fix: str | None = None
    link: str | None = None


class Outcome(BaseModel):
    ok: bool | None  # None: does not apply here (reported as info)
    evidence: str
    fix: str | None = None  # overrides the spec's fix when the function knows better


class ProfileError(UsageError):
    pass


CheckFn = Callable[[Facts, Profile, dict[str, Any]], Outcome]
KINDS: dict[str, CheckFn] = {}


def kind(name: str) -> Callable[[CheckFn], CheckFn]:
    def deco(fn: CheckFn) -> CheckFn:
        KINDS[name] = fn
        return fn

    return deco


# -- profiles --------------------------------------------------------------------------------

def checks_dir() -> Path:
    from ojai_setup.core.resources import data_dir

    return data_dir("checks")


def load_profile(name: str, directory: Path | None = None) -> Profile:
    directory = directory or checks_dir()
    path = directory / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in directory.glob("*.toml") if p.stem != "common"))
        raise ProfileError(f"no profile {name!r} (known: {known})")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        profile = Profile.model_validate(data)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: {exc}") from exc
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ProfileError(f"{path}: field {loc}: {err['msg']}") from exc
    included: list[CheckSpec] = []
    for inc in profile.include:
        included.extend(load_profile(inc, directory).checks)
    own = {c.id for c in profile.checks}
    profile.checks = [c for c in included if c.id not in own] + profile.checks
    for c in profile.checks:
        if c.kind not in KINDS:
            raise ProfileError(f"{path}: check {c.id}: unknown kind {c.kind!r}")
        if c.severity not in ("info", "warn", "fail"):
            raise ProfileError(f"{path}: check {c.id}: severity must be info, warn or fail")
    return profile


def profile_names(directory: Path | None = None) -> list[str]:
    directory = directory or checks_dir()
    return sorted(p.stem for p in directory.glob("*.toml") if p.stem not in ("common", "generic"))


def detect_profile(facts: Facts, directory: Path | None = None) -> Profile:
    """The profile for this hardware: by GPU target, then iGPU PCI id, then CPU name."""
    profiles = [load_profile(n, directory) for n in profile_names(directory)]
    targets = facts.gpu.targets if facts.gpu else []
    if facts.gpu and facts.gpu.hsa_override:
        targets = []  # rocminfo reports the overridden target; trust sysfs and the CPU instead
    devices = [c.pci_device for c in facts.gpu.cards] if facts.gpu else []
    cpu = (facts.cpu.model_name or "") if facts.cpu else ""
    for p in profiles:
        if p.gpu_target and p.gpu_target in targets:
            return p
    for p in profiles:
        if any(d in p.pci_devices for d in devices if d):
            return p
    for p in profiles:
        if any(m.lower() in cpu.lower() for m in p.cpu_match):
            return p
    return load_profile("generic", directory)


def run_checks(facts: Facts, profile: Profile) -> list[Finding]:
    findings = []
    for spec in profile.checks:
        try:
            out = KINDS[spec.kind](facts, profile, spec.params)
        except _Unknown as exc:
            out = Outcome(ok=None, evidence=f"unknown: {exc}")
        if out.ok is True:
            sev = "pass"
        elif out.ok is None:
            sev = "info"
        else:
            sev = spec.severity
        findings.append(Finding(id=spec.id, title=spec.title, severity=sev, evidence=out.evidence,
                                fix=None if sev == "pass" else (out.fix or spec.fix or None),
                                link=spec.link or None))
    return findings


def overall(findings: list[Finding]) -> Severity:
    return max((Severity[f.severity.upper()] for f in findings), default=Severity.PASS)


# -- check kinds -----------------------------------------------------------------------------

class _Unknown(Exception):
    """A fact the check needs was not read; the message says why."""


def _need(facts: Facts, section: str):
    value = getattr(facts, section)
    if value is None:
        raise _Unknown(facts.unknown.get(section, f"{section} not read"))
    return value


def _fmt_pages(pages: int | None) -> str:
    return "not set" if pages is None else f"{pages} pages ({pages * PAGE / GIB:.1f} GiB)"


@kind("gpu_target")
def _gpu_target(facts: Facts, profile: Profile, params: dict) -> Outcome:
    gpu = _need(facts, "gpu")
    want = params.get("target", profile.gpu_target)
    if gpu.rocminfo_error:
        cards = ", ".join(f"{c.card} {c.pci_device}" for c in gpu.cards) or "no AMD GPU in sysfs"
        return Outcome(ok=False, evidence=f"{gpu.rocminfo_error}; sysfs: {cards}")
    seen = ", ".join(f"{a.name} ({a.marketing_name})" for a in gpu.agents) or "no GPU agent"
    if gpu.hsa_override:
        # rocminfo reports the overridden target: judge by the PCI id in sysfs instead
        note = (f"rocminfo reports {seen}, but HSA_OVERRIDE_GFX_VERSION={gpu.hsa_override} "
                "makes it report an overridden target")
        if not profile.pci_devices:
            return Outcome(ok=None, evidence=note)
        ids = [c.pci_device for c in gpu.cards]
        return Outcome(ok=any(i in profile.pci_devices for i in ids),
                       evidence=f"{note}; sysfs PCI ids {', '.join(filter(None, ids)) or 'none'}, "
                       f"profile's: {', '.join(profile.pci_devices)}")
    if want is None:
        return Outcome(ok=bool(gpu.agents), evidence=f"rocminfo: {seen}")
    return Outcome(ok=want in gpu.targets, evidence=f"want {want}; rocminfo: {seen}")


@kind("hsa_override")
def _hsa_override(facts: Facts, profile: Profile, params: dict) -> Outcome:
    gpu = _need(facts, "gpu")
    if not gpu.hsa_override:
        return Outcome(ok=True, evidence="HSA_OVERRIDE_GFX_VERSION is not set")
    return Outcome(ok=False, evidence=f"HSA_OVERRIDE_GFX_VERSION={gpu.hsa_override} is set: "
                   "rocminfo and ROCm see the overridden target, not the GPU's own")


def _kernel_rule_holds(rule: dict, facts: Facts) -> bool | None:
    kernel = facts.kernel
    if rule.get("flavour") and kernel.flavour != rule["flavour"]:
        return None
    if rule.get("distro") and (facts.distro is None or facts.distro.id != rule["distro"]):
        return None
    return kernel.version >= version_tuple(rule["min"].replace("-", "."))


@kind("kernel_min")
def _kernel_min(facts: Facts, profile: Profile, params: dict) -> Outcome:
    kernel = _need(facts, "kernel")
    rules: list[dict] = params["rules"]
    for rule in rules:  # the first rule that applies to this kernel decides
        holds = _kernel_rule_holds(rule, facts)
        if holds is not None:
            what = " ".join(filter(None, [rule.get("distro"), rule.get("flavour"), "kernel"]))
            return Outcome(ok=holds, evidence=f"{kernel.release}; {what} needs >= {rule['min']}")
    return Outcome(ok=False, evidence=f"{kernel.release}; no rule accepts this kernel")


@kind("rocm_min")
def _rocm_min(facts: Facts, profile: Profile, params: dict) -> Outcome:
    if facts.rocm_version is None:
        return Outcome(ok=None, evidence=facts.unknown.get("rocm_version", "ROCm not found")
                       + " (a nightly llama.cpp build bundles its own ROCm runtime)")
    ok = version_tuple(facts.rocm_version) >= version_tuple(params["min"])
    return Outcome(ok=ok, evidence=f"ROCm {facts.rocm_version}; needs >= {params['min']}")


@kind("bios_min")
def _bios_min(facts: Facts, profile: Profile, params: dict) -> Outcome:
    bios = _need(facts, "bios")
    board = " ".join(dict.fromkeys(filter(None, [bios.sys_vendor, bios.product_name, bios.board_name])))
    match = params.get("product_match", [])
    if match and not any(m.lower() in board.lower() for m in match):
        return Outcome(ok=None, evidence=f"board {board!r} is not one this BIOS rule is for")
    have = bios_version_tuple(bios.bios_version or "")
    ok = bool(have) and have >= version_tuple(params["min"])
    return Outcome(ok=ok, evidence=f"{board}: BIOS {bios.bios_version} ({bios.bios_date}); "
                   f"needs >= {params['min']}")


@kind("ttm_active")
def _ttm_active(facts: Facts, profile: Profile, params: dict) -> Outcome:
    ttm = _need(facts, "ttm")
    if facts.gpu is not None and not facts.gpu.cards and not facts.gpu.agents:
        return Outcome(ok=None, evidence="no AMD GPU: the TTM limit does not matter here")
    configured, active = ttm.configured_pages, ttm.active_pages
    if configured is None:
        return Outcome(ok=False, evidence=f"GPU memory limit not configured; active "
                       f"{_fmt_pages(active)} (kernel default, about half of RAM)")
    ev = f"configured {_fmt_pages(configured)}, active {_fmt_pages(active)} ({ttm.live_module or 'no ttm module'})"
    if active == configured:
        return Outcome(ok=True, evidence=ev)
    rec = ttm.record
    if rec is not None and rec.expected_pages == configured:
        if ttm.boot_id and rec.boot_id == ttm.boot_id:
            return Outcome(ok=False, evidence=ev + "; reboot pending (applied during this boot)",
                           fix="Reboot to make the new limit active.")
        return Outcome(ok=False, evidence=ev + "; rebooted since apply but the limit is NOT active",
                       fix="The boot did not pick the limit up: check that grub.cfg was regenerated "
                       "(update-grub), that the module key matches the live module "
                       f"({ttm.live_module}.pages_limit), and /proc/cmdline.")
    return Outcome(ok=False, evidence=ev + "; not applied by ojai: a reboot may be pending, or "
                   "grub.cfg / the initramfs was not regenerated",
                   fix="Run `ojai setup --apply`, then reboot.")


@kind("ttm_module_key")
def _ttm_module_key(facts: Facts, profile: Profile, params: dict) -> Outcome:
    ttm = _need(facts, "ttm")
    places = [f"GRUB sets {ttm.grub_key}"] if ttm.grub_key else []
    modules = {ttm.grub_key.split(".")[0]} if ttm.grub_key else set()
    for m in ttm.modprobe:
        places.append(f"{m.path}:{m.line} sets {m.module} pages_limit")
        modules.add(m.module)
    if not ttm.live_module or not modules:
        return Outcome(ok=True, evidence=f"live module {ttm.live_module or 'unknown'}; "
                       + ("; ".join(places) or "no TTM limit configured"))
    return Outcome(ok=modules == {ttm.live_module}, evidence="; ".join(places)
                   + f"; the live module is {ttm.live_module}, which reads {ttm.live_module}.pages_limit")


@kind("ttm_sources_agree")
def _ttm_sources_agree(facts: Facts, profile: Profile, params: dict) -> Outcome:
    ttm = _need(facts, "ttm")
    values = {f"GRUB ({ttm.grub_key})": ttm.grub_pages} if ttm.grub_pages is not None else {}
    for m in ttm.modprobe:
        values[f"{m.path}:{m.line} ({m.module})"] = m.pages
    ev = "; ".join(f"{k}: {v}" for k, v in values.items()) or "only one source or none"
    return Outcome(ok=len(set(values.values())) <= 1, evidence=ev)


@kind("cmdline_absent")
def _cmdline_absent(facts: Facts, profile: Profile, params: dict) -> Outcome:
    tokens = _need(facts, "cmdline")
    bad = [t for t in tokens if t == params["token"] or t.startswith(params["token"] + "=")
           and (params.get("value") is None or t == f"{params['token']}={params['value']}")]
    if params.get("only_with_npu") and not profile.npu:
        return Outcome(ok=None, evidence="the NPU path is not part of this profile")
    return Outcome(ok=not bad, evidence=" ".join(bad) + " on the kernel command line" if bad
                   else f"{params['token']} not on the kernel command line")


@kind("deprecated_gttsize")
def _deprecated_gttsize(facts: Facts, profile: Profile, params: dict) -> Outcome:
    ttm = _need(facts, "ttm")
    if not ttm.deprecated_gttsize:
        return Outcome(ok=True, evidence="no amdgpu.gttsize on the kernel command line")
    return Outcome(ok=False, evidence=" ".join(ttm.deprecated_gttsize)
                   + " on the kernel command line: deprecated (or unknown and ignored)")


@kind("no_amdgpu_dkms")
def _no_amdgpu_dkms(facts: Facts, profile: Profile, params: dict) -> Outcome:
    if facts.amdgpu_dkms is None:
        raise _Unknown(facts.unknown.get("amdgpu_dkms", "not read"))
    if not profile.apu:
        return Outcome(ok=None, evidence="not an APU profile")
    return Outcome(ok=not facts.amdgpu_dkms, evidence="amdgpu-dkms is installed (amdttm)"
                   if facts.amdgpu_dkms else "in-tree amdgpu driver")


@kind("npu_device")
def _npu_device(facts: Facts, profile: Profile, params: dict) -> Outcome:
    npu = _need(facts, "npu")
    if not npu.accel_devices:
        return Outcome(ok=False, evidence="no /dev/accel/accel* device")
    ver = npu.amdxdna_version
    need = params.get("amdxdna_min", "0.6")
    ok = ver is not None and version_tuple(ver) >= version_tuple(need)
    return Outcome(ok=ok, evidence=f"{', '.join(npu.accel_devices)}; amdxdna {ver or 'unknown'} "
                   f"(needs >= {need})")


@kind("npu_firmware")
def _npu_firmware(facts: Facts, profile: Profile, params: dict) -> Outcome:
    npu = _need(facts, "npu")
    if npu.firmware_version is None:
        return Outcome(ok=None, evidence="NPU firmware version unknown (no flm or xrt-smi output)")
    ok = version_tuple(npu.firmware_version) >= version_tuple(params["min"])
    return Outcome(ok=ok, evidence=f"NPU firmware {npu.firmware_version} (from {npu.firmware_source});"
                   f" needs >= {params['min']}")


@kind("npu_memlock")
def _npu_memlock(facts: Facts, profile: Profile, params: dict) -> Outcome:
    npu = _need(facts, "npu")
    memlock = (npu.flm or {}).get("memlock") or {}
    if memlock.get("ok") is None:
        return Outcome(ok=None, evidence="memlock limit unknown (no `flm validate` output)")
    return Outcome(ok=bool(memlock["ok"]), evidence=f"memlock limit {memlock.get('observed')} "
                   f"(needs {memlock.get('required')}; from flm validate)")


@kind("memory_size")
def _memory_size(facts: Facts, profile: Profile, params: dict) -> Outcome:
    mem = _need(facts, "memory")
    if profile.memory_gib is None:
        return Outcome(ok=None, evidence=f"{mem.total_gib:.1f} GiB")
    # MemTotal excludes the BIOS carve-out and kernel reservations: allow 15 %
    ok = mem.total_gib >= profile.memory_gib * 0.85 - 8
    return Outcome(ok=ok, evidence=f"{mem.total_gib:.1f} GiB usable; profile expects "
                   f"{profile.memory_gib} GiB installed")


@kind("tool_present")
def _tool_present(facts: Facts, profile: Profile, params: dict) -> Outcome:
    tool = facts.tools.get(params["tool"])
    if tool is None:
        return Outcome(ok=False, evidence=f"{params['tool']} not found")
    return Outcome(ok=True, evidence=f"{tool.path or params['tool']}: {tool.version or 'version unknown'}")


@kind("model_pairs")
def _model_pairs(facts: Facts, profile: Profile, params: dict) -> Outcome:
    if not facts.models:
        return Outcome(ok=None, evidence="no model route set up yet")
    bad = [m for m in facts.models if not m.ok]
    if bad:
        return Outcome(ok=False, evidence="; ".join(f"{m.route}: " + "; ".join(m.reasons) for m in bad))
    return Outcome(ok=True, evidence=", ".join(
        f"{m.route} ({'main + MTP draft' if m.draft else 'MTP heads in the main file'}) matched"
        for m in facts.models))


def _lemonade(facts: Facts) -> dict | None:
    tool = facts.tools.get("lemonade") or facts.tools.get("lemond")
    return (tool.detail or {}) if tool else None


@kind("lemonade_bins")
def _lemonade_bins(facts: Facts, profile: Profile, params: dict) -> Outcome:
    """Each ``llamacpp.*_bin`` path in Lemonade's config must be an executable, not a folder."""
    from ojai_setup.domain.lemonade import bin_problem

    detail = _lemonade(facts)
    if detail is None:
        return Outcome(ok=None, evidence="Lemonade is not installed")
    bins = detail.get("bins") or {}
    if not bins:
        return Outcome(ok=True, evidence=f"no llama.cpp binary path set in {detail.get('config_dir')}"
                       "/config.json (Lemonade uses its own builds)")
    problems = [p for p in (bin_problem(k, b["value"], b["kind"]) for k, b in bins.items()) if p]
    if problems:
        return Outcome(ok=False, evidence="; ".join(problems),
                       fix=" ".join(p[p.index("set it to"):] if "set it to" in p else p
                                    for p in problems))
    return Outcome(ok=True, evidence=", ".join(f"{k} = {b['value']} (executable)"
                                               for k, b in bins.items()))


@kind("lemonade_server")
def _lemonade_server(facts: Facts, profile: Profile, params: dict) -> Outcome:
    """Lemonade's version (both version forms), port, config directory and health."""
    detail = _lemonade(facts)
    if detail is None:
        return Outcome(ok=None, evidence="Lemonade is not installed")
    version = detail.get("version") or {}
    what = (f"{version.get('text')} ({'calendar' if version.get('calendar') else 'semantic'} "
            "version)") if version else "version unknown"
    evidence = (f"{what}; port {detail.get('port')}; {detail.get('mode')} reading "
                f"{detail.get('config_dir')}; health: {detail.get('health')}")
    if detail.get("config_error"):
        return Outcome(ok=False, evidence=evidence + "; " + detail["config_error"],
                       fix="Fix config.json by hand (lemond renames a file it cannot parse to "
                           "config.json.corrupted and starts with defaults).")
    health = str(detail.get("health", ""))
    if health.startswith(("no answer", "answered")):
        return Outcome(ok=False, evidence=evidence)
    return Outcome(ok=True, evidence=evidence)
