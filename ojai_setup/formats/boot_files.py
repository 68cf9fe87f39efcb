"""Small boot configuration files, parsed from text (pure; nothing here opens a file).

- ``/etc/kernel/install.conf`` and ``/etc/sysconfig/bootloader``: ``KEY=value`` lines, a value
  optionally in double or single quotes, ``#`` comments (kernel-install(8): install.conf
  ``layout=bls|uki|other``; openSUSE's ``LOADER_TYPE=grub2|grub2-efi|grub2-bls|systemd-boot``);
- systemd-boot's ``loader/loader.conf``: ``key value`` lines; ``default`` is a glob matched
  against the entry ids (the file names of ``loader/entries/*.conf``, loader.conf(5));
- Boot Loader Specification entries (``loader/entries/*.conf``): ``key value`` lines, the
  kernel parameters on ``options`` lines (several are joined, in order);
- Limine's ``limine.conf``: ``/Title`` lines open an entry, ``//`` a sub-entry, and
  ``cmdline:`` (or ``kernel_cmdline:``) holds the command line of the entry it sits in
  (Limine's CONFIG.md); ``default_entry:`` is 1-based in Limine >= 8;
- what dracut's ``lsinitrd -f A -f B IMAGE`` prints: for each file a line ``initramfs:/A``
  between its contents and rules of ``=`` (one ``-f``: the bare contents).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from typing import NamedTuple

from ojai_setup.formats.kernel_cmdline import check_edit, edit_regions, tokens_of


def parse_assignments(text: str) -> dict[str, str]:
    """``KEY=value`` lines (shell-like): the last assignment of each key, quotes removed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def parse_loader_conf(text: str) -> dict[str, str]:
    """systemd-boot's loader.conf: ``key value`` lines (the last of each key)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ") if " " in line else line.partition("\t")
        out[key.strip()] = value.strip()
    return out


def _version_key(text: str) -> list[tuple[int, int | str]]:
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-_+~]", text)]


def default_loader_entry(default: str | None, entry_ids: Sequence[str]) -> str | None:
    """The entry systemd-boot boots by default: the first (in its menu order, newest version
    first) matching loader.conf's ``default`` glob, else the first of the menu."""
    ordered = sorted(entry_ids, key=_version_key, reverse=True)
    if default and default != "@saved":
        matching = [e for e in ordered if fnmatch.fnmatchcase(e, default)
                    or fnmatch.fnmatchcase(e.removesuffix(".conf"), default)]
        return matching[0] if matching else None
    return ordered[0] if ordered else None


def entry_options_regions(text: str) -> list[tuple[int, int]]:
    """(start, end) of the value of every ``options`` line of a loader entry."""
    regions: list[tuple[int, int]] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        m = re.match(r"[ \t]*options([ \t]+|$)", body)
        if m:
            regions.append((pos + m.end(), pos + len(body)))
        pos += len(line)
    return regions


def entry_options(text: str) -> list[str]:
    """The kernel parameters of a loader entry (its ``options`` lines, joined)."""
    return [t for a, b in entry_options_regions(text) for t in tokens_of(text[a:b])]


def edit_entry_options(text: str, key: str, value: str, drop_keys: Sequence[str] = (), *,
                       source: str) -> str:
    """A loader entry with exactly one ``key=value`` on its ``options`` lines (by key; every
    other line and parameter kept). An entry without ``options`` gets one at its end."""
    regions = entry_options_regions(text)
    if not regions:
        sep = "" if not text or text.endswith("\n") else "\n"
        return text + sep + f"options {key}={value}\n"
    out = edit_regions(text, regions, key, value, drop_keys, source=source)
    check_edit(entry_options(out), key, value, drop_keys, source=source)
    return out


class LimineEntry(NamedTuple):
    title: str
    cmdline: list[str]


def parse_limine_conf(text: str) -> tuple[list[LimineEntry], int | None]:
    """The entries of a limine.conf that carry a kernel command line, in menu order, and the
    index among them of the one ``default_entry`` picks (1-based over every menu line, the
    ``/+OS`` directories included, as Limine counts; a directory picks its first entry)."""
    menu: list[tuple[str, list[str] | None]] = []  # every menu line, with its cmdline
    default: int | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("/"):
            menu.append((stripped.lstrip("/+").strip(), None))
            continue
        key, sep, value = stripped.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "default_entry" and not menu:
            default = int(value) if value.strip().isdigit() else None
        elif key in ("cmdline", "kernel_cmdline") and menu:
            menu[-1] = (menu[-1][0], tokens_of(value))
    entries = [LimineEntry(title=t, cmdline=c) for t, c in menu if c is not None]
    if not entries:
        return entries, None
    start = (default - 1) if default and 0 < default <= len(menu) else 0
    picked = next((t for t, c in menu[start:] if c is not None), None)
    index = next((i for i, e in enumerate(entries) if e.title == picked), 0)
    return entries, index


def efi_string(raw: bytes) -> str:
    """An EFI variable holding a string, as efivarfs shows it: 4 bytes of attributes, then
    UTF-16LE ending in a NUL (systemd-boot's LoaderInfo, LoaderEntrySelected)."""
    return raw[4:].decode("utf-16-le", errors="replace").split("\0", 1)[0].strip()


_LSINITRD_HEAD = re.compile(r"^initramfs:(/\S*)\n=+\n", re.M)
_LSINITRD_TAIL = re.compile(r"\n?=+\n*\Z")


def lsinitrd_files(stdout: str, paths: Sequence[str]) -> list[tuple[str, str]]:
    """The files of one ``lsinitrd -f P ... IMAGE`` run for ``paths`` (each with a leading
    ``/``), as ``(path, text)``: lsinitrd unpacks the image once for all of them and, for more
    than one, heads each with its name (dracut's lsinitrd.sh ``extract_files``). A file the
    image lacks comes out empty, and is left out."""
    if len(paths) == 1:
        return [(paths[0], stdout)] if stdout else []
    parts = _LSINITRD_HEAD.split(stdout)
    out = []
    for name, body in zip(parts[1::2], parts[2::2], strict=False):
        text = _LSINITRD_TAIL.sub("", body)
        if text:
            out.append((name, text + "\n"))
    wanted = set(paths)
    return [(name, text) for name, text in out if name in wanted]
