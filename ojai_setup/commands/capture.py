"""``ojai doctor --capture``: record what doctor read, as a replayable machine root.

Every file doctor read is copied to its machine path and every command it ran is stored in the
capture layout of :mod:`ojai_setup.core.root`, inside a ``.tar.gz``. Unpacked, the archive is a
root: ``ojai doctor --root <dir>`` gives the same report. Serial numbers, UUIDs, user names and
host names are replaced, and only the environment variables doctor looks at are kept.
"""

from __future__ import annotations

import getpass
import io
import os
import re
import socket
import tarfile
import time
from pathlib import Path

from ojai_setup.core.paths import ENVIRON_CAPTURE
from ojai_setup.core.root import COMMANDS_DIR, CommandResult, Root, command_key

#: environment variables kept in a capture (never tokens or other secrets)
KEPT_ENV = ("HSA_OVERRIDE_GFX_VERSION", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
            "HSA_ENABLE_SDMA")
#: files never copied even if read (serial numbers and the like)
SKIPPED = re.compile(r"/(product_serial|board_serial|chassis_serial|product_uuid)$")


def _scrubbers() -> list[tuple[re.Pattern[str], str]]:
    rules: list[tuple[re.Pattern[str], str]] = [
        (re.compile(r"(Uuid:\s+)(GPU|CPU|AIE)-[0-9A-Fa-f]{4,}"), r"\1\2-XX"),
        (re.compile(r"(?i)(serial(?: number)?\s*[:=]\s*)\S+"), r"\1REMOVED"),
    ]
    names = set()
    try:
        names.add(getpass.getuser())
    except (KeyError, OSError):
        pass
    for var in ("SUDO_USER", "USER", "LOGNAME"):
        if os.environ.get(var):
            names.add(os.environ[var])
    names.discard("root")
    for name in sorted(names, key=len, reverse=True):
        if len(name) >= 2:
            rules.append((re.compile(rf"\b{re.escape(name)}\b"), "user"))
    host = socket.gethostname().split(".")[0]
    if len(host) >= 2 and host not in ("localhost",):
        rules.append((re.compile(rf"\b{re.escape(host)}\b"), "host"))
    return rules


def scrub(text: str, rules: list[tuple[re.Pattern[str], str]]) -> str:
    for pattern, repl in rules:
        text = pattern.sub(repl, text)
    return text


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(mtime)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def write_capture(root: Root, environ: dict[str, str], dest: Path) -> int:
    """Write what ``root`` recorded (reads and commands) into ``dest``; returns entries written."""
    rules = _scrubbers()
    now = time.time()
    entries: dict[str, bytes] = {}
    for machine_path in dict.fromkeys(root.reads + root.found):
        if SKIPPED.search(machine_path):
            continue
        real = root.resolve(machine_path)
        if real.is_dir():  # found by a glob: its presence is the fact
            entries.setdefault(machine_path.lstrip("/") + "/.present", b"")
        elif real.is_file():
            try:
                data = real.read_bytes()
            except OSError:
                continue
            entries[machine_path.lstrip("/")] = scrub(data.decode("utf-8", "replace"), rules).encode()
    for d in sorted({p for p in root.glob("/dev/accel/accel*")}):
        entries[d.lstrip("/")] = b""  # a device node is stood in for by an empty file
    for m in ("/sys/module/amdgpu", "/sys/module/amdttm"):
        if root.exists(m):
            entries.setdefault(m.lstrip("/") + "/.present", b"")
    result: CommandResult
    for result in root.commands:
        if result.source == "missing":
            continue  # absence is replayed as "not installed"
        base = f"{COMMANDS_DIR}/{command_key(result.argv)}"
        entries[f"{base}/stdout"] = scrub(result.stdout, rules).encode()
        if result.stderr:
            entries[f"{base}/stderr"] = scrub(result.stderr, rules).encode()
        entries[f"{base}/exit_code"] = f"{result.exit_code}\n".encode()
    kept = {k: environ[k] for k in KEPT_ENV if k in environ}
    entries[ENVIRON_CAPTURE.lstrip("/")] = "".join(f"{k}={v}\n" for k, v in kept.items()).encode()
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".part")
    with tarfile.open(tmp, "w:gz") as tar:
        for name in sorted(entries):
            _add(tar, name, entries[name], now)
    os.replace(tmp, dest)
    return len(entries)
