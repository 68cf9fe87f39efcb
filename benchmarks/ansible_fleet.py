"""Wall time of the fleet-wide review: `ansible-playbook --check` over 5 local hosts against
5 sequential `ojai setup` dry runs of the same machines.

    python benchmarks/ansible_fleet.py [--runs 3] [--forks 5]

The collection under ansible/ is built and installed with ansible-galaxy into a temporary
folder; the 5 hosts are copies of test machines (ojai-fresh twice, strix-halo-dkms,
ojai-applied, ojai-rebooted), reached with the local connection and the module's root option.
Both sides run `ojai setup --json --llamacpp none` once per host; Ansible adds its own start,
module transfer and forks. Prints the median (min, max) of N runs of each, and their ratio.
The first run of each is printed apart. Needs ansible-core (a test extra).
"""

from __future__ import annotations

import argparse
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
MACHINES = REPO / "tests" / "machines"
BIN = Path(sys.executable).parent
HOSTS = {"fresh1": "ojai-fresh", "fresh2": "ojai-fresh", "strix": "strix-halo-dkms",
         "applied": "ojai-applied", "rebooted": "ojai-rebooted"}
PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: ojai setup
      ojai.ojai.setup:
        executable: "{{ ojai_executable }}"
        root: "{{ ojai_root }}"
        llamacpp: none
"""


def timed(argv_list: list[list[str]], env: dict, ok_codes: tuple[int, ...]) -> float:
    start = time.perf_counter()
    for argv in argv_list:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env)
        if proc.returncode not in ok_codes:
            sys.exit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-2000:]}"
                     f"\n{proc.stderr[-2000:]}")
    return time.perf_counter() - start


def show(name: str, times: list[float]) -> float:
    med = statistics.median(times)
    print(f"{name:<52} median {med:6.2f} s  (min {min(times):.2f}, max {max(times):.2f})")
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--forks", type=int, default=5)
    args = ap.parse_args()
    ojai = str(BIN / "ojai")
    with tempfile.TemporaryDirectory(prefix="ojai-ansible-bench-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "ANSIBLE_HOME": str(work / "home"),
               "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
               "ANSIBLE_REMOTE_TEMP": str(work / "ansible-remote-tmp"), "ANSIBLE_NOCOLOR": "1"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        galaxy = str(BIN / "ansible-galaxy")
        subprocess.run([galaxy, "collection", "build", str(REPO / "ansible"), "--output-path",
                        str(work)], check=True, capture_output=True, env=env)
        subprocess.run([galaxy, "collection", "install", str(work / "ojai-ojai-0.1.0.tar.gz"),
                        "-p", str(work / "collections")], check=True, capture_output=True, env=env)
        env["ANSIBLE_COLLECTIONS_PATH"] = str(work / "collections")
        roots = {}
        for host, name in HOSTS.items():
            roots[host] = work / "machines" / host
            shutil.copytree(MACHINES / name, roots[host], symlinks=True)
        inv = {"all": {"vars": {"ansible_connection": "local",
                                "ansible_python_interpreter": sys.executable,
                                "ojai_executable": ojai},
                       "hosts": {h: {"ojai_root": str(r)} for h, r in roots.items()}}}
        (work / "inventory.json").write_text(json.dumps(inv))
        (work / "play.yml").write_text(PLAY)

        direct = [[ojai, "setup", "--root", str(r), "--json", "--llamacpp", "none"]
                  for r in roots.values()]
        playbook = [[str(BIN / "ansible-playbook"), "-i", str(work / "inventory.json"),
                     "--check", "--forks", str(args.forks), str(work / "play.yml")]]
        # first runs (fresh Ansible home and temp folders; ojai's bytecode cache as installed)
        first_ojai = timed(direct, env, (0, 2))
        first_ansible = timed(playbook, env, (0,))
        ojai_times, ansible_times = [], []
        for _ in range(args.runs):
            ojai_times.append(timed(direct, env, (0, 2)))
            ansible_times.append(timed(playbook, env, (0,)))
    print(f"{len(HOSTS)} hosts, {args.runs} runs each, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"first run: ojai {first_ojai:.2f} s, ansible-playbook {first_ansible:.2f} s")
    a = show("5 sequential `ojai setup --json` dry runs", ojai_times)
    b = show(f"`ansible-playbook --check` over 5 hosts (forks {args.forks})", ansible_times)
    print(f"ratio (ansible / ojai): {b / a:.2f}x")


if __name__ == "__main__":
    main()
