"""What the heavy test artefacts cost: the sid chroot and the HIP build, cold and warm.

    python benchmarks/artefacts.py [--warm-runs 3]

Cold figures are read from what the builders recorded when they last built (the chroot's
``ready.json``, the HIP build's ``build.json`` and install record); warm figures are measured
now, by running each builder script again on the filled cache (a no-op that checks the cache).
Nothing is built here: run ``bash .ci/run`` (or the scripts under tests/support/) first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support import hip, sid  # noqa: E402


def warm(script: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, str(REPO / "tests" / "support" / script)], check=True,
                       stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warm-runs", type=int, default=3)
    args = parser.parse_args()

    ready = sid.cache_dir() / "ready.json"
    if not ready.is_file():
        print(f"no sid chroot at {sid.cache_dir()}: run tests/support/sid.py first")
        return 1
    chroot = json.loads(ready.read_text())
    print(f"sid chroot    cold {chroot['seconds']:7.0f} s (built {chroot['built_at']})   "
          f"warm {warm('sid.py', args.warm_runs):5.2f} s")

    build = hip.cache_dir() / "build.json"
    if not build.is_file():
        print(f"no HIP build at {hip.cache_dir()}: run tests/support/hip.py first")
        return 1
    measured = json.loads(build.read_text())
    print(f"HIP gfx1150   cold {measured['seconds']:7.0f} s wall, "
          f"{measured.get('cpu_seconds', float('nan')):7.0f} s processor time on "
          f"{measured['cores']} cores (load {measured['load_average_1min']}), "
          f"{measured['peak_build_bytes'] / 1e6:.0f} MB building, "
          f"{measured['install_bytes'] / 1e6:.0f} MB installed   "
          f"warm {warm('hip.py', args.warm_runs):5.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
