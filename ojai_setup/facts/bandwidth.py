"""The memory bandwidth this machine reads at, measured: every processor thread sums its own
share of a buffer far larger than the caches, best of a few rounds (numpy releases the
interpreter lock while it sums). A lower bound of what the memory gives: the iGPU, with more
requests in flight, can read faster than the processor's cores do; say so wherever it is
shown (``ojai tune --bandwidth GB/s`` takes the figure from the machine's specification)."""

from __future__ import annotations

import os
import threading
import time

#: the buffer summed: 256 MiB of float64, far past any last-level cache of these machines
BUFFER_BYTES = 256 << 20


def measure_bandwidth(*, rounds: int = 3, threads: int | None = None,
                      size: int = BUFFER_BYTES) -> tuple[float, str]:
    """(bytes per second, how it was measured)."""
    import numpy as np

    n = threads or len(os.sched_getaffinity(0))
    data = np.ones(size // 8, dtype=np.float64)
    parts = np.array_split(data, n)
    best = 0.0
    for _ in range(rounds):
        start = threading.Barrier(n + 1)
        workers = [threading.Thread(target=lambda p=p, go=start: (go.wait(), p.sum())) for p in parts]
        for w in workers:
            w.start()
        start.wait()
        t0 = time.perf_counter()
        for w in workers:
            w.join()
        best = max(best, data.nbytes / (time.perf_counter() - t0))
    return best, (f"measured: {n} threads summing {size >> 20} MiB, best of {rounds}; the "
                  "processor's reads, a lower bound for the GPU's")
