"""A model download by ojai against curl, from the same loopback server.

    python benchmarks/download_speed.py [--mib 1536] [--runs 3]

A stand-in for the Hugging Face Hub and its CDN (tests/support/fake_hub.py) runs in a process
of its own on 127.0.0.1 and serves one file of ``--mib`` MiB. Each run times ``curl`` fetching
the CDN's URL into a file (curl does not hash), then ojai's download of the same file into a
machine folder (``execute_hub_download``: the hub's metadata, the transfer, the sha256 check,
the rename), both into the same folder (``--dir``, default a new temp folder), in alternating
order, each after ``sync`` so that neither waits for the other's writeback. It prints each
median in MB/s and ojai's throughput as a fraction of curl's; the goal is at least 0.90.

curl only copies bytes; ojai also takes each block's sha256 (in a thread of its own, beside
the transfer), so on a loopback link faster than this processor's sha256 a verified download
cannot go faster than the hash. The script therefore also prints this machine's sha256 rate
(hashlib, the same code ojai uses), the bound ``min(curl, sha256)``, and ojai against it;
and ojai against ``curl | tee FILE | sha256sum``, a verified download with the usual tools. On
loopback the server's sending takes processor time from the same cores: on 2 cores, sending,
receiving and hashing share them, where curl alone only sends and receives.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

REPO_ID = "ojai-bench/big-GGUF"
FILE = "model-Q4_K_M.gguf"


def serve(data_path: str, ready: str) -> None:
    """The server process: the hub and the CDN until stdin closes."""
    from support.fake_hub import FakeHub

    hub = FakeHub()
    hub.add_path(REPO_ID, FILE, Path(data_path))
    hub.start()
    entry = hub.files[(REPO_ID, FILE)]
    Path(ready).write_text(json.dumps({"hub": hub.url, "cdn": f"{hub.cdn_url}/cdn/{entry.sha256}",
                                       "sha256": entry.sha256}))
    sys.stdin.read()
    hub.stop()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1536)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", help="where the files go (default: a new temp folder)")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    if shutil.which("curl") is None:
        print("curl is not installed", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="ojai-download-bench-", dir=args.dir))
    try:
        data = work / "published.bin"
        block = hashlib.sha256(b"ojai").digest() * (1 << 15)  # 1 MiB, not all zeros
        with data.open("wb") as f:
            for n in range(args.mib):
                f.write(block[n % 32:] + block[:n % 32])
        ready = work / "ready.json"
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(data), str(ready)],
                                  stdin=subprocess.PIPE)
        try:
            while not ready.exists():
                if server.poll() is not None:
                    raise SystemExit("the stand-in hub did not start")
                time.sleep(0.05)
            info = json.loads(ready.read_text())
            return compare(work, info, data.stat().st_size, args.runs)
        finally:
            server.stdin.close()
            server.wait(timeout=30)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(work: Path, info: dict, size: int, runs: int) -> int:
    os.environ["HF_ENDPOINT"] = info["hub"]
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        os.environ.pop(name, None)
    from ojai_setup.apply.hub import execute_hub_download
    from ojai_setup.core.progress import NullProgress
    from ojai_setup.core.root import Root
    from ojai_setup.model.actions import HubDownload

    machine = work / "machine"
    action = HubDownload(repo_id=REPO_ID, filename=FILE, dest=f"/models/{FILE}", size=size)
    out = work / "curl.out"

    def curl() -> None:
        subprocess.run(["curl", "-sS", "--fail", "-o", str(out), info["cdn"]], check=True)

    def hashed() -> None:  # a verified download with the usual tools: three processes
        got = subprocess.run(f"curl -sS --fail {info['cdn']} | tee {out} | sha256sum", shell=True,
                             check=True, capture_output=True, text=True).stdout.split()[0]
        assert got == info["sha256"]

    def ojai() -> None:
        assert execute_hub_download(Root(machine), action, NullProgress()) is True

    curls, ojais, hasheds = [], [], []

    def fresh() -> None:
        out.unlink(missing_ok=True)
        shutil.rmtree(machine, ignore_errors=True)
        machine.mkdir()
        os.sync()  # neither starts with the other's dirty pages still to write back

    for n in range(runs):  # the order alternates: curl first, then ojai first, ...
        for which in ((curl, ojai, hashed) if n % 2 == 0 else (ojai, hashed, curl)):
            fresh()
            {curl: curls, ojai: ojais, hashed: hasheds}[which].append(timed(which))
            if which is ojai:
                assert (machine / "models" / FILE).stat().st_size == size
    curl_rate = size / statistics.median(curls) / 1e6
    hash_rate = sha256_rate(size)
    ojai_rate = size / statistics.median(ojais) / 1e6
    print(f"file: {size / 2**20:.0f} MiB, {runs} run(s) each, medians")
    print(f"curl: {curl_rate:8.1f} MB/s  ({', '.join(f'{t:.2f}' for t in curls)} s)")
    print(f"ojai: {ojai_rate:8.1f} MB/s  ({', '.join(f'{t:.2f}' for t in ojais)} s; "
          "metadata, transfer, sha256, rename)")
    hashed_rate = size / statistics.median(hasheds) / 1e6
    print(f"curl | tee | sha256sum: {hashed_rate:.1f} MB/s  "
          f"({', '.join(f'{t:.2f}' for t in hasheds)} s)")
    print(f"sha256: {hash_rate:6.1f} MB/s  (hashlib on this processor, one thread)")
    print(f"ratio ojai/curl: {ojai_rate / curl_rate:.2f} (goal >= 0.90)")
    bound = min(curl_rate, hash_rate)
    print(f"ratio ojai/min(curl, sha256): {ojai_rate / bound:.2f}")
    print(f"ratio ojai/(curl | tee | sha256sum): {ojai_rate / hashed_rate:.2f}")
    return 0


def sha256_rate(size: int) -> float:
    """MB/s of hashlib's sha256 over about ``size`` bytes, in the blocks ojai's download hashes."""
    from ojai_setup.apply.hub import _BLOCK

    block = os.urandom(_BLOCK)
    blocks = max(1, size // _BLOCK)
    digest = hashlib.sha256()
    start = time.perf_counter()
    for _ in range(blocks):
        digest.update(block)
    return blocks * _BLOCK / (time.perf_counter() - start) / 1e6


if __name__ == "__main__":
    raise SystemExit(main())
