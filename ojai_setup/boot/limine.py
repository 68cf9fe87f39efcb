"""Limine with limine-entry-tool (CachyOS).

- Detected by ``limine.conf`` on ``/boot`` or an ESP, or ``/etc/default/limine``.
- Deciding files: ``KERNEL_CMDLINE[default]`` in ``/etc/limine-entry-tool.conf``, the drop-ins
  ``/etc/limine-entry-tool.d/*.conf`` and ``/etc/default/limine``, read as limine-entry-tool
  joins them (``formats/limine.py``); edited by key where the limit is written, else in
  ``/etc/default/limine`` when it replaces the drop-ins, else in ojai's own drop-in.
- Regeneration: ``limine-update``; generated state: ``limine.conf``'s default entry
  (``formats/boot_files.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ojai_setup.boot.base import (
    ESPS,
    REBOOT,
    Blocked,
    BootPath,
    Claim,
    Machine,
    Markers,
    Plan,
    Planned,
    Want,
    changes,
    read,
)
from ojai_setup.core.paths import TTM_MODULES
from ojai_setup.core.root import Root
from ojai_setup.formats.kernel_cmdline import CmdlineFormatError, expected_after
from ojai_setup.formats.kernel_params import cmdline_param, param_key, same_key
from ojai_setup.formats.limine import (
    DEFAULT_FILE,
    DROPIN_DIR,
    ENTRY_TOOL_CONF,
    OJAI_DROPIN,
    assignments,
    default_cmdline,
)
from ojai_setup.model.facts import BootEntry, BootLoader, LoaderKind

if TYPE_CHECKING:  # built only when a step plans (doctor never imports the actions)
    from ojai_setup.model.actions import RunCommand

LIMINE_DEFAULT = DEFAULT_FILE
#: where Limine looks for its configuration on a partition (CONFIG.md), under each mount
LIMINE_CONFS = ("/limine.conf", "/limine/limine.conf", "/EFI/limine/limine.conf",
                "/EFI/BOOT/limine.conf")
OJAI_LIMINE_TEXT = """\
# Written by ojai: the GPU memory limit (TTM pages) on the kernel command line of the default
# entries; limine-update writes it into limine.conf. `ojai rollback` removes it.
KERNEL_CMDLINE[default]+=" {param}"
"""


def _chain(root: Root) -> list[str]:
    """The files limine-entry-tool reads KERNEL_CMDLINE from, in its order."""
    chain = [ENTRY_TOOL_CONF] if root.exists(ENTRY_TOOL_CONF) else []
    chain += root.glob(f"{DROPIN_DIR}/*.conf")
    chain += [LIMINE_DEFAULT] if root.exists(LIMINE_DEFAULT) else []
    return chain


class Limine(BootPath):
    kind: LoaderKind = "limine"
    title = "Limine (limine-entry-tool)"
    edits = "KERNEL_CMDLINE[default] where it is set, else /etc/limine-entry-tool.d/99-ojai.conf"
    runs = "limine-update"

    def claim(self, m: Markers) -> Claim | None:
        if not (m.limine_conf or m.limine_default):
            return None
        seen = [*m.limine_conf] + ([LIMINE_DEFAULT] if m.limine_default else [])
        return Claim(self.kind, f"Limine: {', '.join(seen)}", LIMINE_DEFAULT)

    def hint(self, family: str) -> str:
        return "`sudo limine-update`"

    def configured(self, root: Root, loader: BootLoader) -> tuple[list[str], str] | None:
        tokens, _ = default_cmdline([(p, read(root, p) or "") for p in _chain(root)])
        where = next((t.path for t in reversed(tokens)
                      if any(same_key(param_key(t.text), f"{m}.pages_limit")
                             for m in TTM_MODULES)), LIMINE_DEFAULT)
        return [t.text for t in tokens], where

    def generated(self, root: Root, loader: BootLoader | None, bls: bool) -> BootEntry | None:
        from ojai_setup.formats.boot_files import parse_limine_conf

        for mount in ("/boot", *ESPS):
            for conf in LIMINE_CONFS:
                path = f"{mount}{conf}"
                if root.exists(path):
                    entries, index = parse_limine_conf(read(root, path) or "")
                    if index is None:
                        return None
                    e = entries[index]
                    return BootEntry(config=path, title=e.title, tokens=e.cmdline)
        return None

    def regenerate(self, machine: Machine, want: Want, loader: BootLoader,
                   gen: BootEntry) -> list[RunCommand] | None:
        from ojai_setup.model.actions import RunCommand

        if not machine.which("limine-update"):
            return None
        return [RunCommand(argv=("limine-update",), needs_root=True, needs_reboot=REBOOT,
                           reason="write the configured command line into limine.conf")]

    def plan(self, machine: Machine, want: Want, loader: BootLoader, reads: list[str]) -> Plan:
        """``KERNEL_CMDLINE[default]`` by key where it is written, else ojai's drop-in, then
        ``limine-update``."""
        from ojai_setup.model.actions import RunCommand, WriteFile

        chain = _chain(machine.root)
        reads += chain
        texts = {p: read(machine.root, p) or "" for p in chain}
        try:
            tokens, seen = default_cmdline(list(texts.items()))
        except CmdlineFormatError as exc:
            return Blocked(f"{exc} (no file was changed)")
        if not seen:
            return Blocked(
                f"Limine boots this machine, but no file sets KERNEL_CMDLINE[default] "
                f"({LIMINE_DEFAULT} and {DROPIN_DIR}/ are silent), so limine-entry-tool takes "
                "/etc/kernel/cmdline or /proc/cmdline, and a drop-in that appends would replace "
                f"them; put your command line with {want.param} into {LIMINE_DEFAULT} as "
                "KERNEL_CMDLINE[default]+=\"...\", then run `sudo limine-update`")
        names = [t.text for t in tokens]
        current = cmdline_param(names, want.key)
        hits = [t for t in tokens if same_key(param_key(t.text), want.key)]
        stale = [t for t in tokens if any(same_key(param_key(t.text), k) for k in want.drop)]
        if [t.text for t in hits] == [want.param] and not stale:
            return Planned([], {}, hits[0].path, current=current)
        edits: dict[str, list[tuple[int, int, str]]] = {}
        if hits:
            keep = hits[-1]
            edits.setdefault(keep.path, []).append((keep.start, keep.end, want.param))
            target, why = keep.path, f"it sets the {want.key} limine-entry-tool uses now"
        for t in [*hits[:-1], *stale]:
            text = texts[t.path]
            start = t.start
            while start > 0 and text[start - 1] in " \t":
                start -= 1
            edits.setdefault(t.path, []).append((start, t.end, ""))
        new_texts: dict[str, str] = {}
        for path, spans in edits.items():
            text = texts[path]
            for start, end, new in sorted(spans, reverse=True):
                text = text[:start] + new + text[end:]
            new_texts[path] = text
        if not hits:
            replacing = [a for p in chain for a in assignments(new_texts.get(p, texts[p]), p)
                         if a.key == "default" and not a.append]
            if replacing and replacing[-1].path == LIMINE_DEFAULT:
                # /etc/default/limine replaces what the drop-ins say: the limit goes there
                a = replacing[-1]
                text = new_texts.get(LIMINE_DEFAULT, texts[LIMINE_DEFAULT])
                new_texts[LIMINE_DEFAULT] = text[:a.end] + f" {want.param}" + text[a.end:]
                target, why = LIMINE_DEFAULT, ("it replaces the command line the drop-ins give "
                                               "(KERNEL_CMDLINE[default]=)")
            else:
                before_own = texts.get(OJAI_DROPIN)
                new_texts[OJAI_DROPIN] = (before_own or "") + OJAI_LIMINE_TEXT.format(
                    param=want.param)
                texts.setdefault(OJAI_DROPIN, before_own)  # type: ignore[arg-type]
                target, why = OJAI_DROPIN, (f"ojai's own drop-in: limine-entry-tool joins its "
                                            f"KERNEL_CMDLINE[default]+= with those of "
                                            f"{LIMINE_DEFAULT} and the other drop-ins")
        order = sorted(set(chain) | set(new_texts), key=lambda p: (p == LIMINE_DEFAULT,
                                                                   p != ENTRY_TOOL_CONF, p))
        after_tokens, _ = default_cmdline([(p, new_texts.get(p, texts.get(p) or ""))
                                           for p in order])
        after = [t.text for t in after_tokens]
        kept = [t for t in expected_after(names, want.key, str(want.pages), want.drop)
                if not same_key(param_key(t), want.key)]
        if ([t for t in after if same_key(param_key(t), want.key)] != [want.param]
                or [t for t in after if not same_key(param_key(t), want.key)] != kept):
            return Blocked(
                f"ojai could not plan an edit of the Limine settings that leaves exactly one "
                f"{want.param} and every other parameter as it is; edit {target} yourself "
                "(no file was changed)")
        if not machine.which("limine-update"):
            return Blocked(
                "limine-update (limine-entry-tool) is not installed, so nothing would write "
                "the new command line into limine.conf; install limine-entry-tool (CachyOS: "
                "limine-mkinitcpio-hook) and run ojai again")
        handler = RunCommand(argv=("limine-update",), needs_root=True,
                             reason="write the new command line into limine.conf's entries")
        actions = [WriteFile(path=p, before=texts.get(p), after=new_texts[p], needs_root=True,
                             needs_reboot=REBOOT, notify=("limine-update",),
                             reason=(f"set {want.param} ({want.gib} GiB for the GPU)"
                                     if p == target else "remove what contradicts the limit"))
                   for p in sorted(new_texts, key=lambda p: p == target)]
        return Planned(actions, {"limine-update": handler}, target,
                       detail=f" in {target} ({why})",
                       said=changes(names, after, "the Limine settings", want), current=current)


LIMINE = Limine()
