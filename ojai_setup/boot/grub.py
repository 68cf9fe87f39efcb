"""GRUB (Debian, Ubuntu, Arch, openSUSE) and GRUB with BLS entries (Fedora, RHEL).

- Detected by ``BOOT_IMAGE=`` on ``/proc/cmdline`` (GRUB's ``linux`` command always passes
  it) with ``/etc/default/grub`` and ``grub.cfg`` (:func:`evidence`); ``GRUB_ENABLE_BLSCFG=true``
  makes it ``grub-bls``.
- Deciding file: ``/etc/default/grub`` and its drop-ins in ``/etc/default/grub.d``, as
  grub-mkconfig sources them; configured state: ``facts.grub`` (bash sources the chain,
  ``facts/grub_env.py``), edited by key (:mod:`ojai_setup.boot.grub_dropins`, the file formats in
  ``formats/grub.py``), checked by bash before it is written (``apply/validate.py``).
- Regeneration: ``update-grub`` or the distribution's tool (``formats/grub.py:
  regenerate_commands``); generated state: the default entry of ``grub.cfg`` (``grubenv``'s
  saved entry) or of the BLS entries (:func:`read_generated`, ``formats/grub_cfg.py``).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from ojai_setup.boot.base import (
    REBOOT,
    BootPath,
    Blocked,
    Machine,
    Markers,
    Plan,
    Planned,
    Want,
    check,
    read,
)
from ojai_setup.boot.grub_dropins import plan_cmdline_edit
from ojai_setup.core.paths import GRUB_DEFAULT, OJAI_GRUB_DROPIN
from ojai_setup.core.root import Root
from ojai_setup.formats.grub import (
    GrubEditError,
    bls_enabled,
    choose_cmdline_var,
    get_kernel_param,
    regenerate_commands,
)
from ojai_setup.formats.grub_cfg import (
    GrubCfgError,
    default_bls_entry,
    default_entry,
    kernel_release,
    parse_bls_entry,
    parse_grub_cfg,
    parse_grubenv,
)
from ojai_setup.formats.kernel_params import cmdline_param, expected_others, param_key, same_key
from ojai_setup.model.facts import BootEntry, BootLoader, Facts, LoaderKind

if TYPE_CHECKING:  # built only when a step plans (doctor never imports the actions)
    from ojai_setup.model.actions import RunCommand

GRUB_CFGS = ("/boot/grub/grub.cfg", "/boot/grub2/grub.cfg")
BLS_DIR = "/boot/loader/entries"


def evidence(m: Markers) -> tuple[LoaderKind, list[str]]:
    """GRUB's kind on this machine (``grub-bls`` with BLS entries) and the files that show it."""
    grub_why = [f"{GRUB_DEFAULT} exists" + (" (GRUB_ENABLE_BLSCFG=true: BLS entries)"
                                            if m.grub_bls else "")] if m.grub_default else []
    if m.grub_cfg:
        grub_why.append(f"{m.grub_cfg} exists")
    kind: LoaderKind = "grub-bls" if m.grub_bls else "grub"
    return kind, grub_why


def _boot_path(root: Root, path: str | None) -> str | None:
    """A path as GRUB names it (relative to the partition holding it) on the machine."""
    if not path:
        return None
    for candidate in (path, "/boot" + path if not path.startswith("/boot/") else path):
        if root.exists(candidate):
            return candidate
    return path


def read_generated(root: Root, bls: bool) -> BootEntry | None:
    """The default entry of grub.cfg (as grubenv saves it), or of the BLS entries."""
    cfg_path = next((p for p in GRUB_CFGS if root.exists(p)), None)
    env_text = read(root, str(PurePosixPath(cfg_path or GRUB_CFGS[0]).parent / "grubenv"))
    env = parse_grubenv(env_text) if env_text else {}
    bls_files = root.glob(f"{BLS_DIR}/*.conf")
    if bls and bls_files:
        entries = [parse_bls_entry(PurePosixPath(p).stem, read(root, p) or "", env) for p in bls_files]
        e = default_bls_entry(entries, env)
        if e is None:
            return None
        return BootEntry(config=f"{BLS_DIR}/{e.name}.conf", title=e.title, kernel=e.linux,
                         release=e.version or kernel_release(e.linux),
                         initrd=_boot_path(root, e.initrd[-1] if e.initrd else None),
                         tokens=e.options)
    if cfg_path is None:
        return None
    cfg = parse_grub_cfg(read(root, cfg_path) or "")
    menu = default_entry(cfg, env)
    if menu is None:
        raise GrubCfgError(f"{cfg_path} has no menu entry")
    return BootEntry(config=cfg_path, title=menu.title, kernel=menu.kernel,
                     release=kernel_release(menu.kernel),
                     initrd=_boot_path(root, menu.initrd[-1] if menu.initrd else None),
                     tokens=menu.args)


def _removed_keys(tokens: list[str], want: Want) -> list[str]:
    """The keys an edit removes (grubby's --remove-args takes keys)."""
    return list(dict.fromkeys(param_key(t) for t in tokens
                              if any(same_key(param_key(t), k) for k in want.drop)))


def _family(facts: Facts) -> tuple[str, list[str]]:
    distro = facts.distro
    return (distro.id if distro else "", distro.like if distro else [])


class Grub(BootPath):
    grub = True

    def __init__(self, kind: LoaderKind, title: str, edits: str, runs: str) -> None:
        self.kind, self.title, self.edits, self.runs = kind, title, edits, runs

    def hint(self, family: str) -> str:
        if self.kind == "grub-bls":
            # Fedora >= 38 / RHEL >= 9.3: grub2-mkconfig rewrites the BLS entries' options from
            # /etc/default/grub only when asked to
            return "`sudo grub2-mkconfig -o /boot/grub2/grub.cfg --update-bls-cmdline`"
        if any(x in family for x in ("fedora", "rhel", "centos", "suse", "opensuse")):
            return "`sudo grub2-mkconfig -o /boot/grub2/grub.cfg`"
        if "arch" in family:
            return "`sudo grub-mkconfig -o /boot/grub/grub.cfg`"
        return "`sudo update-grub`"

    def runs_here(self, family: str) -> str:
        return self.hint(family).strip("`")

    def generated(self, root: Root, loader: BootLoader | None, bls: bool) -> BootEntry | None:
        return read_generated(root, bls)

    def not_regenerated(self) -> str:
        return "grub.cfg was not regenerated"

    def remove_fix(self, token: str, family: str) -> str:
        return (f"Remove {token} from GRUB_CMDLINE_LINUX_DEFAULT / GRUB_CMDLINE_LINUX in "
                f"/etc/default/grub (or the drop-in in /etc/default/grub.d that sets it), run "
                f"`{self.runs_here(family)}`, and reboot.")

    def plan(self, machine: Machine, want: Want, loader: BootLoader, reads: list[str]) -> Plan:
        """/etc/default/grub and its drop-ins, as grub-mkconfig computes them
        (:mod:`ojai_setup.boot.grub_dropins`)."""
        from ojai_setup.model.actions import RunCommand, WriteFile

        facts, key, pages = machine.facts, want.key, want.pages
        grub = facts.grub
        before = read(machine.root, GRUB_DEFAULT)
        if before is None and (grub is None or not grub.files):
            return Blocked(
                f"GRUB boots this machine ({'; '.join(loader.evidence)}), but {GRUB_DEFAULT} "
                f"does not exist; add {want.param} to its kernel command line yourself (or use "
                "--ttm-via modprobe), then reboot")
        if grub is not None and grub.error:
            return Blocked(f"{grub.error} (no file was changed)")
        chain = [s.path for s in grub.files] if grub is not None else [GRUB_DEFAULT]
        reads += [p for p in chain if p not in reads]
        files = [(p, read(machine.root, p) or "") for p in chain]
        effective = list(grub.tokens) if grub is not None else []
        satisfied = (grub is not None
                     and [t for t in effective if same_key(param_key(t), key)] == [want.param]
                     and expected_others(effective, key, want.drop) == [
                         t for t in effective if not same_key(param_key(t), key)])
        try:
            edit = None if satisfied else plan_cmdline_edit(
                files, key, str(pages), want.drop, main=GRUB_DEFAULT, own_dropin=OJAI_GRUB_DROPIN)
            current = cmdline_param(effective, key) if grub is not None else (
                get_kernel_param(before or "", key, var=choose_cmdline_var(before or "")))
        except GrubEditError as exc:
            return Blocked(f"{exc} (no file was changed)")
        where = (facts.ttm.config_file if facts.ttm and facts.ttm.config_file else GRUB_DEFAULT)
        if edit is None:
            return Planned([], {}, where, current=current)
        if not edit.edits:
            winner = (grub.winners.get(edit.target_var) if grub else None) or GRUB_DEFAULT
            return Blocked(
                f"bash reads {effective} as the kernel command line, but ojai finds "
                f"no file to edit for exactly one {want.param}; edit {winner} yourself "
                "(no file was changed)")
        cmdline = check(want, effective)
        actions = []
        for n, fe in enumerate(edit.edits):
            last = n == len(edit.edits) - 1
            what = (f"set {want.param} ({want.gib} GiB for the GPU) in {edit.target_var}"
                    if fe.path == edit.target else "remove what overrides the limit")
            actions.append(WriteFile(
                path=fe.path, before=fe.before, after=fe.after, validate_with="grub",
                cmdline=cmdline if last and grub is not None else None,
                reason=what, needs_root=True, needs_reboot=REBOOT, notify=("update-grub",)))
        try:
            cmds = regenerate_commands(*_family(facts), lambda p: machine.which(p) is not None,
                                       bls=bls_enabled(before or ""), args=[want.param],
                                       remove_args=_removed_keys(effective, want))
        except GrubEditError as exc:
            return Blocked(str(exc))
        handler = RunCommand(argv=tuple(cmds[0]), needs_root=True,
                             reason=f"regenerate the boot configuration from {GRUB_DEFAULT}")
        return Planned(actions, {"update-grub": handler}, where,
                       detail=f" in {edit.target} ({edit.why})", said=edit.said(), current=current)

    def regenerate(self, machine: Machine, want: Want, loader: BootLoader,
                   gen: BootEntry) -> list[RunCommand] | None:
        from ojai_setup.model.actions import RunCommand

        facts = machine.facts
        if not (facts.grub is not None
                and cmdline_param(facts.grub.tokens, want.key) == str(want.pages)):
            return None
        try:
            cmds = regenerate_commands(*_family(facts), lambda p: machine.which(p) is not None,
                                       bls=loader.kind == "grub-bls", args=[want.param])
        except GrubEditError:
            return None
        return [RunCommand(argv=tuple(cmds[0]), needs_root=True, needs_reboot=REBOOT,
                           reason=f"regenerate {gen.config} from the configured command line")]


GRUB = Grub("grub", "GRUB", f"{GRUB_DEFAULT} (or the drop-in in /etc/default/grub.d that "
            "decides the variable), by key", "update-grub / grub-mkconfig -o "
            "/boot/grub/grub.cfg / grub2-mkconfig -o /boot/grub2/grub.cfg")
GRUB_BLS = Grub("grub-bls", "GRUB with BLS entries", f"{GRUB_DEFAULT}, by key",
                "grubby --update-kernel=ALL --args=..., else grub2-mkconfig -o "
                "/boot/grub2/grub.cfg --update-bls-cmdline")
