"""The Vulkan stack as text: ``vulkaninfo --summary`` and ``ls -l /dev/dri``.

``vulkaninfo --summary`` (Vulkan-Tools) prints, after the instance's extensions and layers, a
``Devices:`` section with one block per physical device::

    GPU0:
            apiVersion         = 1.4.318
            deviceType         = PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU
            deviceName         = AMD Radeon Graphics (RADV GFX1151)
            driverID           = DRIVER_ID_MESA_RADV
            driverName         = radv
            driverInfo         = Mesa 25.2.8

Older versions put the packed number before the version (``apiVersion = 4206830 (1.3.238)``);
the version in parentheses is kept. Warnings and loader messages before the header are skipped.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_DEVICE = re.compile(r"^GPU(\d+):\s*$")
_FIELD = re.compile(r"^\s+(\w+)\s*=\s*(.*?)\s*$")
_VERSION = re.compile(r"\((\d+\.\d+\.\d+)\)")


class SummaryDevice(NamedTuple):
    index: int  # type: ignore[assignment]  # vulkaninfo's name; hides tuple.index, never called
    fields: dict[str, str]


class Summary(NamedTuple):
    instance_version: str | None
    devices: list[SummaryDevice]


def parse_summary(text: str) -> Summary:
    """The instance version and each device's fields of a ``vulkaninfo --summary`` output."""
    instance = None
    devices: list[SummaryDevice] = []
    in_devices = False
    for line in text.splitlines():
        if line.startswith("Vulkan Instance Version:"):
            instance = line.split(":", 1)[1].strip() or None
            continue
        if line.strip() == "Devices:":
            in_devices = True
            continue
        if not in_devices:
            continue
        m = _DEVICE.match(line)
        if m:
            devices.append(SummaryDevice(int(m.group(1)), {}))
            continue
        f = _FIELD.match(line)
        if f and devices:
            key, value = f.groups()
            if key in ("apiVersion", "driverVersion"):
                packed = _VERSION.search(value)
                value = packed.group(1) if packed else value.split()[0] if value else value
            devices[-1].fields[key] = value
        elif line.strip() and not line.startswith((" ", "\t")) and not line.startswith("="):
            in_devices = False  # the next section
    return Summary(instance, devices)


class Node(NamedTuple):
    name: str
    mode: str
    owner: str
    group: str


_LS = re.compile(r"^([bcdlps-][rwxsStT-]{9})[.+@]?\s+\d+\s+(\S+)\s+(\S+)\s+.*\s(\S+)$")


def parse_dri_listing(text: str) -> list[Node]:
    """The character devices of an ``ls -l /dev/dri`` output: name, mode, owner and group."""
    nodes = []
    for line in text.splitlines():
        m = _LS.match(line.strip())
        if m and m.group(1).startswith("c"):
            nodes.append(Node(m.group(4), m.group(1), m.group(2), m.group(3)))
    return nodes
