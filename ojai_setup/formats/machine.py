"""Pure parsers: text in, model out. None of these opens a file or runs a command."""

from __future__ import annotations

import re
from typing import NamedTuple

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
    # ``siblings`` is each package's logical CPUs: it counts them where the text holds fewer
    # blocks than the machine has CPUs (a capture cut short, a container's view)
    packages = set(re.findall(r"^physical id\s*:\s*(\d+)", text, re.M))
    try:
        siblings = int(fields.get("siblings", "0"))
    except ValueError:
        siblings = 0
    logical = max(logical, siblings * max(1, len(packages)))
    name = fields.get("model name")
    es = name is not None and bool(name) and bool(
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


# -- rocminfo ----------------------------------------------------------------------------------
#
# People paste rocminfo in every shape: the whole output, one `Agent 2` block, a few agents
# without the `HSA Agents` header, the lines `rocminfo | grep` kept, with their shell prompt, a
# pager's status line or the terminal's colour codes around it. Every agent block that can be
# read is read; what cannot be read is said in ``notes``.

#: colour and cursor codes: real (ESC), as ``cat -v`` shows them (``^[``), as ``less`` shows them
#: (``ESC``), and an SGR whose ESC byte a copy and paste lost (``[0m``, ``[01;32m``)
_CSI = r"(?:\x1b|\^\[|ESC)\[[0-9;?]*[ -/]*[@-~]"
_OSC = r"(?:\x1b|\^\[)\][^\x07\x1b]*(?:\x07|\x1b\\|\^\[\\)?"
_BARE_SGR = r"\[(?:\d{1,3}(?:;\d{1,3})*)?m"
_OVERSTRIKE = r".\x08"
#: a shell prompt (the command typed after it is not output), as pasted from bash, zsh two-line
#: themes, starship, fish and PowerShell
_PROMPT = re.compile(
    r"^\s*(?:\([^)]*\)\s*)?(?:"
    r"[\w.-]+@[\w.-]+(?::\S*)?\s*[$#%>]"  # user@host:~$
    r"|\[[^\]]*@[^\]]*\]\s*[$#%]"  # [user@host ~]$
    r"|[╭┌]─.*"  # first line of a two-line prompt
    r"|[╰└]─+\s*[$#%>❯»]"  # its second line
    r"|[$#%❯»➜λ](?=\s)"  # $ cmd, ❯ cmd
    r"|PS [A-Za-z]:\\[^>]*>"  # PowerShell
    r")(?:\s.*)?$")
#: what a pager prints between pages or at the end
_PAGER = re.compile(r"^\s*(?:--\s?More\s?--.*|\(END\)|:|~+|lines \d+-\d+(?:/\d+)?(?: \d+%)?(?: \(END\))?"
                    r"|Standard input|Press RETURN.*)\s*$", re.I)
_AGENT = re.compile(r"^\s*Agent\s+(\d+)\s*$")
_RULE = re.compile(r"^\s*[*=]{3,}\s*$")
_GFX = r"^gfx[0-9a-f]{3,4}(?::\S+)?$"


def clean_terminal_text(text: str) -> str:
    """Text as a person saw it: colour codes, overstrikes and carriage returns removed."""
    if "\x1b" in text or "^[" in text:
        text = re.sub(_OSC, "", text)
    if "[" in text:
        text = re.sub(_CSI, "", text)
        text = re.sub(_BARE_SGR, "", text)
    if "\x08" in text:
        text = re.sub(_OVERSTRIKE, "", text)
    return text.replace("\r\n", "\n").replace("\r", "\n")


class RocminfoReport(NamedTuple):
    """The agents read from a rocminfo text, and what could not be read or was left out."""

    agents: list[RocmAgent]
    notes: list[str]


def _chip_id(value: str | None) -> str | None:
    """``5390(0x150e)`` or ``5390`` -> ``0x150e``; no id (CPU agents print 0) -> None."""
    if not value:
        return None
    m = re.match(r"^\s*(\d+)\s*(?:\(\s*0x([0-9a-fA-F]+)\s*\))?", value)
    if not m:
        m2 = re.match(r"^\s*0x([0-9a-fA-F]+)", value)
        number = int(m2.group(1), 16) if m2 else None
    else:
        number = int(m.group(2), 16) if m.group(2) else int(m.group(1))
    return f"0x{number:04x}" if number else None


def _blocks(lines: list[str]) -> tuple[list[tuple[int | None, list[str]]], list[str]]:
    """Split lines into agent blocks at ``Agent N`` headers (numbered), or, when the text has no
    header at all, at each agent-level ``Name:`` line (unnumbered)."""
    headers = [i for i, line in enumerate(lines) if _AGENT.match(line)]
    if headers:
        blocks: list[tuple[int | None, list[str]]] = []
        for k, start in enumerate(headers):
            end = headers[k + 1] if k + 1 < len(headers) else len(lines)
            header = _AGENT.match(lines[start])
            assert header is not None  # a header line, found by the same pattern above
            blocks.append((int(header.group(1)), lines[start + 1:end]))
        return blocks, lines[:headers[0]]
    starts = [i for i, line in enumerate(lines)
              if re.match(r"^\s*Name\s*:", line) and not line.split(":", 1)[1].strip().startswith("amdgcn-")]
    unnumbered: list[tuple[int | None, list[str]]] = [
        (None, lines[s:(starts[k + 1] if k + 1 < len(starts) else len(lines))])
        for k, s in enumerate(starts)]
    return unnumbered, lines[:starts[0]] if starts else lines


def _read_block(number: int | None, lines: list[str], notes: list[str]) -> RocmAgent | None:
    fields: dict[str, str] = {}
    isas: list[str] = []
    section = None
    last_key = None
    for line in lines:
        s = line.strip()
        if not s or _RULE.match(s):
            continue
        head = s.split(":", 1)[0].strip()
        if head in ("ISA Info", "Pool Info", "Cache Info"):
            section = head
            continue
        key, sep, value = s.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.lstrip(":").strip()
        if key == "Name" and value.startswith("amdgcn-"):
            isas.append(value.removeprefix("amdgcn-amd-amdhsa--"))
            continue
        if section in ("ISA Info", "Pool Info"):
            continue  # the memory pools and ISA details: not needed here
        fields.setdefault(key, value)
        last_key = key
    label = f"agent {number}" if number is not None else "an agent"
    name = fields.get("Name")
    if not name:
        if fields:
            notes.append(f"{label}: no Name line, so it cannot be told what it is")
        return None
    label += f" ({name})"
    device_type = fields.get("Device Type")
    if not device_type:
        if re.match(_GFX, name):
            device_type = "GPU"
            notes.append(f"{label}: no Device Type line; read as a GPU by its gfx name")
        elif re.match(r"^aie\d", name):
            device_type = "DSP"
            notes.append(f"{label}: no Device Type line; read as the NPU by its name")
        else:
            notes.append(f"{label}: no Device Type line, so it cannot be told what it is")
            return None
    if number is not None and section != "ISA Info" and last_key:
        notes.append(f"{label}: the block ends after '{last_key}'; the rest of it is not in the text")
    cu = re.match(r"\d+", fields.get("Compute Unit", ""))
    return RocmAgent(
        name=name, number=number, marketing_name=fields.get("Marketing Name") or None,
        vendor_name=fields.get("Vendor Name") or None, device_type=device_type,
        compute_units=int(cu.group()) if cu else None, chip_id=_chip_id(fields.get("Chip ID")),
        isas=isas)


#: what ROCm prints when it cannot reach the GPU (matched case-insensitively)
_ROCM_FAILURES = ("rock module is not loaded", "hsa_status_error", "hsa api call failure")


def _rocm_failure(text: str) -> bool:
    lowered = text.lower()
    return any(f in lowered for f in _ROCM_FAILURES)


def read_rocminfo(text: str) -> RocminfoReport:
    """Agents from ``rocminfo`` output or any excerpt of it (CPU, GPU and the NPU, which ROCm
    lists as a DSP). Raises :class:`ParseError`, saying why, when no agent can be read."""
    notes: list[str] = []
    kept: list[str] = []
    dropped = 0
    for raw in clean_terminal_text(text).split("\n"):
        line = re.sub(r"^\s*>(?: |$)", "", raw) if ">" in raw else raw  # a Markdown quote
        if _PROMPT.match(line) or _PAGER.match(line):
            dropped += 1
            continue
        kept.append(line.rstrip())
    if dropped:
        notes.append(f"left out {dropped} line{'s that are' if dropped > 1 else ' that is'} not "
                     "rocminfo output (shell prompts, pager lines)")
    blocks, preamble = _blocks(kept)
    agents = [a for a in (_read_block(n, lines, notes) for n, lines in blocks) if a is not None]
    problems = [line.strip() for line in kept if _rocm_failure(line)] if _rocm_failure(text) else []
    if not agents:
        why = "; ".join(problems[:2]) or "no 'Agent N' block and no agent 'Name:' line"
        raise ParseError(f"no agent could be read from the rocminfo output ({why})")
    if not any("HSA Agents" in line for line in preamble) and blocks and blocks[0][0] is not None:
        notes.insert(0, "no 'HSA Agents' header: read as an excerpt")
    if blocks and blocks[0][0] is None:
        notes.insert(0, "no 'Agent N' headers: agents told apart by their Name lines")
    numbers = [n for n, _ in blocks if n is not None]
    if numbers:
        missing = sorted(set(range(1, max(numbers) + 1)) - set(numbers))
        if missing:
            shown = ", ".join(map(str, missing))
            notes.append(f"agent{'s' if len(missing) > 1 else ''} {shown} "
                         f"{'are' if len(missing) > 1 else 'is'} not in the text")
    notes.extend(problems[:2])
    return RocminfoReport(agents=agents, notes=notes)


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


#: how the reason for an unknown ROCm version begins when ROCm is there but says no version
ROCM_PRESENT = "ROCm is installed"

#: a ROCm >= 7.14 install's own directory: ``/opt/rocm/core-7.14``, ``/opt/rocm/core-10.0``
#: (TheRock's layout: ROCm/TheRock#2728 and #4160; ROCm/legacy-rocm-build#6632)
ROCM_CORE_DIR = re.compile(r"^core-(\d+\.\d+(?:\.\d+)*)$")


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
