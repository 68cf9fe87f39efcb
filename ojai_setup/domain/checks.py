"""The doctor's checks: one function per ``kind`` a profile's check names (``checks/*.toml``),
registered with :func:`~ojai_setup.domain.check_engine.kind`. Each returns an
:class:`~ojai_setup.domain.check_engine.Outcome` (holds or not, plus the evidence it saw), or
``None`` where nothing it looks at exists; the engine (:mod:`ojai_setup.domain.check_engine`)
loads the profiles and turns outcomes into findings. Importing this module registers the kinds,
so the engine's functions that need them are used from here.
"""

from typing import TYPE_CHECKING, Any

from ojai_setup.core.paths import GIB, PAGE
from ojai_setup.domain.check_engine import (  # the engine's API, with every kind registered
    KINDS,
    CheckSpec,
    Finding,
    Outcome,
    Profile,
    ProfileError,
    Severity,
    Unknown,
    chosen_profile,
    detect_profile,
    fix_for_root,
    igpu,
    instinct_target,
    kind,
    kind_of_many,
    load_profile,
    machine_target,
    overall,
    run_checks,
)
from ojai_setup.domain.profiles import checks_dir
from ojai_setup.formats.machine import ROCM_PRESENT, bios_version_tuple, version_tuple
from ojai_setup.model.facts import Facts, Gpu, ModelPair, RocmAgent

if TYPE_CHECKING:
    from ojai_setup.boot.base import BootPath

__all__ = ["KINDS", "CheckSpec", "Finding", "Outcome", "Profile", "ProfileError", "Severity",
           "chosen_profile", "detect_profile", "fix_for_root", "igpu", "instinct_gpus",
           "instinct_target", "load_profile", "machine_target", "npu_route_wanted", "overall",
           "run_checks"]


@kind_of_many("known_bad")
def known_bad_findings(facts: Facts, profile: Profile, spec: CheckSpec) -> list[Finding]:
    """One finding ``<id>.<row>`` for each row of the known-bad table that matches this
    machine (its source as the link), or one ``<id>`` that passes, naming the table."""
    from ojai_setup.domain.known_bad import TABLE, matches

    path = checks_dir() / "tables" / TABLE
    found, count, unknown = matches(facts, machine_target(facts, profile) or profile.gpu_target,
                                    profile.npu, path)
    if found:
        return [Finding(id=f"{spec.id}.{m.row.id}", title=m.row.title, severity=m.row.severity,
                        evidence=f"{m.evidence} (reported for: {m.row.covers})",
                        fix=fix_for_root(m.row.fix, facts.root), link=m.row.source)
                for m in found]
    note = ("; not known here: " + ", ".join(sorted(unknown))) if unknown else ""
    return [Finding(id=spec.id, title=spec.title, severity="pass",
                    evidence=f"none of the {count} rows of checks/tables/{TABLE} matches this "
                    f"machine{note}", link=spec.link or None)]


def _need(facts: Facts, section: str) -> Any:
    value = getattr(facts, section)
    if value is None:
        raise Unknown(facts.unknown.get(section, f"{section} not read"))
    return value


def _fmt_pages(pages: int | None) -> str:
    return "not set" if pages is None else f"{pages} pages ({pages * PAGE / GIB:.1f} GiB)"


UNSET_OVERRIDE_FIX = (
    "Unset HSA_OVERRIDE_GFX_VERSION wherever it is set (~/.bashrc, ~/.profile, /etc/environment, "
    "the service's unit) and run rocminfo again: ROCm must see the GPU as its own target. ojai "
    "sets an override itself only in a launch script, and only when the installed llama-server "
    "lacks the GPU's own target.")


def _renamed(gpu: Gpu) -> list[RocmAgent]:
    """GPU agents whose Chip ID says the silicon is another target than rocminfo's Name."""
    return [a for a in gpu.agents if a.native_target and a.native_target != a.name]


def _override_origin(gpu: Gpu) -> str:
    if gpu.hsa_override:
        return f"HSA_OVERRIDE_GFX_VERSION={gpu.hsa_override} renames it"
    if gpu.environment_unknown:
        return ("an HSA_OVERRIDE_GFX_VERSION was set where rocminfo ran, and this capture has no "
                "record of that environment")
    return "an HSA_OVERRIDE_GFX_VERSION was set where rocminfo ran, though not in this environment"


def _renamed_evidence(agent: RocmAgent, gpu: Gpu) -> str:
    row = igpu(agent.chip_id)
    what = row.name if row else f"PCI device {agent.chip_id}"
    return (f"rocminfo reports {agent.name} ({agent.marketing_name}) for Chip ID {agent.chip_id}, "
            f"the {what}, whose own target is {agent.native_target}: {_override_origin(gpu)}")


def _notes(gpu: Gpu) -> str:
    return f" (rocminfo text: {'; '.join(gpu.rocminfo_notes)})" if gpu.rocminfo_notes else ""


@kind("gpu_target")
def _gpu_target(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    """Whether ROCm sees the iGPU as its own target; a target with a fix of its own in
    ``params["fix_for"]`` (one without a nightly build) is told that fix."""
    want = params.get("target") or machine_target(facts, profile) or profile.gpu_target or (
        profile.gpu_targets[0] if profile.gpu_targets else None)
    out = _gpu_target_outcome(facts, profile, params, want)
    own = (params.get("fix_for") or {}).get(want or "")
    if out.ok is False and own and out.fix is None:
        out = out._replace(fix=own)
    return out


def _gpu_target_outcome(facts: Facts, profile: Profile, params: dict[str, Any],
                        want: str | None) -> Outcome:
    gpu = _need(facts, "gpu")
    if gpu.rocminfo_error:
        cards = ", ".join(f"{c.card} {c.pci_device}" for c in gpu.cards) or "no AMD GPU in sysfs"
        return Outcome(ok=False, evidence=f"{gpu.rocminfo_error}; sysfs: {cards}")
    seen = ", ".join(f"{a.name} ({a.marketing_name})" for a in gpu.agents) or "no GPU agent"
    renamed = _renamed(gpu)
    if renamed:  # the hardware id says what the silicon is, whatever the override made of it
        return Outcome(ok=False, evidence="; ".join(_renamed_evidence(a, gpu) for a in renamed)
                       + _notes(gpu), fix=UNSET_OVERRIDE_FIX)
    if gpu.hsa_override and not any(a.native_target for a in gpu.agents):
        # rocminfo reports the overridden target and no Chip ID says what the GPU is: judge by
        # the PCI id in sysfs instead
        note = (f"rocminfo reports {seen}, but HSA_OVERRIDE_GFX_VERSION={gpu.hsa_override} "
                "makes it report an overridden target")
        ids = [c.pci_device for c in gpu.cards]
        known = [row.target for row in map(igpu, ids) if row]
        if want is None:
            return Outcome(ok=None, evidence=note)
        ok = want in known or any(i in profile.pci_devices for i in ids)
        return Outcome(ok=ok, evidence=f"{note}; sysfs PCI ids {', '.join(filter(None, ids)) or 'none'}"
                       + ("" if ok else f", none of them a {want} iGPU"))
    if want is None:
        return Outcome(ok=bool(gpu.agents), evidence=f"rocminfo: {seen}" + _notes(gpu))
    ok = want in gpu.targets
    cards = "" if ok else "".join(
        f"; sysfs {c.card} is PCI device {c.pci_device}, the {row.name} ({row.target})"
        for c in gpu.cards if (row := igpu(c.pci_device)))
    return Outcome(ok=ok, evidence=f"want {want}; rocminfo: {seen}" + cards + _notes(gpu))


@kind("hsa_override")
def _hsa_override(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    gpu = _need(facts, "gpu")
    renamed = _renamed(gpu)
    if gpu.hsa_override:
        return Outcome(ok=False, evidence=f"HSA_OVERRIDE_GFX_VERSION={gpu.hsa_override} is set: "
                       "rocminfo and ROCm see the overridden target, not the GPU's own")
    if renamed:
        return Outcome(ok=False, evidence=_renamed_evidence(renamed[0], gpu))
    if gpu.environment_unknown:
        agreed = [a for a in gpu.agents if a.native_target and a.native_target == a.name]
        if agreed:
            a = agreed[0]
            return Outcome(ok=True, evidence=f"{gpu.environment_unknown}, but rocminfo reports "
                           f"{a.name} for Chip ID {a.chip_id}, its own target: no override was in "
                           "effect where rocminfo ran")
        return Outcome(ok=None, evidence=f"unknown: {gpu.environment_unknown}")
    return Outcome(ok=True, evidence="HSA_OVERRIDE_GFX_VERSION is not set")


def _kernel_rule_holds(rule: dict[str, Any], facts: Facts) -> bool | None:
    kernel = facts.kernel
    if kernel is None:  # kernel_min asks only once it is known
        return None
    if rule.get("flavour") and kernel.flavour != rule["flavour"]:
        return None
    if rule.get("distro") and (facts.distro is None or facts.distro.id != rule["distro"]):
        return None
    return kernel.version >= version_tuple(rule["min"].replace("-", "."))


@kind("kernel_min")
def _kernel_min(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    kernel = _need(facts, "kernel")
    rules: list[dict[str, Any]] = params["rules"]
    for rule in rules:  # the first rule that applies to this kernel decides
        holds = _kernel_rule_holds(rule, facts)
        if holds is not None:
            what = " ".join(filter(None, [rule.get("distro"), rule.get("flavour"), "kernel"]))
            evidence = f"{kernel.release}; {what} needs >= {rule['min']}"
            flm = (facts.npu.flm or {}) if facts.npu else {}
            if not holds and params.get("flm_decides") and flm.get("ready") and \
                    (flm.get("kernel") or {}).get("ok") is True:
                # a distribution kernel that backports the NPU driver: FastFlowLM (which no
                # longer has a kernel floor of its own) runs on it, so the number alone is no
                # reason to refuse it
                return Outcome(ok=False, severity="warn", evidence=evidence + "; but `flm "
                               "validate` passes on this kernel (the distribution backports the "
                               "driver), so it is not refused on its version alone",
                               fix=params.get("fix_backport"))
            return Outcome(ok=holds, evidence=evidence)
    return Outcome(ok=False, evidence=f"{kernel.release}; no rule accepts this kernel")


@kind("rocm_min")
def _rocm_min(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    if facts.rocm_version is None:
        why = facts.unknown.get("rocm_version", "ROCm not found")
        if why.startswith(ROCM_PRESENT):  # there, version unread: never "install ROCm 7.2"
            return Outcome(ok=None, evidence=f"unknown: {why}", fix=(
                f"Check the version of the ROCm you have (`ls /opt/rocm`, your package "
                f"manager); ojai needs {params['min']} or newer to build llama.cpp itself."))
        return Outcome(ok=None, evidence=why
                       + " (a nightly llama.cpp build bundles its own ROCm runtime)")
    ok = version_tuple(facts.rocm_version) >= version_tuple(params["min"])
    return Outcome(ok=ok, evidence=f"ROCm {facts.rocm_version}; needs >= {params['min']}")


@kind("bios_min")
def _bios_min(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    bios = _need(facts, "bios")
    board = " ".join(dict.fromkeys(filter(None, [bios.sys_vendor, bios.product_name, bios.board_name])))
    if "min" not in params:  # a family: BIOS minimums are facts of a box (its own profile)
        return Outcome(ok=None, evidence=f"no BIOS minimum is known for {board or 'this board'} "
                       f"(BIOS {bios.bios_version})")
    match = params.get("product_match", [])
    if match and not any(m.lower() in board.lower() for m in match):
        return Outcome(ok=None, evidence=f"board {board!r} is not one this BIOS rule is for")
    have = bios_version_tuple(bios.bios_version or "")
    ok = bool(have) and have >= version_tuple(params["min"])
    return Outcome(ok=ok, evidence=f"{board}: BIOS {bios.bios_version} ({bios.bios_date}); "
                   f"needs >= {params['min']}")


def _loader_kind(facts: Facts) -> str:
    loader = facts.boot.loader if facts.boot else None
    return loader.kind if loader else "grub"


def _boot_path(facts: Facts) -> "BootPath":
    from ojai_setup.boot.table import PATHS

    return PATHS.get(_loader_kind(facts), PATHS["unknown"])


def _family(facts: Facts) -> str:
    """os-release's ID and ID_LIKE, for the boot path's command."""
    return " ".join([facts.distro.id, *facts.distro.like]) if facts.distro else ""


def _regenerate_hint(facts: Facts) -> str:
    return _boot_path(facts).hint(_family(facts))


def _runs_here(facts: Facts) -> str:
    """What makes an edit reach the next boot on this machine's boot path, as it runs here: the
    one GRUB tool of its distribution, else the boot path's own."""
    return _boot_path(facts).runs_here(_family(facts))


@kind("ttm_active")
def _ttm_active(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    """Three states, checked in the order the boot uses them: configured (the deciding file of
    the boot path, as its consumer reads it: grub-mkconfig, kernel-install, limine-entry-tool,
    kernelstub; and kmod's modprobe.d), generated (the default entry: grub.cfg, the BLS or
    loader entry, the UKI's command line, limine.conf, kernelstub's ESP entry; the initramfs
    of the kernel that will boot), active (/proc/cmdline and the live module). The first that
    differs names the one action that fixes it, with that boot path's own command: edit,
    regenerate, or reboot."""
    from ojai_setup.formats.kernel_params import cmdline_param

    ttm = _need(facts, "ttm")
    if (not profile.forced and facts.gpu is not None and not facts.gpu.cards
            and not facts.gpu.agents):
        return Outcome(ok=None, evidence="no AMD GPU: the TTM limit does not matter here "
                       "(force a profile with --profile to check it anyway)")
    configured, active = ttm.configured_pages, ttm.active_pages
    path = _boot_path(facts)
    if configured is None and active is None and facts.cmdline is None:
        return Outcome(ok=None, evidence="unknown: neither /proc/cmdline, a boot loader or "
                       "modprobe.d setting nor /sys/module/ttm could be read")
    if configured is None:
        fix = path.unconfigured_fix(_family(facts))
        return Outcome(ok=False, evidence=f"GPU memory limit not configured; active "
                       f"{_fmt_pages(active)} (kernel default, about half of RAM); boot path: "
                       f"{path.title}", fix=fix)
    cmdline = ttm.configured_cmdline()
    where = cmdline[2] if cmdline else (ttm.modprobe[-1].path if ttm.modprobe else None)
    ev = (f"configured {_fmt_pages(configured)}" + (f" in {where}" if where else "")
          + f", active {_fmt_pages(active)} ({ttm.live_module or 'no ttm module'})")
    status, boot = facts.apply, facts.boot
    if status is not None and (status.owed or status.interrupted):
        owed = ", ".join(status.owed) or "the rest of the interrupted apply"
        return Outcome(ok=False, evidence=ev + f"; generated configuration not up to date: an "
                       f"earlier apply still owes {owed}",
                       fix=f"Run `ojai setup --apply` first (it runs {owed}); reboot only after "
                       "that.")
    gen = boot.generated if boot else None
    notes: list[str] = []
    if cmdline is not None and path.has_generated:
        key, pages, _ = cmdline
        if gen is None:
            notes.append("generated: " + ((boot.generated_error if boot else None)
                                          or f"no generated boot entry found to compare ({path.title})"))
        else:
            got = cmdline_param(gen.tokens, key)
            if got != str(pages):
                have = f"{key}={got}" if got is not None else f"no {key}"
                return Outcome(ok=False, evidence=ev + f"; generated: {gen.config} (default entry "
                               f"'{gen.title}') boots with {have}: "
                               + path.not_regenerated(),
                               fix=f"Regenerate it: {_regenerate_hint(facts)} (or `ojai setup "
                               "--apply`), then reboot.")
            notes.append(f"generated: {gen.config} agrees")
    ir = boot.initramfs if boot else None
    if ttm.modprobe and ir is not None and ir.error is None and ir.carries_ttm:
        want = ttm.modprobe[-1].pages
        stale = ir.missing + ir.older_than
        if (ir.pages is not None and ir.pages != want) or stale:
            release = gen.release if gen and gen.release else "$(uname -r)"
            why = (f"holds pages_limit={ir.pages}" if ir.pages is not None and ir.pages != want
                   else f"was built before {', '.join(stale)} changed or lacks it")
            return Outcome(ok=False, evidence=ev + f"; generated: the initramfs {ir.image} "
                           f"(which loads the TTM module) {why}",
                           fix=f"Rebuild the initramfs of the kernel that will boot: `sudo "
                           f"update-initramfs -u -k {release}` (dracut: `sudo dracut --force "
                           f"--kver {release}`; mkinitcpio: `sudo mkinitcpio -P`), or `ojai "
                           "setup --apply`; then reboot.")
        notes.append(f"initramfs {ir.image} agrees")
    ev += "".join(f"; {n}" for n in notes)
    if active == configured:
        return Outcome(ok=True, evidence=ev)
    rec = ttm.record
    if rec is not None and rec.expected_pages == configured:
        if ttm.boot_id and rec.boot_id == ttm.boot_id:
            return Outcome(ok=False, evidence=ev + "; reboot pending (applied during this boot)",
                           fix="Reboot to make the new limit active.")
        return Outcome(ok=False, evidence=ev + "; rebooted since apply but the limit is NOT active",
                       fix="The boot did not pick the limit up: check "
                       + (f"that the boot configuration was regenerated ({_regenerate_hint(facts)}), "
                          if gen is None else "")
                       + f"that the module key matches the live module ({ttm.live_module}."
                       "pages_limit), that the default boot entry is the one that booted, and "
                       "/proc/cmdline.")
    if gen is not None and cmdline is not None:
        return Outcome(ok=False, evidence=ev + "; reboot pending (the generated configuration "
                       "has the limit, the running kernel does not)",
                       fix="Reboot to make the new limit active.")
    return Outcome(ok=False, evidence=ev + "; not applied by ojai: a reboot may be pending, or "
                   f"the boot configuration / the initramfs was not regenerated ({path.title})",
                   fix=f"Run `ojai setup --apply` (it runs {_runs_here(facts)}), then reboot.")


@kind("ttm_module_key")
def _ttm_module_key(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    ttm = _need(facts, "ttm")
    cmdline = ttm.configured_cmdline()
    places = [f"{cmdline[2]} sets {cmdline[0]}"] if cmdline else []
    modules = {cmdline[0].split(".")[0]} if cmdline else set()
    for m in ttm.modprobe:
        places.append(f"{m.path}:{m.line} sets {m.module} pages_limit")
        modules.add(m.module)
    if not ttm.live_module and facts.cmdline is None:
        return Outcome(ok=None, evidence="unknown: no TTM module in /sys/module and no /proc/cmdline"
                       + (f"; {'; '.join(places)}" if places else ""))
    if not ttm.live_module or not modules:
        return Outcome(ok=True, evidence=f"live module {ttm.live_module or 'unknown'}; "
                       + ("; ".join(places) or "no TTM limit configured"))
    return Outcome(ok=modules == {ttm.live_module}, evidence="; ".join(places)
                   + f"; the live module is {ttm.live_module}, which reads {ttm.live_module}.pages_limit")


@kind("ttm_sources_agree")
def _ttm_sources_agree(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    ttm = _need(facts, "ttm")
    cmdline = ttm.configured_cmdline()
    values = {f"{cmdline[2]} ({cmdline[0]})": cmdline[1]} if cmdline else {}
    for m in ttm.modprobe:
        values[f"{m.path}:{m.line} ({m.module})"] = m.pages
    ev = "; ".join(f"{k}: {v}" for k, v in values.items()) or "only one source or none"
    ok = len(set(values.values())) <= 1
    if not ok and cmdline:  # libkmod-config.c: kmod_config_new reads /proc/cmdline last
        ev += ("; the kernel command line wins (kmod applies its module options after "
               "/etc/modprobe.d's, and the module takes the last value)")
    return Outcome(ok=ok, evidence=ev)


@kind("cmdline_absent")
def _cmdline_absent(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    tokens = _need(facts, "cmdline")
    bad = [t for t in tokens if t == params["token"] or t.startswith(params["token"] + "=")
           and (params.get("value") is None or t == f"{params['token']}={params['value']}")]
    if params.get("only_with_npu") and not profile.npu:
        return Outcome(ok=None, evidence="the NPU path is not part of this profile")
    fix = _boot_path(facts).remove_fix(params["token"], _family(facts)) if bad else None
    evidence = (" ".join(bad) + " on the kernel command line" if bad
                else f"{params['token']} not on the kernel command line")
    if params.get("only_with_npu") and params.get("without_npu"):
        wanted = npu_route_wanted(facts)
        if not wanted:
            # the NPU is not used here: the IOMMU off is a trade the owner may make knowingly
            note = params["without_npu"]
            if bad:
                return Outcome(ok=False, severity="info", evidence=f"{evidence}; FastFlowLM is "
                               f"not installed, so the NPU is not used: {note}",
                               fix=(fix or "Remove it from the kernel command line and reboot")
                               .rstrip(".") + " before you set up the NPU route; until then it "
                               "costs nothing.")
            evidence += f"; the NPU is not used here (FastFlowLM is not installed): {note}"
    return Outcome(ok=not bad, evidence=evidence, fix=fix)


@kind("deprecated_gttsize")
def _deprecated_gttsize(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    ttm = _need(facts, "ttm")
    if not ttm.deprecated_gttsize:
        return Outcome(ok=True, evidence="no amdgpu.gttsize on the kernel command line")
    return Outcome(ok=False, evidence=" ".join(ttm.deprecated_gttsize)
                   + " on the kernel command line: deprecated (or unknown and ignored)")


@kind("no_amdgpu_dkms")
def _no_amdgpu_dkms(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    if facts.amdgpu_dkms is None:
        raise Unknown(facts.unknown.get("amdgpu_dkms", "not read"))
    if not profile.apu:
        return Outcome(ok=None, evidence="not an APU profile")
    return Outcome(ok=not facts.amdgpu_dkms, evidence="amdgpu-dkms is installed (amdttm)"
                   if facts.amdgpu_dkms else "in-tree amdgpu driver")


def _npu_driver_fix(facts: Facts, *, then: str = "then reboot.") -> str:
    """The NPU driver and runtime steps for this machine's kernel and distribution
    (checks/tables/distributions.toml: the same data the NPU step of setup uses)."""
    from ojai_setup.domain.distributions import family_of, npu_driver_steps

    distro = facts.distro
    fam = family_of(distro.id, distro.like) if distro else None
    kernel = facts.kernel
    installed = bool(facts.packages and facts.packages.get("amdxdna-dkms"))
    steps = npu_driver_steps(kernel.version if kernel else None,
                             kernel.release if kernel else None, fam, driver_installed=installed)
    return " ".join(steps) + " " + then[0].upper() + then[1:]


@kind("npu_device")
def _npu_device(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    from ojai_setup.domain.distributions import kernel_carries_npu_driver, load

    npu = _need(facts, "npu")
    carries = kernel_carries_npu_driver(facts.kernel.version if facts.kernel else None)
    if not npu.accel_devices:
        if carries:
            return Outcome(ok=False, evidence="no /dev/accel/accel* device, although the running "
                           f"kernel {facts.kernel.release if facts.kernel else ''} carries the amdxdna driver",
                           fix="No driver to install: the running kernel carries amdxdna. Check "
                           "that the NPU (IPU) is enabled in the BIOS and that amd_iommu=off is "
                           "not on the kernel command line; `sudo dmesg | grep amdxdna` says why "
                           "it did not bind.")
        return Outcome(ok=False, evidence="no /dev/accel/accel* device",
                       fix=_npu_driver_fix(facts))
    ver = npu.amdxdna_version
    need = params.get("amdxdna_min", "0.6")
    if ver is None and carries:
        # an in-tree module has no /sys/module/amdxdna/version; 7.0's is FastFlowLM's driver
        return Outcome(ok=True, evidence=f"{', '.join(npu.accel_devices)}; amdxdna in-tree in "
                       f"kernel {facts.kernel.release if facts.kernel else ''} (Linux {load().npu_driver.in_tree_kernel} "
                       "or newer: the driver FastFlowLM needs)")
    ok = ver is not None and version_tuple(ver) >= version_tuple(need)
    return Outcome(ok=ok, evidence=f"{', '.join(npu.accel_devices)}; amdxdna {ver or 'unknown'} "
                   f"(needs >= {need})", fix=None if ok else _npu_driver_fix(facts))


def npu_route_wanted(facts: Facts) -> str | None:
    """Why the NPU route is wanted on this machine (FastFlowLM is installed), or None."""
    if facts.npu is not None and facts.npu.flm is not None:
        return "FastFlowLM is installed (flm validate ran)"
    if "flm" in facts.tools:
        return "FastFlowLM is installed"
    return None


@kind("npu_firmware")
def _npu_firmware(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    npu = _need(facts, "npu")
    if npu.firmware_version is None:
        return Outcome(ok=None, evidence="NPU firmware version unknown (no flm or xrt-smi output)")
    ok = version_tuple(npu.firmware_version) >= version_tuple(params["min"])
    flm_says = ((npu.flm or {}).get("firmware") or {}).get("ok")
    if flm_says is False:
        ok = False
    evidence = (f"NPU firmware {npu.firmware_version} (from {npu.firmware_source}); "
                f"needs >= {params['min']}")
    if ok:
        return Outcome(ok=True, evidence=evidence)
    if flm_says is False:
        evidence += "; FastFlowLM reports it as incompatible: the NPU route cannot work"
    wanted = npu_route_wanted(facts)
    fix = _npu_firmware_fix(facts, params)
    if wanted and profile.npu:
        return Outcome(ok=False, severity="fail", evidence=f"{evidence}; the NPU route is wanted: {wanted}",
                       fix=fix + " Without the NPU, leave its route out: `ojai setup --no-npu`.")
    return Outcome(ok=False, evidence=evidence + ("; FastFlowLM is not installed, so nothing uses "
                                                  "the NPU yet" if not wanted else ""), fix=fix)


def _npu_firmware_fix(facts: Facts, params: dict[str, Any]) -> str:
    """NPU firmware 1.1: a linux-firmware that has it, by this distribution's package manager,
    and a driver that loads it (the running kernel's, where it carries one)."""
    from ojai_setup.domain.distributions import family_of

    distro = facts.distro
    fam = family_of(distro.id, distro.like) if distro else None
    update = (f"`{fam.install_command(['linux-firmware'])}`" if fam and fam.manager != "nix"
              else "your distribution's linux-firmware" if fam is None
              else "a newer nixpkgs (hardware.enableRedistributableFirmware)")
    note = params.get("firmware_note", "")
    return (f"FastFlowLM needs NPU firmware {params['min']} or newer (amdnpu/17f0_*/npu_7.sbin, "
            f"1.1.2.64): update linux-firmware ({update}){note}. "
            + _npu_driver_fix(facts, then="reboot and run `flm validate` again."))


@kind("npu_memlock")
def _npu_memlock(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    npu = _need(facts, "npu")
    if npu.flm is None:
        return Outcome(ok=None, evidence="memlock limit unknown (no `flm validate` output)")
    memlock = npu.flm.get("memlock") or {}
    if memlock.get("ok") is None:
        unread = [line for line in npu.flm.get("unread") or [] if "memlock" in line.lower()]
        if unread:
            return Outcome(ok=None, evidence=f"memlock limit unknown: flm validate printed "
                           f"{unread[0]!r}, which could not be read")
        if memlock.get("observed"):
            return Outcome(ok=None, evidence=f"memlock limit {memlock['observed']!r} from flm "
                           "validate could not be read as a size")
        return Outcome(ok=None, evidence="memlock limit unknown: the flm validate output is there "
                       "but has no memlock line")
    return Outcome(ok=bool(memlock["ok"]), evidence=f"memlock limit {memlock.get('observed')} "
                   f"(needs {memlock.get('required')}; from flm validate)")


@kind("memory_size")
def _memory_size(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    mem = _need(facts, "memory")
    if profile.memory_gib is not None:
        # MemTotal excludes the BIOS carve-out and kernel reservations: allow 15 %
        ok = mem.total_gib >= profile.memory_gib * 0.85 - 8
        return Outcome(ok=ok, evidence=f"{mem.total_gib:.1f} GiB usable; profile expects "
                       f"{profile.memory_gib} GiB installed")
    if not profile.apu:
        return Outcome(ok=None, evidence=f"{mem.total_gib:.1f} GiB")
    budget = profile.gpu_budget_gib(mem.total_gib)
    need = params.get("min_budget_gib", 8)
    return Outcome(ok=budget >= need, evidence=f"{mem.total_gib:.1f} GiB usable; `ojai setup` "
                   f"proposes a GPU budget of {budget} GiB, leaving {mem.total_gib - budget:.1f} GiB "
                   f"to the OS" + ("" if budget >= need else f"; less than the {need} GiB the "
                                   "smallest model routes need"))


@kind("vram_carveout")
def _vram_carveout(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    """The BIOS carve-out ("UMA Frame Buffer Size") is RAM only the GPU's VRAM heap can use; on
    these APUs the GPU takes its memory through the TTM limit instead, so the carve-out is best
    kept at the BIOS minimum, and the TTM limit re-checked when a BIOS update changes it."""
    gpu = _need(facts, "gpu")
    cards = [c for c in gpu.cards if c.vram_total is not None]
    if not cards:
        return Outcome(ok=None, evidence="no mem_info_vram_total in sysfs: the carve-out is unknown")
    vram = max(c.vram_total for c in cards)
    mem = facts.memory
    advice = ("set UMA Frame Buffer Size (or iGPU Memory) to its minimum in the BIOS and let "
              "`ojai setup` give the GPU its memory through the TTM limit")
    if mem is None:
        return Outcome(ok=None, evidence=f"VRAM carve-out {vram / GIB:.1f} GiB; memory size unknown")
    total = mem.total_bytes + vram
    small = max(params.get("max_gib", 1) * GIB, params.get("max_share", 0.05) * total)
    ev = f"VRAM carve-out {vram / GIB:.1f} GiB of {total / GIB:.1f} GiB"
    ttm = facts.ttm
    limit = (ttm.active_pages * PAGE) if ttm and ttm.active_pages else None
    # an active limit that leaves the OS less than its minimum
    tight = (limit is not None and mem.total_bytes - limit < profile.os_min_gib * GIB
             and limit > mem.total_bytes / 2)
    left = (f"the active TTM limit ({limit / GIB:.1f} GiB) leaves the OS "
            f"{(mem.total_bytes - limit) / GIB:.1f} GiB of the {mem.total_gib:.1f} GiB it sees"
            if limit is not None else "")
    if vram > small:
        if tight:  # a carve-out that grew (a BIOS update) took the RAM the limit was sized for
            return Outcome(ok=False, evidence=f"{ev}; {left}: the carve-out changed since the limit "
                           "was set (a BIOS update?)",
                           fix="Re-run `ojai setup` to size the TTM limit for the memory the OS sees "
                           "now; " + advice + ".")
        return Outcome(ok=False, evidence=f"{ev}: RAM the OS and the TTM limit can never use",
                       fix=advice[0].upper() + advice[1:] + "; a BIOS update can reset it, so re-check "
                       "the carve-out and the TTM limit (`ojai doctor`) after one.")
    # a small carve-out cannot be what squeezes the OS: a limit that does was set that high
    note = f"; {left}: the limit was set that high, the carve-out did not cause it" if tight else ""
    return Outcome(ok=True, evidence=f"{ev}: small, as it should be; the GPU gets its memory through "
                   f"the TTM limit{note}. After a BIOS update, re-check the carve-out and the TTM limit")


@kind("tool_present")
def _tool_present(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    tool = facts.tools.get(params["tool"])
    if tool is None:
        return Outcome(ok=False, evidence=f"{params['tool']} not found")
    return Outcome(ok=True, evidence=f"{tool.path or params['tool']}: {tool.version or 'version unknown'}")


@kind("model_pairs")
def _model_pairs(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    if not facts.models:
        return Outcome(ok=None, evidence="no model route set up yet")
    bad = [m for m in facts.models if not m.ok]
    if bad:
        return Outcome(ok=False, evidence="; ".join(f"{m.route}: " + "; ".join(m.reasons) for m in bad))
    def said(m: ModelPair) -> str:
        if m.kind == "ngram":
            return f"{m.route} (n-gram drafting): pairing not applicable"
        if m.kind == "draft_model":
            what = "drafts for itself" if m.draft == m.main else "main + draft model"
            return f"{m.route} ({what}) matched"
        return f"{m.route} ({'main + MTP draft' if m.draft else 'MTP heads in the main file'}) matched"

    return Outcome(ok=True, evidence=", ".join(said(m) for m in facts.models))


@kind("apply_state")
def _apply_state(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    status = _need(facts, "apply")
    owed = "; follow-up commands owed: " + ", ".join(status.owed) if status.owed else ""
    if status.running:
        return Outcome(ok=None, evidence="an ojai apply or rollback is running now")
    finish = status.command or "ojai setup --apply"
    if status.interrupted:
        what = "rollback" if status.kind == "rollback" else "apply"
        fix = (f"Run `ojai rollback` to finish undoing it (or `{finish}` to apply again); then "
               "reboot." if what == "rollback" else f"Run `{finish}` to finish it (it runs what is "
               "owed) or `ojai rollback` to undo it; then reboot.")
        return Outcome(ok=False, evidence=f"{what} {status.interrupted} was interrupted after "
                       f"{status.done} of {status.total} action(s){owed}", fix=fix)
    if status.owed:
        return Outcome(ok=False, evidence=f"an earlier apply stopped before its follow-up "
                       f"commands ran{owed}",
                       fix=f"Run `{finish}`: it runs the owed commands.")
    last = f"; last apply {status.last_apply}" if status.last_apply else ""
    if status.leftovers:
        import posixpath
        import shlex

        real = [p if facts.root == "/" else posixpath.join(facts.root, p.lstrip("/"))
                for p in status.leftovers]
        return Outcome(ok=False, severity="warn",
                       evidence="an interrupted install left " + ", ".join(status.leftovers),
                       fix=f"`{finish}` clears them as it installs llama.cpp again; or remove "
                       "them by hand: `" + ("sudo " if facts.root == "/" else "") + "rm -rf "
                       + " ".join(shlex.quote(p) for p in real) + "`")
    return Outcome(ok=True, evidence=f"no apply interrupted, nothing owed{last}")


@kind("power_profile")
def _power_profile(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    """The ACPI platform profile, its choices and what manages it (reported, never failed)."""
    power = facts.power
    if power is None:
        return Outcome(ok=None, evidence=f"unknown: {facts.unknown.get('power', 'not read')}")
    ev = (f"platform profile {power.profile or 'unknown'} (choices: "
          f"{' '.join(power.choices) or 'none listed'})" + (
              f"; managed by {power.manager}" + (f" ({power.manager_profile})"
                                                 if power.manager_profile else "")
              if power.manager else "; no tuned or power-profiles-daemon"))
    if power.profile == "performance" or "performance" not in power.choices:
        return Outcome(ok=True, evidence=ev)
    return Outcome(ok=None, evidence=ev + "; `ojai setup --power performance` sets performance "
                   "for the GPU routes")


@kind("distro_llama")
def _distro_llama(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    """A llama-server on PATH from a distribution package: its version and whether its HIP
    backend has code for this GPU."""
    d = facts.distro_llama
    if d is None:
        why = facts.unknown.get("distro_llama")
        return Outcome(ok=None, evidence=f"unknown: {why}" if why else
                       "no llama-server from a distribution package on PATH")
    from ojai_setup.domain.distro_llama import coverage

    gpus = facts.gpu.targets if facts.gpu else []
    cov = coverage(d, machine_target(facts, profile) or profile.gpu_target or
                   (gpus[0] if gpus else None))
    if cov.runs_on == "hip" and cov.hip_covers:
        return Outcome(ok=True, evidence=cov.sentence + "; `ojai setup --llamacpp distro` "
                       "routes through it")
    return Outcome(ok=False, evidence=cov.sentence)


def _lemonade(facts: Facts) -> dict[str, Any] | None:
    tool = facts.tools.get("lemonade") or facts.tools.get("lemond")
    return (tool.detail or {}) if tool else None


@kind("lemonade_bins")
def _lemonade_bins(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    """Each ``llamacpp.*_bin`` path in Lemonade's config must be an executable, not a folder."""
    detail = _lemonade(facts)
    if detail is None:
        return Outcome(ok=None, evidence="Lemonade is not installed")
    bins = detail.get("bins") or {}
    if not bins:
        return Outcome(ok=True, evidence=f"no llama.cpp binary path set in {detail.get('config_dir')}"
                       "/config.json (Lemonade uses its own builds)")
    from ojai_setup.domain.lemonade import bin_problem

    problems = [p for p in (bin_problem(k, b["value"], b["kind"]) for k, b in bins.items()) if p]
    if problems:
        return Outcome(ok=False, evidence="; ".join(problems),
                       fix=" ".join(p[p.index("set it to"):] if "set it to" in p else p
                                    for p in problems))
    return Outcome(ok=True, evidence=", ".join(f"{k} = {b['value']} (executable)"
                                               for k, b in bins.items()))


@kind("lemonade_server")
def _lemonade_server(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    """Lemonade's version (both version forms), port, config directory and health; where it
    is missing, the ``ojai setup --lemonade`` choice that installs it here."""
    detail = _lemonade(facts)
    if detail is None:
        from ojai_setup.domain.lemonade_release import install_advice, install_choices

        d = facts.distro
        distro = (d.id, list(d.like), d.version) if d else ("", [], "")
        choices = install_choices(*distro)
        # the report's table shows no fix for an info finding: the evidence names the choice
        evidence = "Lemonade is not installed" + (
            "; " + " or ".join(f"`ojai setup --lemonade {c}`" for c in choices)
            + " installs it" if choices else "")
        return Outcome(ok=None, evidence=evidence, fix=install_advice(*distro))
    version = detail.get("version") or {}
    if version:
        numbers = version.get("numbers") or [0]
        line = (".".join(str(n) for n in numbers[:2]) if version.get("calendar")
                else f"{numbers[0]}.x")
        what = (f"{version.get('text')} ({'calendar' if version.get('calendar') else 'semantic'} "
                f"version, line {line})")
    else:
        what = "version unknown"
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


# -- Instinct (discrete HBM) ---------------------------------------------------------------------

@kind("amdgpu_loaded")
def _amdgpu_loaded(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    gpu = _need(facts, "gpu")
    if gpu.amdgpu_loaded:
        return Outcome(ok=True, evidence="amdgpu is loaded (/sys/module/amdgpu)")
    return Outcome(ok=False, evidence="no /sys/module/amdgpu: the amdgpu driver is not loaded")


def instinct_gpus(facts: Facts) -> list[tuple[str, str, int | None]]:
    """The Instinct GPUs of the machine as (what it is, gfx target, bytes of HBM): the sysfs
    cards ojai's table knows, else rocminfo's agents of an Instinct target (the HBM then as the
    table says of that target). Empty when there is none."""
    gpu = facts.gpu
    if gpu is None:
        return []
    out = []
    for card in gpu.cards:
        row = igpu(card.pci_device)
        if row is not None and row.family == "instinct":
            size = card.vram_total or (row.hbm_gib * GIB if row.hbm_gib else None)
            out.append((row.name, row.target, size))
    if out:
        return out
    for agent in gpu.agents:
        row = igpu(agent.chip_id)
        target = instinct_target(agent.native_target or agent.name)
        if row is not None and row.family == "instinct":
            out.append((row.name, row.target, row.hbm_gib * GIB if row.hbm_gib else None))
        elif target is not None:
            out.append((agent.marketing_name or target.name, target.target, target.hbm_gib * GIB))
    return out


@kind("instinct_gpus")
def _instinct_gpus(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    gpu = _need(facts, "gpu")
    found = instinct_gpus(facts)
    if not found:
        return Outcome(ok=False, evidence="no Instinct GPU in sysfs or rocminfo"
                       + (f" ({gpu.rocminfo_error})" if gpu.rocminfo_error else ""))
    kinds = ", ".join(dict.fromkeys(f"{name} ({target})" for name, target, _ in found))
    sizes = [s for _, _, s in found if s]
    memory = (f", {min(sizes) / GIB:.1f} GiB of HBM each, {sum(sizes) / GIB:.0f} GiB in all"
              if len(sizes) == len(found) else ", HBM size unknown")
    from_sysfs = any(igpu(c.pci_device) for c in gpu.cards)
    ev = f"{len(found)} GPU{'s' if len(found) > 1 else ''} in {'sysfs' if from_sysfs else 'rocminfo'}: {kinds}{memory}"
    if gpu.rocminfo_error:
        return Outcome(ok=False, evidence=f"{ev}; but {gpu.rocminfo_error}: ROCm cannot use them")
    seen = len([a for a in gpu.agents if instinct_target(a.native_target or a.name)])
    if from_sysfs and seen < len(found):
        if gpu.rocminfo_notes:
            return Outcome(ok=True, evidence=f"{ev}; the rocminfo text shows {seen} of them"
                           + _notes(gpu))
        return Outcome(ok=False, evidence=f"{ev}; rocminfo lists only {seen}: ROCm does not see "
                       "them all")
    return Outcome(ok=True, evidence=ev + (f"; rocminfo lists {seen}" if from_sysfs else _notes(gpu)))


@kind("rocm_min_target")
def _rocm_min_target(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    gpus = instinct_gpus(facts)
    floors: dict[str, str] = {}
    for name, target, _ in gpus:
        row = next((r for c in (facts.gpu.cards if facts.gpu else [])
                    if (r := igpu(c.pci_device)) is not None and r.name == name), None)
        t = instinct_target(target)
        floor = (row.rocm_min if row and row.rocm_min else None) or (t.rocm_min if t else None)
        if floor:
            floors[name] = floor
    if not floors:
        return Outcome(ok=None, evidence="no Instinct GPU seen: no ROCm floor to check")
    need = max(floors.values(), key=version_tuple)
    which = ", ".join(f"{n} >= {f}" for n, f in floors.items())
    if facts.rocm_version is None:
        return Outcome(ok=None, evidence=facts.unknown.get("rocm_version", "ROCm not found")
                       + f"; these GPUs need ROCm {need} or newer ({which}); SGLang's ROCm images "
                       "bring their own")
    ok = version_tuple(facts.rocm_version) >= version_tuple(need)
    return Outcome(ok=ok, evidence=f"ROCm {facts.rocm_version}; needs >= {need} ({which})")


@kind("large_bar")
def _large_bar(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    gpu = _need(facts, "gpu")
    cards = [c for c in gpu.cards if igpu(c.pci_device) is not None and c.vram_total]
    read = [c for c in cards if c.vis_vram_total is not None]
    if not read:
        return Outcome(ok=None, evidence="unknown: no mem_info_vis_vram_total in sysfs (the "
                       "CPU-visible part of each GPU's memory)")
    small = [c for c in read if c.vis_vram_total < c.vram_total * 0.99]
    if small:
        c = small[0]
        return Outcome(ok=False, evidence=f"{len(small)} of {len(read)} GPUs: the CPU sees "
                       f"{c.vis_vram_total / GIB:.2f} GiB of {c.vram_total / GIB:.1f} GiB "
                       f"({c.card}): a small BAR")
    return Outcome(ok=True, evidence=f"the CPU sees all of each GPU's memory ({len(read)} GPUs)")


@kind("cmdline_present")
def _cmdline_present(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    tokens = _need(facts, "cmdline")
    want = f"{params['token']}={params['value']}" if params.get("value") else params["token"]
    if want in tokens:
        return Outcome(ok=True, evidence=f"{want} is on the kernel command line")
    other = [t for t in tokens if t.startswith(params["token"] + "=")]
    return Outcome(ok=False, evidence=(" ".join(other) + " on the kernel command line, not "
                                       if other else "the kernel command line has no ") + want)


@kind("sysctl_value")
def _sysctl_value(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome:
    key, want = params["key"], str(params["value"])
    have = facts.sysctl.get(key)
    if have is None:
        return Outcome(ok=None, evidence=f"unknown: /proc/sys/{key.replace('.', '/')} was not read")
    return Outcome(ok=have == want, evidence=f"{key} = {have}" + ("" if have == want else f"; want {want}"))


@kind("vulkan_driver")
def _vulkan_driver(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome | None:
    """Which Vulkan driver (ICD) drives the GPU; no finding where the machine has no Vulkan."""
    from ojai_setup.domain.vulkan import driver_outcome

    if facts.vulkan is None:
        return None
    ok, evidence, fix = driver_outcome(facts.vulkan)
    return Outcome(ok=ok, evidence=evidence, fix=fix)


@kind("vulkan_render")
def _vulkan_render(facts: Facts, profile: Profile, params: dict[str, Any]) -> Outcome | None:
    """Whether ojai's service user can open the render nodes the Vulkan drivers use."""
    from ojai_setup.domain.vulkan import render_outcome

    if facts.vulkan is None:
        return None
    ok, evidence, fix = render_outcome(facts.vulkan)
    return Outcome(ok=ok, evidence=evidence, fix=fix)
