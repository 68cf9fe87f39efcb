"""Times of the Debian 12 test machine (tests/support/vm.py) on this host.

    python benchmarks/vm_boot.py [--reboots 2]

Builds the image first when it is not cached, prints how long its build took (from the image's
own record), then boots a fresh overlay of it and prints: seconds from starting qemu to a booted system (``systemctl is-system-running``),
each reboot through the disk's GRUB, one ``ojai``-sized Python start (``import pydantic, rich,
typer`` in the guest's venv), ``update-grub`` and ``update-initramfs -u``, and the power-off.
Then what the scenarios do instead of a first boot: a snapshot of a booted guest (one boot and
``savevm``), and ``--resumes`` guests started from copies of it (copy, ``-loadvm``, the first
command answered), with the ratio of a boot to a start from the snapshot.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import vm  # noqa: E402


def timed(label: str, fn) -> float:
    start = time.monotonic()
    fn()
    took = time.monotonic() - start
    print(f"{label:<44} {took:7.1f} s", flush=True)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reboots", type=int, default=2)
    parser.add_argument("--resumes", type=int, default=3)
    args = parser.parse_args()
    image = vm.ensure_image()
    for key, value in image.info.get("timings", {}).items():
        print(f"{'image build: ' + key:<44} {value:7.1f} s")
    with tempfile.TemporaryDirectory(prefix="ojai-vm-bench-") as tmp:
        disk = vm.overlay(image.disk, Path(tmp) / "disk.qcow2")
        machine = vm.Machine(disk, Path(tmp) / "vm", name="bench")
        try:
            boot = timed("boot (qemu start -> system running)", machine.wait_for_boot)
            for n in range(args.reboots):
                timed(f"reboot {n + 1} (through the disk's GRUB)", machine.reboot)
            timed("python start with pydantic, rich, typer",
                  lambda: machine.succeed("/opt/ojai/bin/python -c 'import pydantic, rich, typer'"))
            timed("update-grub", lambda: machine.succeed("update-grub"))
            timed("update-initramfs -u", lambda: machine.succeed("update-initramfs -u", timeout=1800))
            timed("power off", machine.shutdown)
        finally:
            machine.kill()
        snapshot = Path(tmp) / "snapshot"
        timed("snapshot of a booted guest (boot + savevm)",
              lambda: vm.booted_snapshot(image.disk, snapshot))
        starts = []
        for n in range(args.resumes):
            guests: list[vm.Machine] = []
            try:
                starts.append(timed(
                    f"start {n + 1} from the snapshot (copy, -loadvm)",
                    lambda n=n, guests=guests: guests.append(vm.from_snapshot(
                        snapshot / "booted.qcow2", Path(tmp) / f"resume{n}", "bench"))))
            finally:
                for guest in guests:
                    guest.kill()
        best = min(starts)
        print(f"{'a boot / a start from the snapshot':<44} {boot / best:7.1f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
