"""Pure parsers: text in, model out. None of these opens a file or runs a command."""

from __future__ import annotations

import re

from ojai_setup.core.errors import InputError
from ojai_setup.model.facts import Cpu, Kernel, Memory, RocmAgent


class ParseError(InputError):
    """The text is not what the parser expects; the message says what was wrong."""


def parse_cpuinfo(text: str) -> Cpu:
    """/proc/cpuinfo. Tolerates engineering samples, missing fields and localized spacing."""
    blocks = [b for b in re.split(r"\n\s*\n", text.strip()) if b.strip()]
    if not blocks:
        raise ParseError("empty /proc/cpuinfo")
    fields: dict[str, str] = {}
    for line in blocks[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    logical = sum(1 for b in blocks if re.search(r"^processor\s*:", b, re.M))
    name = fields.get("model name")
    es = bool(name) and bool(
        re.search(r"engineering sample|\bES\b|100-0000", name, re.I)
    )

    def _int(key: str) -> int | None:
        try:
            return int(fields[key], 0)
        except (KeyError, ValueError):
            return None

    return Cpu(model_name=name, vendor_id=fields.get("vendor_id"), family=_int("cpu family"),
               model=_int("model"), logical_cpus=logical or 1, engineering_sample=es)


def parse_meminfo(text: str) -> Memory:
    values: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+):\s+(\d+)\s*(kB)?", line)
        if m:
            values[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    if "MemTotal" not in values:
        raise ParseError("no MemTotal line in /proc/meminfo")
    return Memory(total_bytes=values["MemTotal"])


def parse_kernel_release(release: str) -> Kernel:
    release = release.strip()
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:-(\d+))?", release)
    if not m:
        raise ParseError(f"not a kernel release: {release!r}")
    version = tuple(int(g) for g in m.groups() if g is not None)
    rest = release[m.end():]
    flavour = None
    fm = re.search(r"-([a-z][a-z0-9]*)$", release)
    if fm:
        flavour = fm.group(1)
    elif rest.startswith("-arch"):
        flavour = "arch"
    return Kernel(release=release, version=version, flavour=flavour)


def parse_rocminfo(text: str) -> list[RocmAgent]:
    """Agents from ``rocminfo`` (CPU, GPU and the NPU, which ROCm lists as a DSP)."""
    if "HSA Agents" not in text:
        raise ParseError("no 'HSA Agents' section in rocminfo output")
    agents: list[RocmAgent] = []
    body = text.split("HSA Agents", 1)[1]
    for chunk in re.split(r"\n\*+\s*\nAgent \d+\s*\n\*+\s*\n", "\n" + body)[1:]:
        fields: dict[str, str] = {}
        isas: list[str] = []
        in_isa = False
        for line in chunk.splitlines():
            if line.strip().startswith("ISA Info"):
                in_isa = True
                continue
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key_s, value_s = key.strip(), value.strip()
            if in_isa and key_s == "Name":
                isas.append(value_s)
            elif line.startswith("  ") and not line.startswith("   "):
                fields.setdefault(key_s, value_s)
        if "Name" not in fields or "Device Type" not in fields:
            continue
        cu = re.match(r"\d+", fields.get("Compute Unit", ""))
        agents.append(RocmAgent(
            name=fields["Name"], marketing_name=fields.get("Marketing Name") or None,
            vendor_name=fields.get("Vendor Name") or None, device_type=fields["Device Type"],
            compute_units=int(cu.group()) if cu else None,
            isas=[i.removeprefix("amdgcn-amd-amdhsa--") for i in isas]))
    return agents


def parse_environ(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        env[key.strip().removeprefix("export ").strip()] = value.strip().strip('"').strip("'")
    return env


def parse_xrt_smi(text: str) -> dict[str, str]:
    """``xrt-smi examine``: the amdxdna driver version, NPU firmware version and devices."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "NPU Firmware Version":
            out["firmware_version"] = value.strip()
        elif key == "amdxdna":
            out["amdxdna_version"] = value.strip().split(",")[0].strip()
    names = re.findall(r"\|\[([0-9a-f:.]+)\]\s*\|([^|]+)\|", text)
    if names:
        out["devices"] = ", ".join(f"{bdf} {n.strip()}" for bdf, n in names)
    return out


def parse_rocm_version(text: str) -> str:
    version = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not re.match(r"^\d+\.\d+", version):
        raise ParseError(f"not a ROCm version: {version!r}")
    return version


def version_tuple(text: str) -> tuple[int, ...]:
    """Leading dotted numbers of a version string: '1.1.2.64' -> (1, 1, 2, 64)."""
    m = re.match(r"\D*(\d+(?:\.\d+)*)", text or "")
    if not m:
        return ()
    return tuple(int(p) for p in m.group(1).split("."))


def bios_version_tuple(text: str) -> tuple[int, ...]:
    """The version number inside a BIOS string such as 'AI X1 Pro 1.01' or '1.01'."""
    nums = re.findall(r"\d+(?:\.\d+)+", text or "")
    return version_tuple(nums[-1]) if nums else ()
