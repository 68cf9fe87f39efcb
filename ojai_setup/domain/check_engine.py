"""The doctor's check engine: profiles and their checks are data (``checks/*.toml``); this
module loads and chooses them and turns what each check saw into findings.

A profile describes a hardware family (``strix-point``: Radeon 880M/890M gfx1150 and Krackan
840M/860M gfx1152; ``strix-halo``: gfx1151); a box profile (``ojai``, the Minisforum AI X1 Pro)
names its family and adds only what is true of that box, such as its BIOS minimum, and is chosen
only when the machine's DMI names that box. Which iGPU a PCI id is, and its own gfx target, comes
from ``checks/tables/igpus.toml``. A profile file lists checks. Each check has an ``id``, a
``kind`` (a function of :mod:`ojai_setup.domain.checks`, registered in :data:`KINDS`), the
``severity`` it reports when the precondition does not hold, a ``fix`` and a ``link``;
``params`` go to the function. A check function returns a :class:`Outcome` (holds or not, plus
the evidence it saw); the engine turns it into a :class:`Finding`. Severities are ordered, so
the overall result is their maximum.

The kinds register themselves when :mod:`ojai_setup.domain.checks` is imported: code that loads
profiles or runs checks imports them from there; the models alone can be imported from here.
"""

import math
import re
from collections.abc import Callable
from enum import IntEnum
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ojai_setup.core.errors import UsageError
from ojai_setup.core.resources import TomlError, read_toml
from ojai_setup.domain.profiles import checks_dir, profile_names
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
    params: dict[str, Any] = {}


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    #: a box profile: the family it belongs to (its checks and hardware ids come from there)
    family: str | None = None
    #: a box profile: substrings of its DMI vendor / product / board names, one of which must match
    dmi_match: list[str] = []
    #: a family: the iGPUs' own gfx targets (checks/tables/igpus.toml says which PCI id is which)
    gpu_targets: list[str] = []
    #: the family's default target; detection sets the target of the machine in front
    gpu_target: str | None = None
    pci_devices: list[str] = []  # sysfs device ids of the iGPU
    cpu_match: list[str] = []  # substrings of the CPU model name
    memory_gib: int | None = None
    apu: bool = True
    npu: bool = False
    default_gpu_memory_gib: int | None = None  # a fixed TTM budget, whatever the RAM (avoid)
    #: the budget setup proposes as a share of the RAM the machine was sold with: MemTotal lacks
    #: the BIOS carve-out and firmware reservations, so it is rounded up to a multiple of 8 GiB
    gpu_share: float | None = None
    reserve_gib: int = 4  # without a share: memory left to the OS
    os_min_gib: int = 4  # the budget never leaves the OS less than this
    #: a profile of GPUs with memory of their own (Instinct HBM): why no TTM limit is set
    no_ttm: str | None = None
    include: list[str] = []
    checks: list[CheckSpec] = []
    #: chosen with --profile rather than detected: checks that stand down on hardware they do
    #: not recognise (no AMD GPU) run anyway, as the person said this is such a machine
    forced: bool = False

    def gpu_budget_gib(self, total_gib: float) -> int:
        """The GPU memory budget (GiB) for a machine whose OS sees ``total_gib``."""
        if self.default_gpu_memory_gib is not None:
            return self.default_gpu_memory_gib
        if self.gpu_share is not None:
            sold = math.ceil(total_gib / 8) * 8
            budget = int(sold * self.gpu_share)
        else:
            budget = int(total_gib) - self.reserve_gib
        return max(1, min(budget, int(total_gib - self.os_min_gib)))


class IGpu(BaseModel):
    """One row of ``checks/tables/igpus.toml`` (a Ryzen AI iGPU) or of ``tables/instinct.toml``
    (an Instinct GPU): a PCI device id and its own gfx target."""

    model_config = ConfigDict(extra="forbid")

    pci_device: str
    target: str
    family: str
    name: str
    seen: str = ""
    #: an Instinct GPU: the HBM of one GPU (one agent), GiB
    hbm_gib: int | None = None
    #: an Instinct GPU: the first ROCm release that supports it
    rocm_min: str | None = None


class GpuTarget(BaseModel):
    """A ``[[target]]`` row of ``tables/instinct.toml``: what is known of a target whose PCI id
    is not in the table."""

    # built when an Instinct target is first looked up: a Ryzen AI machine never is
    model_config = ConfigDict(extra="forbid", defer_build=True)

    target: str
    name: str
    hbm_gib: int
    rocm_min: str


class Finding(BaseModel):
    id: str
    title: str
    severity: str  # pass, info, warn, fail
    evidence: str
    fix: str | None = None
    link: str | None = None


class Outcome(NamedTuple):
    """What a check function saw; the engine turns it into a :class:`Finding`."""

    ok: bool | None  # None: does not apply here (reported as info)
    evidence: str
    fix: str | None = None  # overrides the spec's fix when the function knows better
    severity: str | None = None  # overrides the spec's severity when the precondition fails


_M = TypeVar("_M", bound=BaseModel)


class ProfileError(UsageError):
    pass


CheckFn = Callable[[Facts, Profile, dict[str, Any]], "Outcome | None"]
KINDS: dict[str, CheckFn] = {}


def kind(name: str) -> Callable[[CheckFn], CheckFn]:
    def deco(fn: CheckFn) -> CheckFn:
        KINDS[name] = fn
        return fn

    return deco


ManyFn = Callable[[Facts, "Profile", CheckSpec], "list[Finding]"]
#: kinds that report one finding for each thing they find (the known-bad table: one a row)
MANY: dict[str, ManyFn] = {}


def kind_of_many(name: str) -> Callable[[ManyFn], ManyFn]:
    def deco(fn: ManyFn) -> ManyFn:
        MANY[name] = fn
        KINDS[name] = lambda facts, profile, params: Outcome(ok=None, evidence="")
        return fn

    return deco


# -- profiles --------------------------------------------------------------------------------

def _read_toml(path: Path) -> dict[str, Any]:
    """The file's table (read only: ojai's own tables are shared by every reader; detecting a
    profile loads each box and family with what it includes, common.toml three times)."""
    try:
        return read_toml(path)
    except TomlError as exc:
        raise ProfileError(f"{path}: {exc}") from exc


def _validated(model: type[_M], data: dict[str, Any], path: Path) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        from ojai_setup.core.problems import problems

        raise ProfileError(f"{path}: {problems(exc.errors())}") from exc


def chosen_profile(facts: Facts, name: str | None) -> Profile:
    """The profile a command works with: ``--profile NAME``, forced (its checks run even where
    the hardware does not look like it), else the one detected from ``facts``. doctor, setup
    and models all choose it here, so the same flag gives the same checks everywhere."""
    if name:
        return load_profile(name).model_copy(update={"forced": True})
    return detect_profile(facts)


def load_profile(name: str, directory: Path | None = None) -> Profile:
    directory = directory or checks_dir()
    path = directory / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in directory.glob("*.toml") if p.stem != "common"))
        raise ProfileError(f"no profile {name!r} (known: {known})")
    profile = _validated(Profile, _read_toml(path), path)
    if profile.family:
        # a box: its family, with the box's own fields and checks on top (a box check replaces
        # the family's check of the same id where it stands, so the report keeps its order)
        base = load_profile(profile.family, directory)
        if base.family:
            raise ProfileError(f"{path}: family {profile.family!r} is itself a box")
        own = {c.id: c for c in profile.checks}
        checks = [own.pop(c.id, c) for c in base.checks] + list(own.values())
        fields = {k: getattr(profile, k) for k in profile.model_fields_set if k not in ("checks", "include")}
        return base.model_copy(update={**fields, "checks": checks})
    included: list[CheckSpec] = []
    for inc in profile.include:
        included.extend(load_profile(inc, directory).checks)
    own_ids = {c.id for c in profile.checks}
    profile.checks = [c for c in included if c.id not in own_ids] + profile.checks
    for c in profile.checks:
        if c.kind not in KINDS:
            raise ProfileError(f"{path}: check {c.id}: unknown kind {c.kind!r}")
        if c.severity not in ("info", "warn", "fail"):
            raise ProfileError(f"{path}: check {c.id}: severity must be info, warn or fail")
    return profile


def _table(directory: Path, name: str) -> Path:
    path = directory / "tables" / name
    return path if path.is_file() else checks_dir() / "tables" / name  # the table ojai ships


@cache
def _igpu_rows(directory: Path) -> dict[str, IGpu]:
    path = _table(directory, "igpus.toml")
    rows = [_validated(IGpu, row, path) for row in _read_toml(path).get("igpu", [])]
    instinct = _table(directory, "instinct.toml")
    rows += [_validated(IGpu, row, instinct) for row in _read_toml(instinct).get("gpu", [])]
    return {r.pci_device.lower(): r for r in rows}


@cache
def _target_rows(directory: Path) -> dict[str, GpuTarget]:
    path = _table(directory, "instinct.toml")
    return {r.target: r for r in (_validated(GpuTarget, row, path)
                                  for row in _read_toml(path).get("target", []))}


def instinct_target(target: str | None, directory: Path | None = None) -> GpuTarget | None:
    """What ojai's Instinct table says of a gfx target (gfx942), if it is one."""
    return _target_rows(directory or checks_dir()).get(target or "")


def igpu(device_id: str | None, directory: Path | None = None) -> IGpu | None:
    """The Ryzen AI iGPU with this PCI device id ("0x150e"), if ojai's table knows it."""
    if not device_id:
        return None
    return _igpu_rows(directory or checks_dir()).get(device_id.strip().lower())


def _dmi_names(facts: Facts) -> str:
    bios = facts.bios
    if bios is None:
        return ""
    return " ".join(filter(None, [bios.sys_vendor, bios.product_name, bios.board_vendor, bios.board_name]))


def _family_evidence(facts: Facts, families: list[Profile], directory: Path | None) -> Profile | None:
    """The family of the machine in front: by its hardware ids first (sysfs PCI ids, rocminfo
    Chip IDs: an override cannot change them), then rocminfo's target names (unless an override
    is known), then the CPU name."""
    gpu = facts.gpu
    by_id = {f.id: f for f in families}
    ids = [c.pci_device for c in gpu.cards] if gpu else []
    ids += [a.chip_id for a in gpu.agents] if gpu else []
    for device in ids:
        row = igpu(device, directory)
        if row and row.family in by_id:
            return by_id[row.family]
    for f in families:  # families listing PCI ids themselves (user profiles)
        if any(d and d.lower() in (p.lower() for p in f.pci_devices) for d in ids):
            return f
    if gpu and not gpu.hsa_override:
        for f in families:
            if any(t in f.gpu_targets or t == f.gpu_target for t in gpu.targets):
                return f
    cpu = (facts.cpu.model_name or "") if facts.cpu else ""
    for f in families:
        if any(m.lower() in cpu.lower() for m in f.cpu_match):
            return f
    return None


def machine_target(facts: Facts, profile: Profile, directory: Path | None = None) -> str | None:
    """The gfx target of this machine's iGPU, if it is one of the profile's: from the hardware
    ids, else from rocminfo's names (not overridden)."""
    gpu = facts.gpu
    if gpu is None:
        return None
    wanted = profile.gpu_targets or ([profile.gpu_target] if profile.gpu_target else [])
    for device in [c.pci_device for c in gpu.cards] + [a.chip_id for a in gpu.agents]:
        row = igpu(device, directory)
        if row and row.target in wanted:
            return row.target
    if not gpu.hsa_override:
        for t in gpu.targets:
            if t in wanted:
                return t
    return None


def for_machine(profile: Profile, facts: Facts, directory: Path | None = None) -> Profile:
    """The profile with ``gpu_target`` set to the target of the iGPU in front of it."""
    target = machine_target(facts, profile, directory) or profile.gpu_target or (
        profile.gpu_targets[0] if profile.gpu_targets else None)
    return profile.model_copy(update={"gpu_target": target})


def detect_profile(facts: Facts, directory: Path | None = None) -> Profile:
    """The profile for the machine in front: its hardware family, or the box of that family
    whose DMI names match this machine."""
    profiles = [load_profile(n, directory) for n in profile_names(directory)]
    families = [p for p in profiles if not p.dmi_match]
    family = _family_evidence(facts, families, directory)
    if family is None:
        return for_machine(load_profile("generic", directory), facts, directory)
    dmi = _dmi_names(facts).lower()
    for box in profiles:
        if box.dmi_match and box.family == family.id and any(m.lower() in dmi for m in box.dmi_match):
            return for_machine(box, facts, directory)
    return for_machine(family, facts, directory)


def run_checks(facts: Facts, profile: Profile) -> list[Finding]:
    findings = []
    for spec in profile.checks:
        if spec.kind in MANY:
            findings.extend(MANY[spec.kind](facts, profile, spec))
            continue
        try:
            out = KINDS[spec.kind](facts, profile, spec.params)
        except Unknown as exc:
            out = Outcome(ok=None, evidence=f"unknown: {exc}")
        if out is None:  # nothing of what the check looks at exists here: no finding
            continue
        if out.ok is True:
            sev = "pass"
        elif out.ok is None:
            sev = "info"
        else:
            sev = out.severity or spec.severity
        findings.append(Finding(id=spec.id, title=spec.title, severity=sev, evidence=out.evidence,
                                fix=None if sev == "pass" else
                                fix_for_root(out.fix or spec.fix or None, facts.root),
                                link=spec.link or None))
    return findings


#: an ``ojai`` command quoted in a fix, without ``--root`` after its subcommand: its prefix
#: (``sudo ojai setup``), subcommand and the rest of it
_OJAI_COMMAND = re.compile(r"`((?:sudo )?ojai (setup|rollback|doctor|verify|bench|tune|models))"
                           r"(?! --root| --example)((?: [^`]*)?)`")


def fix_for_root(fix: str | None, root: str) -> str | None:
    """``fix`` with the machine in every ``ojai`` command it quotes, unless ``root`` is this
    computer's own (``/``): ``--root ROOT``, or ``--example NAME`` for a bundled example, so
    that the commands a person copies from doctor act on the machine doctor looked at. A
    command that would change a bundled example (an apply, a rollback) becomes one that copies
    it first and changes the copy."""
    if not fix or root == "/" or not _OJAI_COMMAND.search(fix):
        return fix
    import shlex

    from ojai_setup.core.commandline import machine_options

    where = machine_options(root)

    def command(m: re.Match[str]) -> str:
        head, verb, rest = m.group(1), m.group(2), m.group(3)
        if where[0] == "--example" and (verb == "rollback" or "--apply" in rest.split()):
            name = where[1]
            return (f"`cp -r {shlex.quote(root)} {name}` (a copy: the bundled example is "
                    f"everyone's), then `{head} --root {name}{rest}`")
        return f"`{head} {shlex.join(where)}{rest}`"

    return _OJAI_COMMAND.sub(command, fix)


def overall(findings: list[Finding]) -> Severity:
    return max((Severity[f.severity.upper()] for f in findings), default=Severity.PASS)


class Unknown(Exception):
    """A fact the check needs was not read; the message says why."""
