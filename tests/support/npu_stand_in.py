"""An AMD XDNA 2 NPU and FastFlowLM, as the real ``lemond`` in the sid chroot looks for them.

FastFlowLM cannot run here (there is no NPU), so this is the one part of the Lemonade NPU test
that is a stand-in. It gives lemond exactly what Lemonade's own source probes, nothing more
(lemonade-sdk/lemonade at commit e385039, August 2026, ``src/cpp/server/system_info.cpp`` and
``src/cpp/server/backends/fastflowlm/``, whose ``test/test_flm_status.py`` also stands in for
``flm`` with a script in ``PATH``; the installed ``lemond`` 2026.39.1-2 carries the same probe
strings: ``/sys/class/accel``, ``/dev/accel/``, ``/sys/bus/pci/devices``, ``0x118000``,
``0x17f0``, ``amdxdna``, ``" version --json``, ``" list --json``,
``" list --filter installed --quiet --json``):

- **The device.** ``LinuxSystemInfo::get_npu_device`` calls the NPU available when a
  ``/sys/class/accel/*/device/driver`` link names the ``amdxdna`` driver;
  ``identify_npu_arch_linux`` then opens ``/dev/accel/<name>`` read-write and asks the driver
  for its column count (8 columns: XDNA2) and, when that ioctl gives nothing, falls back to the
  PCI function: class ``0x118000``, vendor ``0x1022``, device ``0x17f0``, revision ``0x10``,
  ``0x11`` or ``0x20``. FastFlowLM's backend descriptor requires an ``amd_npu`` of family
  ``XDNA2``. So the stand-in is a sysfs tree (bound at ``/sys`` in lemond's namespace) shaped as
  the kernel lays it out for the NPU (PCI function ``0000:c5:00.1``, the accel class link into
  it, the driver link), and ``/dev/accel/accel0`` an ordinary file in a ``/dev`` made for
  lemond's namespace alone (the ioctl on it fails, so the PCI fallback decides). The host's
  ``/dev`` and ``/sys`` are never written.
- **FastFlowLM.** With ``flm.prefer_system=true`` Lemonade takes ``flm`` from ``PATH``
  (``find_flm_in_path``); the stand-in ``flm`` (a shell script, bound in as ``/usr/local/bin``)
  answers the four commands Lemonade runs to list and pull models, in the output format
  Lemonade parses: ``flm version --json`` -> ``{"version": "1.0.5"}`` (``flm_version``: a
  version at least the one ``backend_versions.json`` pins, ``VersionPolicy::AtLeast``),
  ``flm list --json`` -> ``{"models": [{"name": TAG, "footprint": GB, "label": [...],
  "installed": BOOL, "url": URL}, ...]}`` (``flm_discover_models``, which names each model TAG
  with ``:`` made ``-`` plus ``-FLM``), ``flm list --filter installed --quiet --json`` -> the
  installed ones (``flm_installed_checkpoints``), and ``flm pull TAG [--force]`` printing
  ``[FLM]  Downloading 1/1: FILE`` lines (``flm_download``'s progress parser). The command
  names and flags are FastFlowLM's (its docs, ``docs/instructions/cli.md``: ``flm pull
  llama3.2:3b --force``, ``flm list --filter installed --quiet``). A pulled model goes where
  FastFlowLM keeps models, ``$FLM_MODEL_PATH/models/<repo folder>/`` (Lemonade's
  ``get_flm_models_dir_candidates``), with the ``config.json`` Lemonade reads the context
  window from. Every call is appended to ``calls.log`` so a test sees what lemond ran; any
  other command fails loudly.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

#: the PCI function of the NPU (bus c5, function 1 beside the GPU's audio and PSP functions)
PCI_SLOT = "0000:c5:00.1"
#: FastFlowLM's model tags the stand-in offers (the fixed tag list REFERENCE.md cites), with
#: their disk footprints in GB, labels and context windows; ``installed`` starts false
CATALOG: tuple[tuple[str, float, tuple[str, ...], int], ...] = (
    ("llama3.2:1b", 1.3, (), 131072),
    ("llama3.2:3b", 2.7, (), 65536),
    ("qwen3:4b", 3.1, ("reasoning", "tool-calling"), 32768),
    ("gemma3:4b", 4.5, ("vision",), 65536),
    ("gemma4-it:e4b", 9.1, ("vision",), 32768),
    ("gpt-oss:20b", 14.0, ("reasoning",), 8192),
    ("whisper-v3:turbo", 0.6, ("audio", "transcription"), 448),
)
#: where the stand-in's folders are bound in lemond's namespace
FLM_BIN = "/usr/local/bin"
FLM_HOME = "/var/lib/flm"

_FLM = r'''#!/bin/sh
# stand-in FastFlowLM CLI: the commands lemond runs to list and pull models (see
# tests/support/npu_stand_in.py for where each output format comes from)
here=$(dirname "$0")
echo "$*" >> "$FLM_MODEL_PATH/calls.log"
models="$FLM_MODEL_PATH/models"
listing() {  # $1: all | installed
  python3 - "$here/catalog.json" "$models" "$1" <<'PY'
import json, os, sys
catalog, models, which = sys.argv[1:4]
out = []
for m in json.load(open(catalog)):
    folder = m["url"].rsplit("/", 1)[1]
    m = dict(m, installed=os.path.isfile(os.path.join(models, folder, "config.json")))
    if which == "all" or m["installed"]:
        out.append(m)
print(json.dumps({"models": out}))
PY
}
case "$*" in
  "version --json") printf '{"version": "%s"}\n' "$(cat "$here/version")" ;;
  "list --json") listing all ;;
  "list --filter installed --quiet --json") listing installed ;;
  "pull "*)
    tag=$2
    python3 - "$here/catalog.json" "$models" "$tag" <<'PY' || exit 1
import json, os, sys
catalog, models, tag = sys.argv[1:4]
entry = next((m for m in json.load(open(catalog)) if m["name"] == tag), None)
if entry is None:
    print(f"[FLM]  Error: model {tag} is not in the model list", file=sys.stderr)
    sys.exit(1)
folder = os.path.join(models, entry["url"].rsplit("/", 1)[1])
os.makedirs(folder, exist_ok=True)
print("[FLM]  Missing files (1):", flush=True)
print("[FLM]  Downloading 1/1: config.json", flush=True)
with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump({"max_position_embeddings": entry["context"]}, f)
print("[FLM]  Overall progress: 100.0% (1/1 files)", flush=True)
PY
    ;;
  *) echo "stand-in flm: unexpected command: flm $*" >&2; exit 2 ;;
esac
'''


@dataclass
class NpuStandIn:
    """The stand-in's folders on the host and what to give :func:`support.lemond.lemond`."""

    sys: Path
    bin: Path
    home: Path

    def binds(self) -> list[tuple[Path, str]]:
        return [(self.sys, "/sys"), (self.bin, FLM_BIN), (self.home, FLM_HOME)]

    def env(self) -> dict[str, str]:
        return {"FLM_MODEL_PATH": FLM_HOME}

    def calls(self) -> list[str]:
        log = self.home / "calls.log"
        return log.read_text().splitlines() if log.is_file() else []

    def installed(self) -> list[str]:
        models = self.home / "models"
        return sorted(p.parent.name for p in models.glob("*/config.json"))


#: run as root in lemond's namespace before lemond starts: a /dev of its own holding the
#: usual character devices (bound from the host's, read as they are) and the NPU's node
NAMESPACE_DEV = r'''
d=/run/ojai-dev
mkdir -p $d && mount -t tmpfs -o mode=755 tmpfs $d
for n in null zero full random urandom tty; do : > $d/$n && mount --bind /dev/$n $d/$n; done
mkdir $d/pts $d/shm $d/accel && mount -t tmpfs -o mode=1777 tmpfs $d/shm
ln -s /proc/self/fd $d/fd && ln -s /proc/self/fd/0 $d/stdin && ln -s /proc/self/fd/1 $d/stdout
ln -s /proc/self/fd/2 $d/stderr
: > $d/accel/accel0 && chmod 666 $d/accel/accel0
mount --rbind $d /dev
'''


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_npu_stand_in(folder: Path, *, flm_version: str, owner: tuple[int, int]) -> NpuStandIn:
    """The sysfs tree, the ``flm`` stand-in (printing ``flm_version``) and FastFlowLM's model
    folder (owned by ``owner``, the service user, as FastFlowLM's files are) under ``folder``."""
    sys_root = folder / "sys"
    function = sys_root / "devices/pci0000:00/0000:00:08.2" / PCI_SLOT
    for name, value in (("class", "0x118000"), ("vendor", "0x1022"), ("device", "0x17f0"),
                        ("revision", "0x10")):
        _write(function / name, value + "\n")
    (sys_root / "bus/pci/drivers/amdxdna").mkdir(parents=True)
    (function / "driver").symlink_to("../../../../bus/pci/drivers/amdxdna")
    accel = function / "accel/accel0"
    accel.mkdir(parents=True)
    (accel / "device").symlink_to("../../../" + PCI_SLOT)
    (sys_root / "class/accel").mkdir(parents=True)
    (sys_root / "class/accel/accel0").symlink_to(
        f"../../devices/pci0000:00/0000:00:08.2/{PCI_SLOT}/accel/accel0")
    (sys_root / "bus/pci/devices").mkdir(parents=True)
    (sys_root / "bus/pci/devices" / PCI_SLOT).symlink_to(
        f"../../../devices/pci0000:00/0000:00:08.2/{PCI_SLOT}")

    bin_dir = folder / "bin"
    _write(bin_dir / "flm", _FLM)
    (bin_dir / "flm").chmod(0o755)
    _write(bin_dir / "version", flm_version + "\n")
    catalog = [{"name": tag, "footprint": size, "label": list(labels), "context": context,
                "url": "https://huggingface.co/FastFlowLM/" + tag.replace(":", "-")}
               for tag, size, labels, context in CATALOG]
    _write(bin_dir / "catalog.json", json.dumps(catalog, indent=1) + "\n")

    home = folder / "flm-home"
    (home / "models").mkdir(parents=True)
    for path in (home, home / "models"):
        os.chown(path, *owner)
    return NpuStandIn(sys=sys_root, bin=bin_dir, home=home)
