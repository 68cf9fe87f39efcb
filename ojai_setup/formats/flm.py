"""FastFlowLM on the XDNA 2 NPU: what ``flm validate`` says, which model to serve, what is missing.

``flm validate`` checks six things; each becomes one :class:`Requirement` of :class:`FlmStatus`
with the value the machine showed. The thresholds and both output forms come from
``sanity_check_npu_stack`` in ROCm/FastFlowLM ``src/src/main.cpp``:

==============  ===========================================  ===============================
requirement     ``--json`` key(s)                            text line (``[Linux]  ...``)
==============  ===========================================  ===============================
kernel >= 6.17  ``kernel`` (uname release), ``kernel_ok``    ``Kernel: 6.17.0-14-generic``
accel device    ``amd_device_found``, ``devices[].device``   ``NPU: /dev/accel/accel0 ...``
amdxdna >= 0.6  ``drm_version`` (DRM driver version)         ``amdxdna version: 0.6``
firmware >= 1.1 ``devices[].fw_major/minor/patch/build``,    ``NPU FW Version: 1.1.2.64``
                ``devices[].fw_ok``, ``all_fw_ok``
>= 8 columns    ``devices[].cols``, ``enough_cols``          ``... with 8 columns``
memlock         ``memlock_limit`` ("infinity" or bytes),     ``Memlock Limit: infinity``
                ``memlock_ok``
==============  ===========================================  ===============================

plus ``ready`` (all of them). Two traps in the JSON form: FastFlowLM folds a too-old amdxdna
into ``kernel_ok``, so the kernel is judged here from ``kernel`` itself; and when the kernel is
too old it stops early, leaving every other flag at its initial ``true`` - those checks were
not made, and are reported here as not checked (``ok is None``). Failures in the text form are
printed in red as ``[ERROR]  ...`` lines on stderr.

``flm serve`` has no health endpoint; Lemonade waits for ``GET /api/tags`` to answer
(lemonade-sdk/lemonade ``src/cpp/server/backends/fastflowlm/fastflowlm_server.cpp``), and so
does :func:`probe_tags`. That endpoint lists every known tag in Ollama's shape
``{"models": [{"name": "llama3.2:3b", ...}]}`` (ROCm/FastFlowLM ``src/include/model_list.hpp``)."""

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

MIN_KERNEL = (6, 17)


MIN_AMDXDNA = (0, 6)


MIN_FIRMWARE = (1, 1)


MIN_COLUMNS = 8


#: flm raises a lower memlock limit to infinity itself, and fails when it cannot.
MIN_MEMLOCK_BYTES = 100 * 1024 * 1024


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Requirement(_Model):
    """One check of ``flm validate``: what is needed, what was seen, and whether it holds.

    ``ok`` is ``None`` when the check was not made (flm stopped before it, or the output did
    not mention it).
    """

    required: str
    observed: str | None = None
    ok: bool | None = None


class FlmDevice(_Model):
    device: str  # /dev/accel/accelN
    firmware: str | None = None  # "1.1.2.64"
    columns: int | None = None
    #: ``devices[].busy`` of ``flm validate --json`` (FastFlowLM 1.0.9 and newer): another
    #: process holds the NPU; None when the output does not say
    busy: bool | None = None


class FlmStatus(_Model):
    """The parsed result of ``flm validate`` (JSON or text)."""

    source: Literal["json", "text"]
    exit_code: int
    kernel: Requirement
    accel_device: Requirement
    amdxdna: Requirement
    firmware: Requirement
    columns: Requirement
    memlock: Requirement
    devices: list[FlmDevice] = []
    errors: list[str] = []  # the "[ERROR]" sentences, text form only
    #: "[Linux]" / "[ERROR]" lines of the text form that none of the patterns above could read
    unread: list[str] = []
    ready: bool

    def requirements(self) -> dict[str, Requirement]:
        return {"kernel": self.kernel, "accel_device": self.accel_device,
                "amdxdna": self.amdxdna, "firmware": self.firmware,
                "columns": self.columns, "memlock": self.memlock}

    def busy(self) -> list[str]:
        """The devices ``flm validate`` reports busy (held by another process)."""
        return [d.device for d in self.devices if d.busy]

    def failed(self) -> list[str]:
        """Names of the requirements seen to fail."""
        return [name for name, req in self.requirements().items() if req.ok is False]


# -- parsing -----------------------------------------------------------------------------------
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


_LINE = re.compile(r"^\[(?P<header>[^\]]+)\]\s+(?P<text>.*?)\s*$")


_NPU = re.compile(r"^NPU:\s*(?P<device>\S+)(?:\s+with\s+(?P<cols>\d+)\s+columns)?$")


_FW = re.compile(r"^NPU FW Version:\s*(?P<fw>\S+)$")


_AMDXDNA = re.compile(r"^amdxdna version:?\s*(?P<v>\S+)(?P<bad>\s+is incompatible)?$")


_MEMLOCK = re.compile(r"^Memlock Limit:\s*(?:set to\s+)?(?P<v>infinity|\d+)\s*(?P<mb>MB)?$")


_MEMLOCK_LOW = r"^Memlock limit is too low \((?P<mb>\d+)\s*MB\)"


_COLS_LOW = r"^NPU (?P<device>\S+) does not have enough columns \((?P<cols>\d+) < \d+\)"


def _version(text: str | None, parts: int) -> tuple[int, ...] | None:
    """The first ``parts`` numbers of a dotted version ("6.17.0-14-generic" -> (6, 17))."""
    if not text:
        return None
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", text)
    if not m:
        return None
    numbers = [int(n) for n in m.group(1).split(".")][:parts]
    return tuple(numbers + [0] * (parts - len(numbers)))


def _at_least(text: str | None, minimum: tuple[int, ...]) -> bool | None:
    have = _version(text, len(minimum))
    return None if have is None else have >= minimum


def _req(required: str, observed: str | None, ok: bool | None) -> Requirement:
    return Requirement(required=required, observed=observed, ok=ok)


_REQUIRED = {
    "kernel": ">= 6.17",
    "accel_device": "/dev/accel/accel* of an AMD NPU",
    "amdxdna": ">= 0.6",
    "firmware": ">= 1.1",
    "columns": f">= {MIN_COLUMNS}",
    "memlock": "unlimited or >= 100 MiB",
}


def _memlock_ok(limit: str | None) -> bool | None:
    if limit is None:
        return None
    if limit == "infinity":
        return True
    return int(limit) >= MIN_MEMLOCK_BYTES if limit.isdigit() else None


def parse_validate(stdout: str, exit_code: int) -> FlmStatus:
    """Parse ``flm validate --json`` or plain ``flm validate`` output (stdout and stderr joined)."""
    text = _ANSI.sub("", stdout)
    if text.lstrip().startswith("{"):
        return _parse_json(text, exit_code)
    return _parse_text(text, exit_code)


def _parse_json(text: str, exit_code: int) -> FlmStatus:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("flm validate --json printed something other than an object")
    kernel = data.get("kernel")
    # flm's own verdict on the kernel stands when it passes: a FastFlowLM without a kernel
    # floor passes distribution kernels that backport the driver; a failing verdict may be
    # the amdxdna version folded into it, so the kernel is then judged from its version
    kernel_ok = True if data.get("kernel_ok") is True else (
        _at_least(kernel, MIN_KERNEL) if kernel else data.get("kernel_ok"))
    # Too old a kernel: flm printed its initial flags without checking anything else.
    stopped_early = kernel_ok is False and "drm_version" not in data and not data.get("devices")

    devices = []
    for entry in data.get("devices") or []:
        fw = None
        if "fw_major" in entry:
            fw = ".".join(str(entry.get(k, 0)) for k in ("fw_major", "fw_minor", "fw_patch", "fw_build"))
        cols = entry.get("cols")
        busy = entry.get("busy")
        devices.append(FlmDevice(device=str(entry.get("device", "")), firmware=fw,
                                 columns=int(cols) if cols is not None else None,
                                 busy=bool(busy) if busy is not None else None))

    def flag(key: str) -> bool | None:
        return None if stopped_early or key not in data else bool(data[key])

    found = flag("amd_device_found")
    drm = data.get("drm_version")
    fw_seen = ", ".join(d.firmware for d in devices if d.firmware) or None
    cols_seen = ", ".join(str(d.columns) for d in devices if d.columns is not None) or None
    memlock_limit = data.get("memlock_limit")
    memlock_ok = flag("memlock_ok") if "memlock_limit" in data else None
    return FlmStatus(
        source="json",
        exit_code=exit_code,
        kernel=_req(_REQUIRED["kernel"], kernel, kernel_ok),
        accel_device=_req(_REQUIRED["accel_device"],
                          ", ".join(d.device for d in devices) or None, found),
        amdxdna=_req(_REQUIRED["amdxdna"], drm,
                     None if not found or drm in (None, "unknown") else _at_least(drm, MIN_AMDXDNA)),
        firmware=_req(_REQUIRED["firmware"], fw_seen, flag("all_fw_ok") if found else None),
        columns=_req(_REQUIRED["columns"], cols_seen,
                     flag("enough_cols") if found and cols_seen else None),
        memlock=_req(_REQUIRED["memlock"], memlock_limit,
                     memlock_ok if memlock_ok is not None else _memlock_ok(memlock_limit)),
        devices=devices,
        ready=bool(data.get("ready", False)),
    )


def _parse_text(text: str, exit_code: int) -> FlmStatus:
    kernel: str | None = None
    kernel_bad = False
    devices: dict[str, dict[str, Any]] = {}
    current: str | None = None
    no_device = False
    drm: str | None = None
    drm_bad = False
    fw_bad = False
    memlock: str | None = None
    memlock_bad = False
    errors: list[str] = []
    unread: list[str] = []
    for raw in text.splitlines():
        m = _LINE.match(raw.strip())
        if not m:
            continue
        header, line = m.group("header"), m.group("text")
        if header == "ERROR":
            errors.append(line)
            if line.startswith("Kernel version incompatible"):
                kernel_bad = True
            elif line.startswith("No NPU device found"):
                no_device = True
            elif line.startswith("NPU firmware version on"):
                fw_bad = True
            elif (mm := _AMDXDNA.match(line)) and mm.group("bad"):
                drm, drm_bad = mm.group("v"), True
            elif mm := re.match(_MEMLOCK_LOW, line):
                memlock, memlock_bad = str(int(mm.group("mb")) * 1024 * 1024), True
            elif mm := re.match(_COLS_LOW, line):
                devices.setdefault(mm.group("device"), {})["columns"] = int(mm.group("cols"))
            else:
                unread.append(f"[{header}] {line}")
            continue
        if line.startswith("Kernel:"):
            kernel = line.split(":", 1)[1].strip()
        elif mm := _NPU.match(line):
            current = mm.group("device")
            entry = devices.setdefault(current, {})
            if mm.group("cols"):
                entry["columns"] = int(mm.group("cols"))
        elif (mm := _FW.match(line)) and current is not None:
            devices[current]["firmware"] = mm.group("fw")
        elif mm := _AMDXDNA.match(line):
            drm = mm.group("v")
        elif mm := _MEMLOCK.match(line):
            value = mm.group("v")
            memlock = str(int(value) * 1024 * 1024) if mm.group("mb") else value
        else:
            unread.append(f"[{header}] {line}")

    parsed = [FlmDevice(device=name, **info) for name, info in devices.items()]
    firmware = ", ".join(d.firmware for d in parsed if d.firmware) or None
    columns = [d.columns for d in parsed if d.columns is not None]
    found: bool | None = True if parsed else (False if no_device else None)
    if kernel_bad:
        kernel_ok: bool | None = False
    elif kernel and exit_code == 0 and not errors:
        kernel_ok = True  # flm printed its kernel and found nothing wrong with it
    else:
        kernel_ok = _at_least(kernel, MIN_KERNEL)

    def fw_ok() -> bool | None:
        if fw_bad:
            return False
        seen = [_at_least(d.firmware, MIN_FIRMWARE) for d in parsed if d.firmware]
        return all(seen) if seen and None not in seen else None

    requirements = dict(
        kernel=_req(_REQUIRED["kernel"], kernel, kernel_ok),
        accel_device=_req(_REQUIRED["accel_device"], ", ".join(devices) or None, found),
        amdxdna=_req(_REQUIRED["amdxdna"], drm, False if drm_bad else _at_least(drm, MIN_AMDXDNA)),
        firmware=_req(_REQUIRED["firmware"], firmware, fw_ok()),
        columns=_req(_REQUIRED["columns"], ", ".join(map(str, columns)) or None,
                     min(columns) >= MIN_COLUMNS if columns else None),
        memlock=_req(_REQUIRED["memlock"], memlock, False if memlock_bad else _memlock_ok(memlock)),
    )
    ready = exit_code == 0 and all(r.ok is True for r in requirements.values())
    return FlmStatus(source="text", exit_code=exit_code, devices=parsed, errors=errors,
                     unread=unread, ready=ready, **requirements)
