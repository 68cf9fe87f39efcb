"""A model download by ojai against curl, from the same loopback server, unthrottled and at
the speeds of real links.

    python benchmarks/download_speed.py [--mib 1536] [--runs 3] [--dir /dev/shm]
                                        [--rate 290,580,1150] [--rate MBPS ...]

A stand-in for the Hugging Face Hub and its CDN (tests/support/fake_hub.py) runs in a process
of its own on 127.0.0.1 and serves one file of ``--mib`` MiB. Each run times ``curl`` fetching
the CDN's URL into a file (curl does not hash), ojai's download of the same file into a
machine folder (``execute_hub_download``: the hub's metadata, the transfer, the sha256 check,
the rename), and ``curl | tee FILE | sha256sum`` (a verified download with the usual tools),
all into the same folder (``--dir``, default a new temp folder), in alternating order, each
after ``sync`` so that none waits for another's writeback. MB/s are 10^6 bytes a second.

This is done first unthrottled, then once for each ``--rate`` (MB/s; repeat the option or give
a comma list; ``--rate 0``: none), at which the CDN paces what it sends, as a link of that
speed would deliver it. The defaults are the TCP payload of these machines' links: 2.5 GbE
(290), 5 GbE (580) and 10 GbE (1150); the most a 1500-byte MTU carries is 1448 of each 1538
bytes on the wire, 94 % of the line rate (294, 588, 1177), a little less in practice. The
pacing sleeps between pieces of about a millisecond's worth (a token bucket that holds 2 ms,
so a late wake-up is made up and an idle link saves nothing more), in the server's send loop:
about one wake-up a millisecond, not a spinning core (here 0.2-0.4 s of processor time per GiB
sent at 290-1500 MB/s, where sending it unthrottled takes 0.1-0.3 s).

Each row prints, as median (lowest-highest) over the runs: the asked rate; ``sent``, the rate
the server measured sending curl's bodies (first to last byte: the pacing's accuracy); curl's
and ojai's rates as each saw them (start to finish, so with a process start or the hub's
metadata in it); ojai/curl, the ratio of the medians (the goal is at least 0.90), with the
lowest and highest ratio of runs taken side by side; and the verified pipeline. A curl rate
well below the asked one (it prints a note past 3 %) means the machine could not keep that
pace, not that the link is slow.

How to read it: a paced row is a download from a link of that speed, and its ratio says whether
ojai keeps up with the link, which is what a user gets. The unthrottled row is a loopback link
faster than this processor's sha256: curl only copies bytes; ojai also takes each block's
sha256 (in a thread of its own, beside the transfer), so there a verified download cannot go
faster than the hash, and the server's sending takes processor time from the same cores (on 2
cores sending, receiving and hashing share them, where curl only sends and receives). The
script therefore also prints this machine's sha256 rate (hashlib, the same code ojai uses), the
bound ``min(curl, sha256)`` and ojai against it, and ojai against the verified pipeline.
Other work on the machine shows as a wide spread, most in the unthrottled row, where every core
is busy; ``others`` is the share of all the processors' time that went to other processes
during the row (from /proc/stat): compare rows where it is near 0 %.
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
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

REPO_ID = "ojai-bench/big-GGUF"
FILE = "model-Q4_K_M.gguf"
#: MB/s of TCP payload on the links of these machines
LINKS = {290.0: "2.5 GbE", 580.0: "5 GbE", 1150.0: "10 GbE"}
#: the pacing: pieces of about a millisecond's worth, and what an idle link may save up
PIECE_SECONDS, BURST_SECONDS = 0.001, 0.002
PIECE_MIN, PIECE_MAX = 64 << 10, 1 << 20


class Pacer:
    """The CDN's pace, shared by its connections: ``rate`` bytes a second (0: as fast as the
    socket takes them) and what the last large body took to send (bytes, seconds), with
    :attr:`sent` set once it is known."""

    def __init__(self) -> None:
        self.rate = 0.0
        self.last: tuple[int, float] = (0, 0.0)
        self.sent = threading.Event()


class PacedWriter:
    """A handler's ``wfile`` (socketserver's ``_SocketWriter``, which ``sendall``s) that sends
    in pieces, each when the link it stands for is free: a token bucket, by sleeping."""

    def __init__(self, raw, pacer: Pacer) -> None:
        self._raw, self._pacer = raw, pacer
        self._due = 0.0  # when the link is free for the next byte

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        rate = self._pacer.rate
        start = time.perf_counter()
        if not rate:
            self._raw.write(view)
        else:
            piece = min(PIECE_MAX, max(PIECE_MIN, int(rate * PIECE_SECONDS) >> 16 << 16))
            due = max(self._due, start - BURST_SECONDS)
            for offset in range(0, len(view), piece):
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                chunk = view[offset:offset + piece]
                self._raw.write(chunk)
                due += len(chunk) / rate
            self._due = due
        if len(view) >= 1 << 20:
            self._pacer.last = (len(view), time.perf_counter() - start)
            self._pacer.sent.set()
        return len(view)

    def __getattr__(self, name: str):
        return getattr(self._raw, name)


def serve(data_path: str, ready: str) -> None:
    """The server process: the hub and the CDN until stdin closes, told on stdin its pace
    (``rate BYTES/S``), that a body is coming (``expect``) and to say what it took (``last``:
    once it is sent, which may be after the client has it all)."""
    from support.fake_hub import FakeHub

    hub = FakeHub()
    hub.add_path(REPO_ID, FILE, Path(data_path))
    hub.start()
    pacer = Pacer()
    cdn_port = int(hub.cdn_url.rsplit(":", 1)[1])
    for server in hub._servers:
        paced = server.server_address[1] == cdn_port

        class Handler(server.RequestHandlerClass):
            def setup(self, paced=paced) -> None:
                super().setup()
                if paced:
                    self.wfile = PacedWriter(self.wfile, pacer)

        server.RequestHandlerClass = Handler
    entry = hub.files[(REPO_ID, FILE)]
    _ = entry.git_oid  # the hub's sha1 of the file, taken once on its first answer: not in a run
    Path(ready).write_text(json.dumps({"hub": hub.url, "cdn": f"{hub.cdn_url}/cdn/{entry.sha256}",
                                       "sha256": entry.sha256}))
    for line in sys.stdin:
        word, *value = line.split()
        if word == "rate":
            pacer.rate = float(value[0])
            print("ok", flush=True)
        elif word == "expect":
            pacer.sent.clear()
            print("ok", flush=True)
        elif word == "last":
            pacer.sent.wait(60)
            print(json.dumps(pacer.last), flush=True)
    hub.stop()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rates_of(values: list[str] | None) -> list[float]:
    if values is None:
        return list(LINKS)
    rates = [float(v) for value in values for v in value.split(",") if v.strip()]
    if any(r < 0 for r in rates):
        raise SystemExit("--rate: MB/s, 0 or more")
    return [r for r in dict.fromkeys(rates) if r > 0]


def main() -> int:
    parser = argparse.ArgumentParser(description="ojai's model download against curl")
    parser.add_argument("--mib", type=int, default=1536, help="the file's size (MiB)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each download at each rate")
    parser.add_argument("--dir", help="where the files go (default: a new temp folder)")
    parser.add_argument("--rate", action="append", metavar="MBPS",
                        help="a link speed to pace the CDN at, in MB/s (repeat it or give a "
                             "comma list; 0: unthrottled only; default: "
                             + ",".join(f"{r:g}" for r in LINKS) + ")")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    rates = rates_of(args.rate)
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
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            while not ready.exists():
                if server.poll() is not None:
                    raise SystemExit("the stand-in hub did not start")
                time.sleep(0.05)
            info = json.loads(ready.read_text())

            def tell(line: str) -> str:
                server.stdin.write(line + "\n")
                server.stdin.flush()
                return server.stdout.readline()

            return compare(work, info, data.stat().st_size, args.runs, rates, tell, server.pid)
        finally:
            server.stdin.close()
            server.wait(timeout=30)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cpu_seconds(server: int) -> tuple[float, float, float] | None:
    """Now: the seconds of processor time the machine has been busy, those of this benchmark
    (itself, curl and the server), and the clock; None without Linux's /proc."""
    try:
        ticks = [int(t) for t in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        ours = Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[11:13]
    except (OSError, ValueError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    now = os.times()
    return ((sum(ticks) - ticks[3] - ticks[4]) / tick,  # all but idle and iowait
            now.user + now.system + now.children_user + now.children_system
            + (int(ours[0]) + int(ours[1])) / tick, time.monotonic())


def compare(work: Path, info: dict, size: int, runs: int, rates: list[float], tell,
            server: int) -> int:
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

    def fresh() -> None:
        out.unlink(missing_ok=True)
        shutil.rmtree(machine, ignore_errors=True)
        machine.mkdir()
        os.sync()  # none starts with another's dirty pages still to write back

    def measure(rate: float) -> dict[str, list[float]]:
        """MB/s of each run, by tool; ``sent``: the server's rate for curl's bodies."""
        assert tell(f"rate {rate * 1e6}").strip() == "ok"
        got: dict[str, list[float]] = {"curl": [], "ojai": [], "hashed": [], "sent": []}
        before = cpu_seconds(server)
        for n in range(runs):  # the order alternates: curl first, then ojai first, ...
            for which in ((curl, ojai, hashed) if n % 2 == 0 else (ojai, hashed, curl)):
                fresh()
                if which is curl:
                    tell("expect")
                got[which.__name__].append(size / timed(which) / 1e6)
                if which is ojai:
                    assert (machine / "models" / FILE).stat().st_size == size
                if which is curl:
                    sent, seconds = json.loads(tell("last"))
                    got["sent"].append(sent / seconds / 1e6)
        after = cpu_seconds(server)
        if before and after:  # the share of the processors that other work took meanwhile
            got["others"] = [max(0.0, (after[0] - before[0]) - (after[1] - before[1]))
                             / ((after[2] - before[2]) * (os.cpu_count() or 1))]
        return got

    table = [(0.0, measure(0.0))] + [(rate, measure(rate)) for rate in rates]
    hash_rate = sha256_rate(size)

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):6.0f} ({min(values):.0f}-{max(values):.0f})"

    print(f"file: {size / 2**20:.0f} MiB, {runs} run(s) of each at each rate; MB/s = 10^6 bytes/s, "
          "median (lowest-highest)")
    print(f"{'link':<12}{'asked':>6}  {'sent':<18}{'curl':<18}{'ojai':<18}{'ojai/curl':<18}"
          f"{'curl | tee | sha256sum':<24}others")
    notes = []
    for rate, got in table:
        curl_rate, ojai_rate = statistics.median(got["curl"]), statistics.median(got["ojai"])
        paired = [o / c for o, c in zip(got["ojai"], got["curl"], strict=False)]
        name = LINKS.get(rate, "") if rate else "unthrottled"
        print(f"{name:<12}{f'{rate:g}' if rate else '-':>6}  {spread(got['sent']):<18}"
              f"{spread(got['curl']):<18}{spread(got['ojai']):<18}"
              f"{ojai_rate / curl_rate:6.2f} ({min(paired):.2f}-{max(paired):.2f})  "
              f"{spread(got['hashed']):<24}"
              + (f"{got['others'][0]:5.0%}" if "others" in got else "    ?"))
        if rate and abs(curl_rate / rate - 1) > 0.03:
            notes.append(f"at {rate:g} MB/s curl got {curl_rate / rate:.1%} of the asked rate: "
                         "the machine did not keep that pace")
    for note in notes:
        print(note)
    curl_rate = statistics.median(table[0][1]["curl"])
    ojai_rate = statistics.median(table[0][1]["ojai"])
    hashed_rate = statistics.median(table[0][1]["hashed"])
    print(f"unthrottled: ratio ojai/curl {ojai_rate / curl_rate:.2f} (goal >= 0.90); "
          f"sha256 {hash_rate:.0f} MB/s (hashlib on this processor, one thread); "
          f"ojai/min(curl, sha256) {ojai_rate / min(curl_rate, hash_rate):.2f}; "
          f"ojai/(curl | tee | sha256sum) {ojai_rate / hashed_rate:.2f}")
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
