"""The package databases of a machine, as text: dpkg's ``status``, pacman's ``local/*/desc``,
``rpm -q`` output, and the version strings they hold.

Only parsing lives here; :mod:`ojai_setup.facts.packages` reads the files through the root.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class PackageRecord(NamedTuple):
    name: str
    version: str
    manager: str  # dpkg, pacman, rpm
    #: the record's other fields ("X-Rocm-Gpu-Architecture", "Source", ...), dpkg only
    fields: dict[str, str]


def parse_dpkg_status(text: str, names: set[str] | None = None) -> dict[str, PackageRecord]:
    """Installed packages of ``/var/lib/dpkg/status`` (``names``: only those), by name.

    A record is a paragraph of ``Field: value`` lines (continuation lines start with a space);
    a package counts as installed when its ``Status`` ends in ``installed``."""
    found: dict[str, PackageRecord] = {}
    for para in re.split(r"\n\s*\n", text):
        first = para.lstrip("\n").split("\n", 1)[0]
        if names is not None and first.startswith("Package:") and \
                first[len("Package:"):].strip() not in names:
            continue  # a status file holds thousands of records: skip the others unparsed
        fields: dict[str, str] = {}
        key = None
        for line in para.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                key = key.strip()
                fields[key] = value.strip()
        name = fields.get("Package")
        if not name or (names is not None and name not in names):
            continue
        if not fields.get("Status", "").endswith(" installed"):
            continue
        keep = {k: v for k, v in fields.items()
                if k in ("Source", "Provides", "Depends") or k.startswith("X-")}
        found[name] = PackageRecord(name, fields.get("Version", ""), "dpkg", keep)
    return found


def parse_pacman_desc(text: str) -> PackageRecord | None:
    """One ``/var/lib/pacman/local/<name>-<version>/desc`` file: ``%NAME%`` and ``%VERSION%``
    sections, each followed by its value lines."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if re.fullmatch(r"%[A-Z0-9]+%", line):
            current = line.strip("%")
            sections[current] = []
        elif line and current:
            sections[current].append(line)
    name, version = sections.get("NAME", [None])[0], sections.get("VERSION", [None])[0]
    if not name or not version:
        return None
    return PackageRecord(name, version, "pacman", {})


def parse_rpm_query(text: str) -> dict[str, PackageRecord]:
    """``rpm -qa --qf '%{NAME} %{VERSION}-%{RELEASE}\\n'`` output (or ``rpm -q`` of names: the
    lines it prints for names that are not installed are left out)."""
    found: dict[str, PackageRecord] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and "not installed" not in line:
            found[parts[0]] = PackageRecord(parts[0], parts[1], "rpm", {})
    return found


def upstream_version(version: str) -> str:
    """The upstream part of a package version: without the epoch (``1:``) and without the
    distribution's revision (``-2``, ``-1.fc43``, ``-0ubuntu2.19``)."""
    version = version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def version_key(version: str) -> tuple[int, ...]:
    """A sortable key of a version's numbers: ``20251125`` -> (20251125,), ``0.7.0+dfsg`` ->
    (0, 7, 0)."""
    return tuple(int(n) for n in re.findall(r"\d+", upstream_version(version).split("+")[0]))
