"""The OJAI box turned into Debian unstable with Debian's own llama.cpp installed: a copy of a test
machine given the files ``apt-get install llama.cpp-tools`` really wrote in the sid chroot
(tests/data/captures/debian-sid: ``/etc/os-release``, the dpkg status records, the package's file
list, ``llama-server --version`` and ``--help``), and for ``hip`` / ``vulkan`` the record of
``libggml0-backend-hip`` / ``-vulkan`` 0.27.0-1 as Debian's archive lists it, marked installed."""

from __future__ import annotations

from pathlib import Path

from ojai_setup.core.root import COMMANDS_DIR, command_key

SID = Path(__file__).resolve().parents[1] / "data" / "captures" / "debian-sid"


def debian_sid_box(root: Path, *, hip: bool = False, vulkan: bool = False) -> Path:
    (root / "etc/os-release").write_text((SID / "os-release").read_text())
    status = (SID / "llama.cpp-tools-status.txt").read_text()
    for wanted, name in ((hip, "hip"), (vulkan, "vulkan")):
        if wanted:
            record = (SID / f"apt-cache-show-libggml0-backend-{name}.txt").read_text().strip("\n")
            lines = record.splitlines()
            lines.insert(1, "Status: install ok installed")
            status += "\n" + "\n".join(lines) + "\n"
    dpkg = root / "var/lib/dpkg"
    (dpkg / "info").mkdir(parents=True, exist_ok=True)
    (dpkg / "status").write_text(status)
    (dpkg / "info/llama.cpp-tools.list").write_text((SID / "llama.cpp-tools.list").read_text())
    server = root / "usr/bin/llama-server"
    server.parent.mkdir(parents=True, exist_ok=True)
    server.write_text("")
    server.chmod(0o755)
    for args, name, stream in ((["--version"], "llama-server-version.txt", "stderr"),
                               (["--help"], "llama-server-help.txt", "stdout")):
        folder = root / COMMANDS_DIR / command_key(["llama-server", *args])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / stream).write_text((SID / name).read_text())
    return root
