"""``ojai doctor --capture``: record what doctor read, as a replayable machine root, with every
identifier removed.

Every file doctor read is copied to its machine path and every command it ran is stored in the
capture layout of :mod:`ojai_setup.core.root`, inside a ``.tar.gz`` written owner-only (0600).
Unpacked, the archive is a root: ``ojai doctor --root <dir>`` gives the same report, with the
identifiers replaced.

What is removed (:class:`Scrubber`), in file contents, command outputs and entry names alike:

- serial numbers (``Serial Number: ...``, ``serial=...``) and the DMI files holding serials,
  asset tags and the product UUID (never copied);
- UUIDs of every kind (filesystem ``root=UUID=``/``resume=UUID=``/``PARTUUID=``, the boot id,
  GPU/CPU agent UUIDs of rocminfo): each becomes a made-up UUID, the same one wherever the
  original appeared, so that "the boot id changed since the apply" still reads the same;
- MAC addresses and IPv4/IPv6 addresses other than loopback (``ip=``, ``BOOTIF=``,
  ``netconsole=``...), mapped the same way into documentation ranges (02:00:00:..., 192.0.2.x,
  2001:db8::x); a dotted number on a line about a version, firmware, driver or build is a
  version, not an address, and is kept;
- user and host names: this host's (``$USER``, ``$SUDO_USER``, ``$LOGNAME``, the login name,
  the host name) and the captured machine's (``/etc/hostname``, ``/proc/sys/kernel/hostname``,
  the ``Hostname`` of ``xrt-smi examine``, human users of ``/etc/passwd``, the folders of
  ``/home``), replaced by ``user``/``host`` (numbered when there are several);
- tokens: the value of every environment variable named like a secret (``*TOKEN*``, ``*KEY*``,
  ``*SECRET*``, ``*PASSWORD*``...) of this process and of the captured machine, wherever it
  appears, and anything shaped like a Hugging Face, GitHub or OpenAI-style token; the captured
  environment keeps only the variables doctor reads (:data:`KEPT_ENV`);
- machine ids (``/etc/machine-id``): never copied.
"""

from __future__ import annotations

import getpass
import io
import ipaddress
import os
import re
import socket
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ojai_setup.core.paths import ENVIRON_CAPTURE, PRIVATE_FILE_MODE, SERVICE_USER
from ojai_setup.core.root import COMMANDS_DIR, CommandResult, Root, command_key

#: environment variables kept in a capture (never tokens or other secrets)
KEPT_ENV = ("HSA_OVERRIDE_GFX_VERSION", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
            "HSA_ENABLE_SDMA")
#: files never copied even if read (serial numbers, asset tags, machine ids)
SKIPPED = re.compile(r"/(product_serial|board_serial|chassis_serial|product_uuid|"
                     r"board_asset_tag|chassis_asset_tag|machine-id)$")
#: environment variable names whose values are secrets
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|"
                         r"PRIVATE_?KEY|AUTH|COOKIE|SESSION", re.I)
#: names never treated as a person's or a machine's (replacing them would break the replay)
NOT_IDENTIFIERS = {"root", "nobody", "user", "host", "localhost", "localdomain", "ojai",
                   SERVICE_USER, "lemonade", "debian", "ubuntu", "fedora", "arch"}

_TOKEN_SHAPES = re.compile(r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|"
                           r"github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{20,}|"
                           r"glpat-[A-Za-z0-9_-]{20,})")
_AGENT_UUID = re.compile(r"(Uuid:\s+)(GPU|CPU|AIE)-([0-9A-Fa-f]{4,})")
_UUID = re.compile(r"(?<![0-9A-Fa-f-])[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-"
                   r"[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}(?![0-9A-Fa-f-])")
_TAGGED_UUID = re.compile(r"\b((?:PART)?UUID=)([^\s\"',]+)")
_SERIAL = re.compile(r"(?i)(\bserial(?:[ _-]?(?:number|no|num))?\b\s*[:=]\s*)([^\s\"',]+)")
_MAC = re.compile(r"(?<![0-9A-Fa-f:-])(?:[0-9A-Fa-f]{2}[:-]){5,}[0-9A-Fa-f]{2}(?![0-9A-Fa-f:-])")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_VERSION_LINE = re.compile(r"(?i)version|firmware|\bfw\b|driver|bios|build|release|\bv\d")
#: ``UUID=xxx`` in a comment, a netmask: not identifiers
_PLACEHOLDER = re.compile(r"^(?:x+|X+|\.\.\.|<[^>]*>)$")
_HOSTNAME_FIELD = re.compile(r"(?im)^\s*host\s*name\s*[:=]\s*(\S+)")


@dataclass
class Scrubber:
    """Replaces identifiers in text; the same original always gets the same stand-in.

    ``replaced`` maps every original it met to its stand-in (what a test compares with).
    """

    users: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    secrets: set[str] = field(default_factory=set)
    replaced: dict[str, str] = field(default_factory=dict)
    _counts: dict[str, int] = field(default_factory=dict)

    # -- stand-ins --------------------------------------------------------------------------
    def _stand_in(self, kind: str, original: str) -> str:
        if original in self.replaced:
            return self.replaced[original]
        if original in self.replaced.values():
            return original  # already a stand-in
        n = self._counts[kind] = self._counts.get(kind, 0) + 1
        if kind == "uuid":
            value = f"00000000-0000-4000-8000-{n:012x}"
        elif kind == "id":
            value = f"REMOVED{n}"
        elif kind == "mac":
            groups = original.count(":") + original.count("-") + 1
            sep = "-" if "-" in original else ":"
            value = sep.join(["02"] + ["00"] * (groups - 2) + [f"{n:02x}"])
        elif kind == "ipv4":
            value = f"192.0.2.{n}"
        elif kind == "ipv6":
            value = f"2001:db8::{n:x}"
        elif kind in ("user", "host"):
            value = kind if n == 1 else f"{kind}{n}"
        else:
            value = "REMOVED"
        self.replaced[original] = value
        return value

    def _fixed(self, original: str, value: str) -> str:
        self.replaced.setdefault(original, value)
        return value

    # -- the rules ---------------------------------------------------------------------------
    def text(self, text: str) -> str:
        """``text`` with every identifier replaced."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, self._fixed(secret, "REMOVED-TOKEN"))
        text = _TOKEN_SHAPES.sub(lambda m: self._fixed(m.group(0), "REMOVED-TOKEN"), text)
        text = _AGENT_UUID.sub(lambda m: f"{m.group(1)}{m.group(2)}-"
                               + self._fixed(m.group(3), "XX"), text)
        text = _UUID.sub(lambda m: self._stand_in("uuid", m.group(0)), text)
        text = _TAGGED_UUID.sub(lambda m: m.group(0) if _PLACEHOLDER.match(m.group(2))
                                else m.group(1) + self._stand_in("id", m.group(2)), text)
        text = _SERIAL.sub(lambda m: m.group(1) + self._fixed(m.group(2), "REMOVED"), text)
        text = _MAC.sub(lambda m: self._stand_in("mac", m.group(0)), text)
        text = "".join(self._addresses(line) for line in text.splitlines(keepends=True))
        for kind, names in (("host", self.hosts), ("user", self.users)):
            for name in sorted(names, key=len, reverse=True):
                pattern = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")
                if pattern.search(text):
                    text = pattern.sub(self._stand_in(kind, name), text)
        return text

    def _addresses(self, line: str) -> str:
        if _VERSION_LINE.search(line):
            return line

        def v4(m: re.Match[str]) -> str:
            try:
                address = ipaddress.IPv4Address(m.group(0))
            except ValueError:
                return m.group(0)
            if (address.is_loopback or address.is_unspecified or address.is_multicast
                    or m.group(0).startswith(("192.0.2.", "255."))):
                return m.group(0)
            return self._stand_in("ipv4", m.group(0))

        def v6(m: re.Match[str]) -> str:
            try:
                address = ipaddress.IPv6Address(m.group(0))
            except ValueError:
                return m.group(0)
            if address.is_loopback or address.is_unspecified or m.group(0).startswith("2001:db8:"):
                return m.group(0)
            return self._stand_in("ipv6", m.group(0))

        return _IPV6.sub(v6, _IPV4.sub(v4, line))

    def path(self, machine_path: str) -> str:
        """A machine path with the names in it replaced (``/home/alice`` -> ``/home/user``)."""
        return self.text(machine_path)


def _usable(name: str) -> bool:
    return len(name) >= 2 and name.lower() not in NOT_IDENTIFIERS and not name.isdigit()


def _read(root: Root, machine_path: str) -> str:
    try:
        return root.resolve(machine_path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def scrubber_for(root: Root, environ: dict[str, str]) -> Scrubber:
    """The identifiers of this host and of the machine at ``root``, gathered before anything
    is copied."""
    users: set[str] = set()
    hosts: set[str] = set()
    try:
        users.add(getpass.getuser())
    except (KeyError, OSError):
        pass
    for env in (os.environ, environ):
        for var in ("SUDO_USER", "USER", "LOGNAME"):
            if env.get(var):
                users.add(env[var])
        for var in ("HOSTNAME",):
            if env.get(var):
                hosts.add(env[var])
    hosts.add(socket.gethostname())
    for path in ("/etc/hostname", "/proc/sys/kernel/hostname"):
        hosts.update(_read(root, path).split())
    for result in root.commands:
        hosts.update(_HOSTNAME_FIELD.findall(result.stdout))
    for line in _read(root, "/etc/passwd").splitlines():
        fields = line.split(":")
        if len(fields) >= 7 and fields[2].isdigit() and 1000 <= int(fields[2]) < 60000:
            users.add(fields[0])
    home = root.resolve("/home")
    if home.is_dir():
        try:
            users.update(p.name for p in home.iterdir() if p.is_dir())
        except OSError:
            pass
    for name in list(hosts):  # the short name of a fully qualified one too
        hosts.add(name.split(".")[0])
    secrets = {value for env in (os.environ, environ) for name, value in env.items()
               if SECRET_NAME.search(name) and len(value) >= 6}
    return Scrubber(users={u for u in users if _usable(u)},
                    hosts={h for h in hosts if _usable(h)}, secrets=secrets)


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(mtime)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


@dataclass
class CaptureResult:
    entries: int
    scrubber: Scrubber


def write_capture(root: Root, environ: dict[str, str], dest: Path) -> CaptureResult:
    """Write what ``root`` recorded (reads and commands), scrubbed, into ``dest`` (mode 0600)."""
    scrubber = scrubber_for(root, environ)
    now = time.time()
    entries: dict[str, bytes] = {}

    def put(machine_path: str, data: bytes) -> None:
        entries[scrubber.path(machine_path).lstrip("/")] = data

    for machine_path in dict.fromkeys(root.reads + root.found):
        if SKIPPED.search(machine_path):
            continue
        real = root.resolve(machine_path)
        if real.is_dir():  # found by a glob: its presence is the fact
            put(machine_path.rstrip("/") + "/.present", b"")
        elif real.is_file():
            try:
                data = real.read_bytes()
            except OSError:
                continue
            put(machine_path, scrubber.text(data.decode("utf-8", "replace")).encode())
    for d in sorted({p for p in root.glob("/dev/accel/accel*")}):
        put(d, b"")  # a device node is stood in for by an empty file
    for m in ("/sys/module/amdgpu", "/sys/module/amdttm", "/sys/module/amd_ttm"):
        if root.exists(m):
            put(m + "/.present", b"")
    result: CommandResult
    for result in root.commands:
        if result.source == "missing":
            continue  # absence is replayed as "not installed"
        argv = tuple(scrubber.text(a) for a in result.argv)
        base = f"{COMMANDS_DIR}/{command_key(argv)}"
        stdout = result.stdout
        if argv == ("dmesg",):  # only the GPU and NPU lines doctor reads: the rest (disks,
            from ojai_setup.facts.packages import kernel_log_lines  # network) stays home

            stdout = "".join(line + "\n" for line in kernel_log_lines(stdout))
        entries[f"{base}/stdout"] = scrubber.text(stdout).encode()
        if result.stderr:
            entries[f"{base}/stderr"] = scrubber.text(result.stderr).encode()
        entries[f"{base}/exit_code"] = f"{result.exit_code}\n".encode()
    kept = {k: scrubber.text(environ[k]) for k in KEPT_ENV if k in environ}
    entries[ENVIRON_CAPTURE.lstrip("/")] = "".join(f"{k}={v}\n" for k, v in kept.items()).encode()
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # a bug report is private until its owner posts it
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for name in sorted(entries):
                _add(tar, name, entries[name], now)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return CaptureResult(len(entries), scrubber)
