"""The *generated* boot configuration: the default entry of ``grub.cfg`` or of BLS entries.

Pure functions on text. ``grub-mkconfig`` writes one ``menuentry`` per kernel (the first is
the default with ``GRUB_DEFAULT=0``) and a ``submenu`` of the others; each entry's ``linux``
line carries ``GRUB_CMDLINE_LINUX GRUB_CMDLINE_LINUX_DEFAULT`` after the kernel path and the
root device. Which entry boots is ``set default=...`` (a position such as ``0`` or ``1>2``, a
title or an ``$menuentry_id_option`` id, or ``${saved_entry}`` from ``grubenv``);
``next_entry`` in grubenv wins once. On Fedora/RHEL (``GRUB_ENABLE_BLSCFG=true``) the entries
are ``/boot/loader/entries/*.conf`` files whose ``options`` may name ``$kernelopts`` from
grubenv.

Words are split as GRUB's script reads them: whitespace separates, ``'...'`` is literal,
``"..."`` and backslash escapes are undone.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import NamedTuple


class GrubCfgError(ValueError):
    """The generated configuration cannot be understood; the message says where."""


def split_words(line: str) -> list[str]:
    """A line of GRUB script as words (quotes and escapes undone; a ``#`` word ends it)."""
    words: list[str] = []
    cur: list[str] = []
    started = False
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c in " \t":
            if started:
                words.append("".join(cur))
                cur, started = [], False
            i += 1
        elif c == "#" and not started:
            break
        elif c == "'":
            end = line.find("'", i + 1)
            if end < 0:
                raise GrubCfgError(f"unclosed ' in {line!r}")
            cur.append(line[i + 1:end])
            started, i = True, end + 1
        elif c == '"':
            i += 1
            while i < n and line[i] != '"':
                if line[i] == "\\" and i + 1 < n and line[i + 1] in '$"\\':
                    i += 1
                cur.append(line[i])
                i += 1
            if i >= n:
                raise GrubCfgError(f'unclosed " in {line!r}')
            started, i = True, i + 1
        elif c == "\\" and i + 1 < n:
            cur.append(line[i + 1])
            started, i = True, i + 2
        else:
            cur.append(c)
            started, i = True, i + 1
    if started:
        words.append("".join(cur))
    return words


class MenuEntry(NamedTuple):
    """A ``menuentry`` (``children`` empty) or a ``submenu``; the parser fills its lists."""

    title: str
    id: str | None
    linux: list[str]  # kernel path then its parameters
    initrd: list[str]
    children: list[MenuEntry]
    submenu: bool = False

    @property
    def kernel(self) -> str | None:
        return self.linux[0] if self.linux else None

    @property
    def args(self) -> list[str]:
        return self.linux[1:]


class GrubCfg(NamedTuple):
    entries: list[MenuEntry]
    defaults: list[str]  # every ``set default=`` value, in order


def _entry_head(words: list[str]) -> MenuEntry:
    kind = words[0]
    title = next((w for w in words[1:] if not w.startswith("-") and w != "{"), "")
    ident = None
    for k, w in enumerate(words):
        if w in ("$menuentry_id_option", "--id") and k + 1 < len(words):
            ident = words[k + 1]
    return MenuEntry(title=title, id=ident, linux=[], initrd=[], children=[],
                     submenu=kind == "submenu")


def parse_grub_cfg(text: str) -> GrubCfg:
    """Menu entries (submenus with their children) and ``set default=`` values."""
    top: list[MenuEntry] = []
    stack: list[MenuEntry] = []
    defaults: list[str] = []
    depth_other = 0  # braces of if/function blocks are lines, not braces: only count ours
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = split_words(line)
        if not words:
            continue
        head = words[0]
        if head in ("menuentry", "submenu") and words[-1] == "{":
            entry = _entry_head(words)
            (stack[-1].children if stack else top).append(entry)
            stack.append(entry)
        elif head == "}" and stack and depth_other == 0:
            stack.pop()
        elif head == "function" or (words[-1] == "{" and head not in ("menuentry", "submenu")):
            depth_other += 1
        elif head == "}" and depth_other:
            depth_other -= 1
        elif stack and not stack[-1].submenu and head in ("linux", "linux16", "linuxefi"):
            stack[-1].linux[:] = words[1:]
        elif stack and not stack[-1].submenu and head in ("initrd", "initrd16", "initrdefi"):
            stack[-1].initrd[:] = words[1:]
        elif head == "set" and len(words) > 1 and words[1].startswith("default="):
            defaults.append(words[1][len("default="):])
    return GrubCfg(entries=top, defaults=defaults)


def parse_grubenv(text: str) -> dict[str, str]:
    """``grubenv``: ``name=value`` lines, padded with ``#``."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#") or "=" not in line:
            continue
        name, value = line.split("=", 1)
        env[name] = value
    return env


def _pick(entries: list[MenuEntry], part: str) -> MenuEntry | None:
    if re.fullmatch(r"\d+", part):
        k = int(part)
        return entries[k] if k < len(entries) else None
    for e in entries:
        if part in (e.title, e.id):
            return e
    return None


def default_entry(cfg: GrubCfg, env: dict[str, str] | None = None) -> MenuEntry | None:
    """The entry GRUB boots without a key pressed (falls back to the first, as GRUB does)."""
    env = env or {}
    value = "0"
    chosen = [d for d in cfg.defaults if d != "${next_entry}"]
    if chosen:
        value = chosen[-1]
    if env.get("next_entry") and "${next_entry}" in cfg.defaults:
        value = env["next_entry"]
    value = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), value) or "0"
    level = cfg.entries
    entry: MenuEntry | None = None
    for part in value.split(">"):
        entry = _pick(level, part)
        if entry is None:
            break
        level = entry.children
    if entry is None or entry.submenu:
        entry = next((e for e in cfg.entries if not e.submenu), None)
    return entry


def kernel_release(kernel_path: str | None) -> str | None:
    """``/boot/vmlinuz-6.1.0-28-amd64`` -> ``6.1.0-28-amd64``."""
    if not kernel_path:
        return None
    name = PurePosixPath(kernel_path).name
    for prefix in ("vmlinuz-", "vmlinux-", "kernel-", "bzImage-"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return None


class BlsEntry(NamedTuple):
    name: str  # file name without .conf (the id grubenv's saved_entry names)
    title: str
    version: str
    linux: str | None
    initrd: list[str]
    options: list[str]


def parse_bls_entry(name: str, text: str, env: dict[str, str] | None = None) -> BlsEntry:
    """One ``/boot/loader/entries/NAME.conf``; ``$var`` in options expands from grubenv."""
    env = env or {}
    title = version = ""
    linux: str | None = None
    initrd: list[str] = []
    options: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        value = value.strip()
        if key == "title":
            title = value
        elif key == "version":
            version = value
        elif key == "linux":
            linux = value
        elif key == "initrd":
            initrd.extend(value.split())
        elif key == "options":
            expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), value)
            options.extend(split_words(expanded))
    return BlsEntry(name=name, title=title, version=version, linux=linux, initrd=initrd,
                    options=options)


def _version_key(text: str) -> list[tuple[int, int | str]]:
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-_+~]", text)]


def default_bls_entry(entries: list[BlsEntry], env: dict[str, str] | None = None) -> BlsEntry | None:
    """grubenv's ``saved_entry`` when it names one, else the newest version (GRUB's sort)."""
    env = env or {}
    saved = env.get("saved_entry")
    for e in entries:
        if saved and e.name == saved:
            return e
    ordered = sorted(entries, key=lambda e: _version_key(e.version or e.name), reverse=True)
    return ordered[0] if ordered else None
