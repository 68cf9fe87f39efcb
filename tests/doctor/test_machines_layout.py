"""Sanity of the test machines under tests/machines/ against their README and the captures.

Every file of every machine is cited in tests/machines/README.md, every cited file exists, and a
file the README says comes from a capture (``corpus/F``: shared/corpus beside the repository;
``captures/F``: tests/data/captures, see its SOURCES.md) is that capture: byte for byte, the
stated lines of it, a part of the stated line, or (for a composed edit) differs from it only in
the fields the README names. The machines also have to agree with themselves where doctor compares
two sources (the kernel release, the TTM limit and the GTT size, the recorded boot id).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.corpus import corpus_path, corpus_text

MACHINES = Path(__file__).parents[1] / "machines"
README = MACHINES / "README.md"
#: captures from public threads that are not in the corpus (tests/data/captures/SOURCES.md)
CAPTURES = Path(__file__).parents[1] / "data" / "captures"

ROW = re.compile(r"^\| `(?P<path>/[^`]+)` \| (?P<origin>[^|]+?) \| (?P<notes>.*) \|$")
_SRC = r"(?P<src>corpus|captures)/(?P<file>\S+)"
COPY = re.compile(rf"^copy of {_SRC}$")
LINES = re.compile(rf"^lines (?P<a>\d+)-(?P<b>\d+) of {_SRC}$")
FROM_LINE = re.compile(rf"^from line (?P<n>\d+) of {_SRC}$")
EDITED = re.compile(rf"^composed from {_SRC} \(edited: (?P<fields>[^)]+)\)$")


@dataclass(frozen=True)
class Entry:
    machine: str
    path: str
    origin: str


def parse_readme(text: str) -> list[Entry]:
    """The file tables of the README, one entry per row, under their ``## <machine>`` heading."""
    entries: list[Entry] = []
    machine: str | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            machine = line[3:].strip()
            continue
        m = ROW.match(line)
        if m:
            if machine is None:
                raise ValueError(f"file row before any machine heading: {line!r}")
            entries.append(Entry(machine, m["path"], m["origin"].strip()))
    return entries


def machine_files(machine: Path) -> set[str]:
    return {"/" + p.relative_to(machine).as_posix() for p in machine.rglob("*")
            if p.is_file() or p.is_symlink()}


def source(m: re.Match) -> Path:
    return corpus_path(m["file"]) if m["src"] == "corpus" else CAPTURES / m["file"]


def source_lines(m: re.Match) -> list[str]:
    return source(m).read_text(encoding="utf-8").splitlines(keepends=True)


def check_origin(entry: Entry, real: Path) -> None:
    """Raise AssertionError when ``real`` is not what ``entry.origin`` says it is."""
    origin = entry.origin
    if origin == "composed":
        return
    if m := COPY.match(origin):
        assert real.read_bytes() == source(m).read_bytes(), f"{entry}: not a copy"
        return
    if m := LINES.match(origin):
        want = "".join(source_lines(m)[int(m["a"]) - 1:int(m["b"])])
        assert real.read_text(encoding="utf-8") == want, f"{entry}: not those lines"
        return
    if m := FROM_LINE.match(origin):
        line = source_lines(m)[int(m["n"]) - 1]
        part = real.read_text(encoding="utf-8").rstrip("\n")
        assert part and part in line, f"{entry}: {part!r} is not part of line {m['n']}"
        return
    if m := EDITED.match(origin):
        lines = set(source(m).read_text(encoding="utf-8").splitlines())
        fields = [f.strip() for f in m["fields"].split(",")]
        for line in real.read_text(encoding="utf-8").splitlines():
            if line in lines:
                continue
            assert any(line.strip().startswith(f) for f in fields), (
                f"{entry}: line {line!r} is neither in the source nor an edited field")
        return
    raise AssertionError(f"{entry}: unknown origin {origin!r}")


ENTRIES = parse_readme(README.read_text(encoding="utf-8"))
MACHINE_NAMES = sorted(p.name for p in MACHINES.iterdir() if p.is_dir())


def test_readme_has_a_section_for_every_machine():
    assert MACHINE_NAMES, "no machines"
    assert sorted({e.machine for e in ENTRIES}) == MACHINE_NAMES


@pytest.mark.parametrize("name", MACHINE_NAMES)
def test_every_file_is_cited_once_and_every_citation_exists(name):
    cited = [e.path for e in ENTRIES if e.machine == name]
    assert len(cited) == len(set(cited)), f"{name}: a file is cited twice"
    assert set(cited) == machine_files(MACHINES / name)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.origin != "composed"],
                         ids=lambda e: f"{e.machine}:{e.path}")
def test_corpus_origin_holds(entry):
    check_origin(entry, MACHINES / entry.machine / entry.path.lstrip("/"))


def test_origin_checks_catch_a_changed_file(tmp_path):
    """The checks above fail on a file that drifted from its capture."""
    rocminfo = "rdna3-rx7900xtx-rocm-issue-3949/rocminfo.txt"
    drifted = tmp_path / "stdout"
    drifted.write_text(corpus_text(rocminfo).replace("gfx1100", "gfx1101"))
    cases = [
        f"copy of corpus/{rocminfo}",
        f"lines 1-400 of corpus/{rocminfo}",
        f"composed from corpus/{rocminfo} (edited: Marketing Name)",
    ]
    for origin in cases:
        with pytest.raises(AssertionError):
            check_origin(Entry("m", "/x", origin), drifted)
    drifted.write_text("6.14.0-1015-oem\n")
    with pytest.raises(AssertionError):
        check_origin(Entry("m", "/x", "from line 1 of corpus/strix-halo-395-rocm-issue-5595/"
                                      "uname-a.txt"), drifted)
    with pytest.raises(AssertionError):
        check_origin(Entry("m", "/x", "borrowed from somewhere"), drifted)


def test_parse_readme_rejects_rows_outside_a_machine():
    with pytest.raises(ValueError):
        parse_readme("| `/proc/cmdline` | composed | x |\n")


def read(name: str, path: str) -> str:
    return (MACHINES / name / path.lstrip("/")).read_text(encoding="utf-8")


def command(name: str, key: str) -> str:
    return read(name, f"/.ojai/commands/{key}/stdout")


def has(name: str, path: str) -> bool:
    return (MACHINES / name / path.lstrip("/")).is_file()


@pytest.mark.parametrize("name", MACHINE_NAMES)
def test_kernel_release_agrees(name):
    """Both sources of the kernel release agree, or both are missing (not posted)."""
    if not has(name, "/proc/sys/kernel/osrelease"):
        assert not has(name, "/.ojai/commands/uname -r/stdout")
        return
    release = read(name, "/proc/sys/kernel/osrelease").strip()
    assert command(name, "uname -r").strip() == release
    if has(name, "/proc/cmdline"):
        cmdline = read(name, "/proc/cmdline")
        assert cmdline.endswith("\n") and cmdline.count("\n") == 1
        if cmdline.startswith("BOOT_IMAGE="):
            # GRUB names the kernel as it found it: /boot/vmlinuz-R, or (hd0,gpt2)/vmlinuz-R
            # when /boot is a partition of its own (Fedora)
            assert re.fullmatch(rf"BOOT_IMAGE=(\([^)]*\))?(/boot)?/vmlinuz-{re.escape(release)}",
                                cmdline.split()[0])


@pytest.mark.parametrize("name", [n for n in MACHINE_NAMES if has(n, "/proc/cmdline")])
def test_cmdline_is_one_line(name):
    cmdline = read(name, "/proc/cmdline")
    assert cmdline.endswith("\n") and cmdline.count("\n") == 1


AMD_MACHINES = [n for n in MACHINE_NAMES
                if any((MACHINES / n / "sys/class/drm").glob("card*/device/mem_info_gtt_total"))]


@pytest.mark.parametrize("name", AMD_MACHINES)
def test_gtt_size_follows_the_live_ttm_limit(name):
    """Without an amdgpu gttsize option, the GTT the driver reports is the live TTM limit."""
    cards = sorted((MACHINES / name / "sys/class/drm").glob("card*/device/mem_info_gtt_total"))
    live_module = "amdttm" if (MACHINES / name / "sys/module/amdttm").is_dir() else "ttm"
    pages = int(read(name, f"/sys/module/{live_module}/parameters/pages_limit"))
    gtt = int(cards[0].read_text())
    gttsize = [p for p in (MACHINES / name / "etc/modprobe.d").glob("*.conf")
               if "gttsize=" in p.read_text()] if (MACHINES / name / "etc/modprobe.d").is_dir() else []
    if gttsize:
        assert gtt != pages * 4096
    else:
        assert gtt == pages * 4096


def test_no_amd_gpu_machine_has_none():
    vendors = {p.read_text().strip()
               for p in (MACHINES / "no-amd-gpu" / "sys/class/drm").glob("card*/device/vendor")}
    assert vendors and "0x1002" not in vendors
    assert not (MACHINES / "no-amd-gpu" / ".ojai/commands/rocminfo").exists()


def test_ojai_box_states():
    pages_48g = 48 * 262144
    boot = {n: read(n, "/proc/sys/kernel/random/boot_id").strip()
            for n in ("ojai-fresh", "ojai-applied", "ojai-rebooted")}
    assert len(set(boot.values())) == 3
    assert not (MACHINES / "ojai-fresh" / "var/lib/ojai/state.json").exists()
    assert f"ttm.pages_limit={pages_48g}" not in read("ojai-fresh", "/etc/default/grub")
    for name in ("ojai-applied", "ojai-rebooted"):
        state = json.loads(read(name, "/var/lib/ojai/state.json"))
        assert state["records"]["ttm"] == {"boot_id": boot["ojai-applied"],
                                           "expected_pages": pages_48g, "module": "ttm"}
        assert (f'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash ttm.pages_limit={pages_48g}"'
                in read(name, "/etc/default/grub"))
    assert "ttm.pages_limit" not in read("ojai-applied", "/proc/cmdline")
    assert f"ttm.pages_limit={pages_48g}" in read("ojai-rebooted", "/proc/cmdline").split()
    assert int(read("ojai-rebooted", "/sys/module/ttm/parameters/pages_limit")) == pages_48g
    assert read("ojai-fresh", "/sys/class/dmi/id/bios_version").strip() == "1.00"
    assert read("ojai-applied", "/sys/class/dmi/id/bios_version").strip() == "1.01"


@pytest.mark.parametrize("name", [n for n in MACHINE_NAMES if has(n, "/proc/meminfo") and (
    has(n, "/sys/module/ttm/parameters/pages_limit") or has(n, "/sys/module/amdttm/parameters/pages_limit"))])
def test_ttm_default_is_half_of_ram(name):
    """Where no limit is configured for the live module, its limit is the kernel default: half
    of RAM pages; where one is, the live limit is that value."""
    mem_kb = int(re.search(r"^MemTotal:\s+(\d+) kB", read(name, "/proc/meminfo"), re.M)[1])
    module = "amdttm" if (MACHINES / name / "sys/module/amdttm").is_dir() else "ttm"
    live = int(read(name, f"/sys/module/{module}/parameters/pages_limit"))
    cmdline = read(name, "/proc/cmdline").split() if has(name, "/proc/cmdline") else []
    configured = [int(t.split("=", 1)[1]) for t in cmdline if t.startswith(f"{module}.pages_limit=")]
    configured += [int(m[1]) for p in sorted((MACHINES / name).glob("etc/modprobe.d/*.conf"))
                   for m in re.finditer(rf"^options {module} .*pages_limit=(\d+)", p.read_text(), re.M)]
    if configured:
        assert live == configured[-1] != mem_kb // 4 // 2
    else:
        assert live == mem_kb // 4 // 2
