"""What ``ansible-test sanity`` on the collection costs, cold and warm.

    python benchmarks/ansible_sanity.py [--runs 3]

Cold: the preparation of ansible-test's sanity virtualenvs (pip downloading and installing
the versions ansible-core pins), as tests/support/ansible_sanity.py recorded it when it made
them. Warm: measured now, the preparation again on the filled cache (a no-op that checks it)
and the run of every sanity test the collection's test runs (tests/ansible/test_ansible_sanity.py).
Nothing is prepared here: run ``bash .ci/run`` (or ``python tests/support/ansible_sanity.py``)
first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support import ansible_sanity  # noqa: E402


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def sanity_run() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        result = ansible_sanity.run_sanity(Path(tmp))
    if result.rc != 0:
        raise SystemExit(f"ansible-test sanity failed:\n{result.output[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    cold = ansible_sanity.recorded()
    if cold is None:
        print(f"no sanity virtualenvs at {ansible_sanity.cache_home()}: "
              f"run tests/support/ansible_sanity.py first")
        return 1
    print(f"virtualenvs   cold {cold['seconds']:7.1f} s (made {cold['built_at']}, load "
          f"{cold['load_average_1min']}), {cold['bytes'] / 1e6:.0f} MB   "
          f"warm {statistics.median(timed(ansible_sanity.prepare) for _ in range(args.runs)):5.2f} s")
    runs = [timed(sanity_run) for _ in range(args.runs)]
    print(f"sanity run    {len(ansible_sanity.TESTS)} tests   median {statistics.median(runs):5.1f} s "
          f"(min {min(runs):.1f}, max {max(runs):.1f}) over {args.runs} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
