"""Boot a test machine (a directory) the way its kernel would pick up a new GPU memory limit.

``python boot_machine.py ROOT`` does what a reboot changes in the files doctor reads: a new
``/proc/sys/kernel/random/boot_id``; ``/proc/cmdline`` rebuilt from the old boot's image and
root arguments plus ``GRUB_CMDLINE_LINUX`` and ``GRUB_CMDLINE_LINUX_DEFAULT`` as bash reads
them from ``/etc/default/grub`` (Ubuntu's ``vt.handoff=`` kept at the end); and the TTM limit
of the command line (``ttm.pages_limit`` or ``amdttm.pages_limit``, whichever module is live)
in ``/sys/module/<module>/parameters/pages_limit`` and every card's ``mem_info_gtt_total``,
as ``tests/machines/ojai-rebooted`` shows it after a real reboot. The collection's role test
hands it to ``ansible.builtin.reboot`` as the reboot command.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

KEEP_FIRST = ("BOOT_IMAGE=", "root=")
KEEP_LAST = ("vt.handoff=",)


def grub_cmdline(root: Path) -> list[str]:
    script = 'set -e; . "$1"; printf "%s\\n%s" "${GRUB_CMDLINE_LINUX-}" "${GRUB_CMDLINE_LINUX_DEFAULT-}"'
    out = subprocess.run(["bash", "-c", script, "_", str(root / "etc/default/grub")],
                         capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    return out.stdout.split()


def boot(root: Path) -> None:
    old = (root / "proc/cmdline").read_text().split()
    first = [t for t in old if t.startswith(KEEP_FIRST) or t == "ro"]
    last = [t for t in old if t.startswith(KEEP_LAST)]
    new = first + grub_cmdline(root) + last
    (root / "proc/cmdline").write_text(" ".join(new) + "\n")
    (root / "proc/sys/kernel/random/boot_id").write_text(f"{uuid.uuid4()}\n")
    for module in ("amdttm", "ttm"):
        param = root / "sys/module" / module / "parameters/pages_limit"
        if not param.parent.parent.is_dir():
            continue
        values = [t.split("=", 1)[1] for t in new if t.startswith(f"{module}.pages_limit=")]
        if values:
            param.write_text(values[-1] + "\n")
            for gtt in (root / "sys/class/drm").glob("card*/device/mem_info_gtt_total"):
                gtt.write_text(f"{int(values[-1]) * 4096}\n")
        break


if __name__ == "__main__":
    boot(Path(sys.argv[1]))
