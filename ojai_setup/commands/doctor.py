"""``ojai doctor``: facts, profile, findings, and their two renderings (JSON and rich)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ojai_setup import __version__
from ojai_setup.commands.terminal import SYMBOLS, Terminal
from ojai_setup.core.paths import GIB, PAGE
from ojai_setup.core.status import ExitStatus
from ojai_setup.core.units import gib_text
from ojai_setup.core.root import Root
from ojai_setup.domain.checks import (
    Finding,
    Profile,
    Severity,
    chosen_profile,
    overall,
    run_checks,
)
from ojai_setup.facts.collect import collect, environment
from ojai_setup.model.facts import Facts

DOCTOR_SCHEMA = "ojai.doctor/2"


class DoctorReport:
    schema = DOCTOR_SCHEMA

    def __init__(self, facts: Facts, profile: Profile, findings: list[Finding]):
        self.facts, self.profile, self.findings = facts, profile, findings

    @property
    def forced(self) -> bool:
        """``--profile`` named the profile (:func:`chosen_profile` forces it) rather than
        detection."""
        return self.profile.forced

    @property
    def result(self) -> Severity:
        return overall(self.findings)

    @property
    def knowledge_date(self) -> str:
        """The date of the newest public report in ojai's known-bad table: what doctor warns of
        is as current as this."""
        from ojai_setup.domain.known_bad import TABLE, knowledge_date
        from ojai_setup.domain.profiles import checks_dir

        return knowledge_date(checks_dir() / "tables" / TABLE)

    @property
    def exit_code(self) -> ExitStatus:
        return ExitStatus.FAILED if self.result >= Severity.FAIL else ExitStatus.OK

    def to_json(self) -> dict:
        return {
            "ojai_version": __version__,
            "knowledge_date": self.knowledge_date,
            "profile": {"id": self.profile.id, "name": self.profile.name, "forced": self.forced},
            "result": self.result.label,
            "findings": [f.model_dump(mode="json") for f in self.findings],
            # a machine without any Vulkan has no ``vulkan`` fact at all
            "facts": self.facts.model_dump(mode="json",
                                           exclude={"vulkan"} if self.facts.vulkan is None else None),
        }

    def render(self, term: Terminal) -> None:
        from rich.markup import escape
        from rich.table import Table

        facts_table = Table(title=f"Machine ({self.facts.root})", show_header=False, title_justify="left")
        facts_table.add_column("fact", style="bold")
        facts_table.add_column("value")
        for k, v in fact_rows(self.facts):
            facts_table.add_row(escape(k), escape(v))
        term.print(facts_table)
        how = "forced" if self.forced else "detected"
        table = Table(title=f"Checks for profile {self.profile.id} ({how}): {self.profile.name}",
                      title_justify="left")
        table.add_column("", no_wrap=True)
        table.add_column("check")
        table.add_column("evidence")
        # what fails first, then warnings, information and what passes (each in check order)
        ranked = sorted(self.findings, key=lambda f: -Severity[f.severity.upper()])
        for f in ranked:
            table.add_row(term.styled(f.severity), f"{escape(f.title)}\n[dim]{f.id}[/]",
                          escape(f.evidence))
        term.print(table)
        todo = [f for f in ranked if f.severity in ("warn", "fail") and f.fix]
        if todo:
            term.print()
            term.print("[bold]What to do[/]:")
        for f in todo:
            label = term.styled(f.severity) + " " * (8 - len(SYMBOLS.get(f.severity, f.severity)))
            term.entry(label, f"[bold]{escape(f.id)}[/]: {escape(f.fix)}", indent=2, hang=10,
                       markup=True)
            if f.link:
                term.entry("see ", f.link, indent=12, hang=16)
        counts = {s: sum(1 for f in self.findings if f.severity == s) for s in ("pass", "info", "warn", "fail")}
        term.print(f"result: {term.styled(self.result.label)}  "
                   + ", ".join(f"{v} {k}" for k, v in counts.items()))
        term.print(f"[dim]ojai {__version__} knows of reports up to {self.knowledge_date} "
                   "(checks/tables/known-bad.toml); anything reported since is not checked[/]")


def diagnose(root: Root, profile_name: str | None = None) -> DoctorReport:
    facts = collect(root)
    profile = chosen_profile(facts, profile_name)
    return DoctorReport(facts, profile, run_checks(facts, profile))


def run_doctor(term: Terminal, root_dir: Path, *, profile_name: str | None = None,
               capture: Path | None = None) -> ExitStatus:
    root = Root(root_dir)
    report = diagnose(root, profile_name)
    term.show(report)
    if capture is not None:
        from ojai_setup.commands.capture import write_capture

        n = write_capture(root, environment(root), capture).entries
        term.note(f"captured {n} files and command outputs into {capture} (mode 600; serials, UUIDs, "
                  f"addresses, user and host names and tokens removed); "
                  f"replay with: mkdir m && tar xzf {capture} -C m && ojai doctor --root m")
    return report.exit_code


def _configured_on_boot_path(facts: Facts, pages: Callable[[int | None], str]) -> str:
    """The limit the boot path's own file configures, named by that boot path (GRUB's
    /etc/default/grub, Limine's settings, /etc/kernel/cmdline, ...), not by GRUB's alone."""
    from ojai_setup.boot.table import PATHS

    t = facts.ttm
    loader = facts.boot.loader if facts.boot else None
    path = PATHS.get(loader.kind if loader else "grub", PATHS["unknown"])
    if path.grub:
        return f"GRUB {pages(t.config_pages)}"
    title = path.title
    where = f" in {t.config_file}" if t.config_file and t.config_pages is not None else ""
    return f"{title} {pages(t.config_pages)}{where}"


def _gib(n: int | None, why: str = "not reported") -> str:
    return f"unknown ({why})" if n is None else gib_text(n)


#: a section of the facts as a person names it, for the rows of what could not be read
SECTION_NAMES = {"cpu": "CPU", "gpu": "GPU", "npu": "NPU", "memory": "Memory",
                 "kernel": "Kernel", "cmdline": "Kernel command line", "distro": "Distribution",
                 "bios": "Board / BIOS", "rocm_version": "ROCm", "ttm": "TTM limit",
                 "grub": "GRUB configuration", "boot": "Boot files", "tools": "Tools",
                 "models": "Model routes", "apply": "ojai's last apply",
                 "amdgpu_dkms": "amdgpu-dkms", "packages": "Packages",
                 "kernel_log": "Kernel log", "power": "Power profile",
                 "distro_llama": "Distribution's llama-server"}


def fact_rows(facts: Facts) -> list[tuple[str, str]]:  # noqa: C901
    """The machine table: one row per fact in words; a fact that could not be read is
    ``unknown (why)`` where its row would be, never a field name or a ``?``."""
    rows: list[tuple[str, str]] = []
    unknown = dict(facts.unknown)

    def missing(section: str) -> None:
        if section in unknown:
            rows.append((SECTION_NAMES.get(section, section.replace("_", " ")),
                         f"unknown ({unknown.pop(section)})"))

    if facts.cpu:
        rows.append(("CPU", f"{facts.cpu.model_name} ({facts.cpu.logical_cpus} threads)"
                     + (", engineering sample" if facts.cpu.engineering_sample else "")))
    missing("cpu")
    hbm = {}
    if facts.gpu:
        agents = ", ".join(f"{a.name} ({a.marketing_name})" for a in facts.gpu.agents)
        rows.append(("GPU (rocminfo)", agents or facts.gpu.rocminfo_error or "none"))
        from ojai_setup.domain.check_engine import igpu

        hbm: dict[tuple, list[str]] = {}  # Instinct GPUs with memory of their own, alike grouped
        for c in facts.gpu.cards:
            row = igpu(c.pci_device)
            if row is not None and row.family == "instinct":
                hbm.setdefault((c.pci_device, row.name, row.target, c.vram_total, c.vis_vram_total),
                               []).append(c.card)
                continue
            rows.append((f"GPU ({c.card})", f"PCI {c.pci_vendor}:{c.pci_device}, VRAM carve-out "
                         f"{_gib(c.vram_total, 'not in sysfs')}, GTT "
                         f"{_gib(c.gtt_total, 'not in sysfs')}"))
        for (device, name, target, vram, visible), cards in hbm.items():
            where = cards[0] if len(cards) == 1 else f"{len(cards)}: {cards[0]} to {cards[-1]}"
            bar = "" if visible is None else f", CPU-visible {_gib(visible)}"
            rows.append((f"GPU ({where})", f"PCI 0x1002:{device}, {name} ({target}), HBM "
                         f"{_gib(vram, 'not in sysfs')}{bar}"))
        if facts.gpu.npu_agents:
            rows.append(("NPU (rocminfo)", ", ".join(f"{a.name} ({a.marketing_name})" for a in facts.gpu.npu_agents)))
    missing("gpu")
    if facts.npu and not (hbm and not facts.npu.accel_devices):  # no NPU beside Instinct GPUs
        n = facts.npu
        driver = n.amdxdna_version or ("unknown (no /sys/module/amdxdna/version, and neither "
                                       "flm validate nor xrt-smi examine reports one)")
        firmware = n.firmware_version or ("unknown (neither flm validate nor xrt-smi examine "
                                          "reports it)")
        rows.append(("NPU", f"{', '.join(n.accel_devices) or 'no /dev/accel device'}; amdxdna "
                     f"{driver}; firmware {firmware}"))
    missing("npu")
    if facts.memory:
        rows.append(("Memory", f"{facts.memory.total_gib:.1f} GiB"))
    missing("memory")
    if facts.kernel:
        rows.append(("Kernel", facts.kernel.release))
    missing("kernel")
    missing("cmdline")
    if facts.distro:
        rows.append(("Distribution", facts.distro.name or facts.distro.id))
    missing("distro")
    if facts.bios:
        b = facts.bios
        rows.append(("Board / BIOS", f"{b.sys_vendor} {b.product_name} ({b.board_name}); BIOS "
                     f"{b.bios_vendor} {b.bios_version} {b.bios_date or ''}".strip()))
    missing("bios")
    if facts.rocm_version:
        rows.append(("ROCm", facts.rocm_version))
    missing("rocm_version")
    if facts.ttm and not (hbm and facts.ttm.live_module is None):  # HBM: no TTM limit
        t = facts.ttm

        def pages(p: int | None) -> str:
            return "not set" if p is None else f"{p} pages ({p * PAGE / GIB:.1f} GiB)"

        active = (f"active {pages(t.active_pages)} in module {t.live_module}" if t.live_module
                  else "active unknown (no pages_limit under /sys/module/ttm, amdttm or amd_ttm: "
                  "neither module is loaded)")
        rows.append(("TTM limit", f"{active}; {_configured_on_boot_path(facts, pages)}; kernel "
                     f"command line {pages(t.cmdline_pages)}"
                     + "".join(f"; {m.path}:{m.line} {pages(m.pages)}" for m in t.modprobe)))
    missing("ttm")
    for tool in facts.tools.values():
        rows.append((tool.name, f"{tool.version or 'installed'} ({tool.path})"))
        detail = tool.detail or {}
        for line in detail.get("dialect", [])[1:]:
            rows.append(("", line))
        if "error" in detail:
            rows.append(("", detail["error"]))
    if facts.distro_llama:
        d = facts.distro_llama
        rows.append(("llama-server (distribution)", f"{d.path}: {d.package} {d.package_version} "
                     f"({d.manager}), {d.version or 'version unknown'}; ggml backends "
                     f"{', '.join(d.backends) or 'none as packages'}"))
    missing("distro_llama")
    if facts.packages:
        rows.append(("Packages", ", ".join(f"{p.name} {p.version}"
                                           for p in facts.packages.values())))
    missing("packages")
    if facts.power:
        pw = facts.power
        rows.append(("Power profile", f"{pw.profile or 'unknown'} (choices: "
                     f"{' '.join(pw.choices) or 'none listed'})"
                     + (f"; {pw.manager}" if pw.manager else "")))
    missing("power")
    if facts.kernel_log is not None:
        rows.append(("Kernel log", f"{len(facts.kernel_log)} amdgpu/amdxdna/KFD line(s)"))
    missing("kernel_log")
    for pair in facts.models:
        rows.append((f"route {pair.route}", ("matched pair" if pair.ok else "NOT a matched pair: "
                     + "; ".join(pair.reasons)) + (f" ({pair.note})" if pair.note else "")))
    for name in list(unknown):
        missing(name)
    return rows
