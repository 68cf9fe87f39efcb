"""What every boot path module gives (:class:`BootPath`), and what they share.

A boot path is how the next boot's kernel command line is decided on a machine: GRUB's
defaults file, systemd-boot with kernel-install, Limine, kernelstub, ... Each is one module of
this package holding its :class:`BootPath` (two for a pair that differs by one marker), and
:mod:`ojai_setup.boot.table` registers them. A module says:

- how it is detected (:meth:`BootPath.claim`, on the :class:`Markers` ``facts/boot.py`` reads;
  :mod:`ojai_setup.boot.detect` decides between the paths that claim a machine);
- the deciding file and how to edit it for the GPU memory limit, with the commands that make
  the edit reach the boot (:meth:`BootPath.plan`, for the ``gpu-memory`` step); those commands
  are the edit's follow-ups, journalled with it, which rollback runs again after restoring it;
- the configured and generated command lines as they are on the machine
  (:meth:`BootPath.configured`, :meth:`BootPath.generated`, called by ``facts/``; the active
  one is ``/proc/cmdline`` on every path), and the regeneration a stale generated state owes
  (:meth:`BootPath.regenerate`);
- its words for people: :attr:`BootPath.title`, :attr:`BootPath.edits`, :attr:`BootPath.runs`
  (doctor's fixes, the README's table) and the one command to type (:meth:`BootPath.hint`).

The readers take the machine's :class:`~ojai_setup.core.root.Root`; the planners take the step's
context (:class:`Machine`: its facts, root and ``which``) and return :class:`Planned`,
:class:`Blocked` or :class:`Satisfied`, which the step turns into its result. Parsing stays in
``formats/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ojai_setup.core.paths import TTM_MODULES
from ojai_setup.core.root import Root
from ojai_setup.formats.kernel_params import expected_others, param_key, same_key
from ojai_setup.model.facts import BootEntry, BootLoader, Facts, LoaderKind

if TYPE_CHECKING:  # the actions are built only when a step plans (doctor never imports them)
    from ojai_setup.model.actions import Action, CmdlineCheck, RunCommand

#: what the kernel reads the limit at, said with every change that needs a reboot
REBOOT = "the kernel reads the TTM limit only at boot"
DEPRECATED = ("amdgpu.gttsize", "amdgpu.gtt_size")
#: where an ESP (or XBOOTLDR partition) is mounted (bootctl's search order)
ESPS = ("/efi", "/boot", "/boot/efi")


class Markers(NamedTuple):
    """What the machine shows about its boot path (machine paths; None: not there)."""

    cmdline: list[str] | None = None  # /proc/cmdline, None when unknown
    grub_default: bool = False
    grub_bls: bool = False
    grub_cfg: str | None = None
    #: ESP folders with systemd-boot (loader/loader.conf or EFI/systemd/)
    sd_boot: tuple[str, ...] = ()
    #: type 1 entries (loader/entries/*.conf) on those ESPs, and UKIs (EFI/Linux/*.efi)
    entries: tuple[str, ...] = ()
    ukis: tuple[str, ...] = ()
    #: an entry named ``<entry token>-<kver>.conf`` (the token: /etc/kernel/entry-token, else
    #: the machine id), as kernel-install's 90-loaderentry.install names them
    ki_entries: tuple[str, ...] = ()
    kernel_cmdline: bool = False  # /etc/kernel/cmdline exists
    install_conf: bool = False
    layout: str | None = None  # install.conf's layout=
    limine_conf: tuple[str, ...] = ()
    limine_default: bool = False
    kernelstub: bool = False
    nixos: str | None = None  # the marker that says NixOS
    loader_type: str | None = None  # openSUSE
    #: the default hand-written entry (loader.conf's ``default``, else the first), if any
    default_entry: str | None = None
    #: systemd-boot's LoaderInfo EFI variable ("systemd-boot 252"): it booted this kernel
    loader_info: str | None = None


class Claim(NamedTuple):
    """A boot path's claim on a machine: its kind, the markers that say so, its deciding file."""

    kind: LoaderKind
    why: str
    config: str | None


class Want(NamedTuple):
    """The limit asked for, in the key of the live module."""

    gib: int
    pages: int
    module: str  # ttm, amdttm or amd_ttm (TTM_MODULES)

    @property
    def key(self) -> str:
        return f"{self.module}.pages_limit"

    @property
    def others(self) -> tuple[str, ...]:
        """The keys of the TTM modules that are not the live one."""
        return tuple(f"{m}.pages_limit" for m in TTM_MODULES if m != self.module)

    @property
    def drop(self) -> tuple[str, ...]:
        return (*self.others, *DEPRECATED)

    @property
    def param(self) -> str:
        return f"{self.key}={self.pages}"


class Planned(NamedTuple):
    """A command line route's plan: no actions means the deciding file already holds it."""

    actions: Sequence[Action]
    handlers: dict[str, RunCommand]
    where: str  # the file that decides
    detail: str = ""  # for the change sentence: " in FILE (why)"
    said: list[str] = []
    current: str | None = None  # the configured value now


class Blocked(NamedTuple):
    """The path cannot take the limit: why, and the ways on (the step blocks with them)."""

    sentence: str
    ways: tuple[str, ...] = ()


class Satisfied(NamedTuple):
    """The limit holds on a path ojai does not edit (NixOS): the step is satisfied."""

    sentence: str


class Machine(Protocol):
    """What a planner reads: the step's context (``planning.context.Context``)."""

    @property
    def root(self) -> Root: ...

    @property
    def facts(self) -> Facts: ...

    def which(self, program: str) -> str | None: ...


Plan = Planned | Blocked | Satisfied


class BootPath:
    """One boot path. The defaults are a path that claims nothing, reads nothing and edits
    nothing; each module overrides what its path does."""

    kind: LoaderKind = "unknown"
    title = ""
    #: what ojai edits there, and the command that makes the edit reach the boot (README, doctor)
    edits = ""
    runs = ""
    #: the configured command line is GRUB's own fact (``facts.grub``: bash sourcing the chain)
    grub = False
    #: the deciding file is itself what the boot reads: no generated state to compare
    has_generated = True
    #: systemd-boot's LoaderInfo EFI variable speaks for it (it boots through systemd-boot)
    systemd_boot = False
    #: the kinds whose markers its own outweigh (it writes their files itself)
    outweighs: tuple[str, ...] = ()

    def claim(self, markers: Markers) -> Claim | None:
        """Its claim on the machine, from the markers; None when they do not show it."""
        return None

    def hint(self, family: str) -> str:
        """The one command a person runs to make the configured command line reach the next
        boot (``family``: os-release's ID and ID_LIKE): a command that can be copied as it is,
        never a placeholder."""
        return "your boot loader's own tool"

    def runs_here(self, family: str) -> str:
        """What makes an edit reach the next boot, as it runs on this machine."""
        return self.runs

    def configured(self, root: Root, loader: BootLoader) -> tuple[list[str], str] | None:
        """The *configured* kernel command line and the file that holds it; None where ojai
        reads none here."""
        return None

    def generated(self, root: Root, loader: BootLoader | None, bls: bool) -> BootEntry | None:
        """The *generated* state: the default entry the boot reads."""
        return None

    def plan(self, machine: Machine, want: Want, loader: BootLoader, reads: list[str]) -> Plan:
        """The edit that puts ``want`` where the next boot takes it from; ``reads`` gains every
        file looked at (the plan's fingerprint)."""
        raise NotImplementedError

    def regenerate(self, machine: Machine, want: Want, loader: BootLoader,
                   gen: BootEntry) -> list[RunCommand] | None:
        """The commands owed when the configured files hold ``want`` but ``gen`` (the generated
        default entry) does not; None when there is none to run."""
        return None

    def initramfs(self, machine: Machine, loader: BootLoader,
                  release: str | None) -> dict[str, RunCommand] | str | None:
        """Where the initramfs that boots is not the distribution's own (kernel-install copies
        it to the ESP): the rebuild that reaches it, or why there is none. None: the
        distribution's tool rebuilds it."""
        return None

    def not_regenerated(self) -> str:
        """Doctor's words when the generated entry lacks the configured limit."""
        return f"it was not regenerated ({self.title})"

    def unconfigured_fix(self, family: str) -> str:
        """Doctor's fix when no limit is configured."""
        return (f"Run `ojai setup` to review the change ({self.title}: {self.edits}; then "
                f"{self.runs_here(family)}), `ojai setup --apply`, then reboot.")

    def remove_fix(self, token: str, family: str) -> str:
        """Doctor's fix for a parameter that must leave the kernel command line."""
        return (f"Remove {token} from the kernel command line where this boot path "
                f"({self.title}) keeps it ({self.edits}), then {self.runs}, and reboot.")


# -- shared by the modules -------------------------------------------------------------------
def read(root: Root, path: str) -> str | None:
    """A file's text on the machine; None when it is not there."""
    try:
        return root.read_text(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def loader_entry(root: Root, path: str, esp: str) -> BootEntry:
    """A loader entry on the ESP mounted at ``esp`` (its paths are relative to the ESP)."""
    from ojai_setup.formats.grub_cfg import kernel_release, parse_bls_entry

    e = parse_bls_entry(PurePosixPath(path).stem, read(root, path) or "")
    initrd = e.initrd[-1].replace("\\", "/") if e.initrd else None
    return BootEntry(config=path, title=e.title, kernel=e.linux,
                     release=e.version or kernel_release(e.linux),
                     initrd=f"{esp.rstrip('/')}/{initrd.lstrip('/')}" if initrd else None,
                     tokens=e.options)


def check(want: Want, tokens: list[str]) -> CmdlineCheck:
    """What the executor checks in the written file: exactly ``want``, every other parameter
    as it was."""
    from ojai_setup.model.actions import CmdlineCheck

    return CmdlineCheck(param=want.param, others=tuple(expected_others(tokens, want.key,
                                                                       want.drop)))


def changes(before: list[str], after: list[str], path: str, want: Want | None = None) -> list[str]:
    """The phrases naming what an edit rewrote or removed (for the step's sentence)."""
    gone = [t for t in before if t not in after]
    if want is None:
        return [f"removes {t} from {path}" for t in gone]
    out = []
    rewritten = [t for t in gone if same_key(param_key(t), want.key)]
    if rewritten:
        out.append(f"rewrites {rewritten[-1]} to {want.param} in {path}")
    out += [f"removes {t} from {path}" for t in gone if t not in rewritten[-1:]]
    return out
