"""Save what ojai prints for every test machine, to compare two versions of the code byte for byte.

For each folder under ``tests/machines/`` (and each ``ojai doctor --example`` name) it saves the
stdout, stderr and exit code of:

- ``ojai doctor`` and ``ojai doctor --json``;
- ``ojai setup`` (the dry run) and ``ojai setup --json``;
- on a copy of the folder (never the folder itself): ``ojai setup --apply --yes``, then
  ``ojai rollback --yes``, and the copy's changed files afterwards (a listing with digests).

Every run gets the same options (``--llamacpp none --no-npu``: nothing reaches the internet)
and the same environment (no colour, no terminal, 100 columns, ``HOME`` in the run's folder).
The commit's tree is unpacked (``git archive``) into one fixed folder,
``/tmp/ojai-machine-outputs`` (a path's length changes where text wraps, the root's path goes
into the plan's fingerprint, and a checkout's file modes are journalled), and run from there
with its own machine folders, so that two commits differ only in what their code does; a lock
makes runs take turns. Masked, because they differ from one run to the next: the journal's id
(``20261205T200348Z-21daf5``: a time and a random part), dates and times (``2026-12-05 20:03``,
ISO timestamps), the progress bars' elapsed times on stderr (``0:00:01``) and the pid in ojai's
lock file. The copy's files are listed with their digests, ojai's own state files (journals,
state.json) whole. Nothing else is masked.

    python benchmarks/machine_outputs.py OUT_DIR [--commit REV]             # save (REV: HEAD)
    python benchmarks/machine_outputs.py OUT_DIR --compare BEFORE_DIR       # save, then diff
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import re
import shutil
import fcntl
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = ("ojai-fresh", "ojai-applied", "ojai-rebooted", "strix-halo-dkms")
OPTIONS = ["--llamacpp", "none", "--no-npu"]
#: the one folder every run works in: a path's length changes where text wraps, and the root's
#: path goes into the plan's fingerprint; a lock makes a second run wait for the first
WORK = Path("/tmp/ojai-machine-outputs")
LOCK = Path("/tmp/ojai-machine-outputs.lock")
HOME = WORK / "home"
COPY = WORK / "machine"
TREE = WORK / "tree"
MACHINES = TREE / "tests" / "machines"

MASKS = [
    (re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}"), "<journal-id>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"),
     "<time>"),
    (re.compile(r"\b\d+:\d{2}:\d{2}\b"), "<elapsed>"),
]


def mask(text: str) -> str:
    for pattern, token in MASKS:
        text = pattern.sub(token, text)
    return text


def ojai(args: list[str]) -> str:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OJAI_", "COLUMNS", "LINES", "TERM", "FORCE_COLOR"))}
    env["PYTHONPATH"] = str(TREE)
    env.update(NO_COLOR="1", TERM="dumb", COLUMNS="100", HOME=str(HOME), LC_ALL="C.UTF-8",
               XDG_STATE_HOME=str(HOME / ".local/state"), XDG_CONFIG_HOME=str(HOME / ".config"))
    run = subprocess.run([sys.executable, "-c", "from ojai_setup.entry import main; main()", *args], env=env,
                         capture_output=True, text=True, cwd=WORK, stdin=subprocess.DEVNULL)
    return (f"$ ojai {' '.join(args)}\n--- exit {run.returncode}\n--- stdout\n{run.stdout}"
            f"--- stderr\n{run.stderr}")


def tree(root: Path) -> str:
    """Every file under ``root`` with its digest (symlinks with their target); ojai's own state
    (journals, state.json, the lock) whole, masked, since it holds times and a pid."""
    blocks = []
    state = root / "var/lib/ojai"
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if path.is_symlink():
            blocks.append(f"{rel} -> {os.readlink(path)}")
        elif path.is_file() and path.parent.is_relative_to(state) and not path.is_relative_to(
                state / "backups"):
            text = path.read_text(errors="replace")
            if path.name == "lock":
                text = re.sub(r"^\d+$", "<pid>", text, flags=re.M)
            blocks.append(mask(f"{rel}:\n" + "".join(f"  {line}\n" for line in text.splitlines())))
        elif path.is_file():
            blocks.append(mask(f"{rel} {hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"))
        elif path.is_dir() and not any(path.iterdir()):
            blocks.append(mask(f"{rel}/ (empty)"))
    return "\n".join(sorted(blocks)) + "\n"


def save(out: Path, commit: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(WORK, ignore_errors=True)
    HOME.mkdir(parents=True)
    TREE.mkdir()
    os.umask(0o022)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(TREE)], input=archive, check=True)
    names = sorted(p.name for p in MACHINES.iterdir() if p.is_dir())
    for name in names:
        src = str(MACHINES / name)
        parts = [ojai(["doctor", "--root", src]), ojai(["doctor", "--root", src, "--json"]),
                 ojai(["setup", "--root", src, *OPTIONS]),
                 ojai(["setup", "--root", src, *OPTIONS, "--json"])]
        shutil.rmtree(COPY, ignore_errors=True)
        shutil.copytree(MACHINES / name, COPY, symlinks=True)
        parts.append(ojai(["setup", "--root", str(COPY), *OPTIONS, "--apply", "--yes"]))
        parts.append("--- the copy after apply\n" + tree(COPY))
        parts.append(ojai(["rollback", "--root", str(COPY), "--yes"]))
        parts.append("--- the copy after rollback\n" + tree(COPY))
        shutil.rmtree(COPY)
        (out / f"{name}.txt").write_text(mask("\n".join(parts)))
    for name in EXAMPLES:
        parts = [ojai(["doctor", "--example", name]), ojai(["doctor", "--example", name, "--json"]),
                 ojai(["setup", "--example", name, *OPTIONS])]
        (out / f"example-{name}.txt").write_text(mask("\n".join(parts)))
    shutil.rmtree(WORK, ignore_errors=True)


def compare(after: Path, before: Path) -> int:
    names = sorted({p.name for p in before.glob("*.txt")} | {p.name for p in after.glob("*.txt")})
    differ = 0
    for name in names:
        a = (before / name).read_text() if (before / name).exists() else ""
        b = (after / name).read_text() if (after / name).exists() else ""
        if a != b:
            differ += 1
            sys.stdout.writelines(difflib.unified_diff(a.splitlines(True), b.splitlines(True),
                                                       f"before/{name}", f"after/{name}"))
    print(f"{len(names)} files compared, {differ} differ")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--commit", default="HEAD", help="the commit to run (default HEAD)")
    parser.add_argument("--compare", type=Path, metavar="BEFORE")
    args = parser.parse_args()
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        save(args.out.resolve(), args.commit)
    return compare(args.out.resolve(), args.compare.resolve()) if args.compare else 0


if __name__ == "__main__":
    sys.exit(main())
