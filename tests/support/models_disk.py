"""Run ``ojai`` with the test machine's models folder on a filesystem of its own size.

A plan for a large catalog route (Gemma 4 26B, Qwen 27B: about 17 GB of files each) checks the
free space of the filesystem ``/var/lib/ojai/models`` is on. On a copied machine that is the
host's disk, so the plan would depend on how full the host is. Here the command runs in a mount
namespace of its own (``unshare --mount``) with a tmpfs of ``size`` mounted on the machine's
models folder: a real filesystem of the size the box has, nothing written to memory but the
test's files, and nothing left mounted when the command ends."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

#: the OJAI box's SSD (the Minisforum AI X1 Pro ships with 1 TB)
BOX_DISK = "1T"


def ojai_with_models_disk(root: Path, *args: str, size: str = BOX_DISK,
                          folder: str = "var/lib/ojai/models") -> subprocess.CompletedProcess[str]:
    """``ojai ARGS`` with ``root/folder`` on a tmpfs of ``size`` (a mount namespace of its own)."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        raise RuntimeError("a models disk of its own needs root and unshare (util-linux), "
                           "as .ci/run has")
    mount_point = root / folder
    mount_point.mkdir(parents=True, exist_ok=True)
    script = 'mount -t tmpfs -o "size=$1" ojai-models "$2" && shift 2 && exec "$@"'
    return subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", size,
         str(mount_point), str(Path(sys.executable).with_name("ojai")), *args],
        capture_output=True, text=True, timeout=120)
