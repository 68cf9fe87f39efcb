"""What a plan will do, counted: the one line a person reads before saying yes (``apt``'s "N
upgraded, M newly installed", Terraform's "Plan: 1 to add, 2 to change"), and the same counts
for programs in ``ojai setup --json`` (``"summary"``).

The files a plan writes come in two kinds a reviewer weighs differently: files that already
exist and are edited (the boot configuration above all), shown first and whole, and files ojai
creates (launch scripts, units), listed with their size (:func:`written_files`)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ojai_setup.model.actions import (
    BuildFromSource,
    CreateSystemUser,
    HubDownload,
    InstallArchive,
    InstallPackage,
    RunCommand,
    Symlink,
    WriteFile,
    WriteSecret,
)
from ojai_setup.model.follow_ups import follow_up

if TYPE_CHECKING:
    from ojai_setup.planning.plan import Plan



class WrittenFile(NamedTuple):
    """One file a plan writes: ``edit`` (it exists) or ``create``, by which step, how large."""

    path: str
    change: str
    step: str
    size: int
    lines: int
    #: the boot reads it (its edit needs a reboot or regenerates grub.cfg / an initramfs)
    boot: bool
    before: str | None
    after: str


def written_files(plan: Plan) -> list[WrittenFile]:
    """Every file the plan writes: what the boot reads first (edited, then created), then the
    other files it edits, then those it creates, each group in plan order."""
    files = []
    for planned in plan.actions():
        a = planned.action
        if not isinstance(a, WriteFile):
            continue
        # the boot reads it, or a follow-up that regenerates what the boot reads is notified
        boot = bool(a.needs_reboot) or any(
            (kind := follow_up(n)) is not None and kind.boot for n in a.notify)
        files.append(WrittenFile(a.path, "create" if a.before is None else "edit", planned.step,
                                 len(a.after.encode("utf-8")), len(a.after.splitlines()), boot,
                                 a.before, a.after))
    return sorted(files, key=lambda f: (not f.boot, f.change != "edit"))


def short_command(argv: tuple[str, ...] | list[str]) -> str:
    """A command as a person names it: the program and its subcommand
    (``systemctl daemon-reload``, ``apt-get install``, ``update-grub``)."""
    words = [argv[0].rsplit("/", 1)[-1]] if argv else []
    for word in argv[1:2]:
        if word.startswith("-") or "/" in word or "=" in word:
            break
        words.append(word)
    return shlex.join(words)


class PlanSummary(NamedTuple):
    """The counts of a plan (:func:`summarize`)."""

    steps_changed: int
    #: blocked steps, those waiting for a blocked one included
    steps_blocked: int
    steps_satisfied: int
    files_edited: int
    files_created: int
    links: int
    #: the commands that run as root, as :func:`short_command` names them, each once
    root_commands: tuple[str, ...]
    users: tuple[str, ...]
    packages: tuple[str, ...]
    builds: int
    downloads: int
    #: bytes to download, of the downloads whose size is known or estimated
    download_bytes: int
    #: whether some of those bytes are the catalog's estimates
    download_estimated: bool
    downloads_unsized: int
    reboot: bool
    #: of the blocked steps, those blocked only because they wait for another
    steps_waiting: int = 0
    #: launch scripts the plan writes: the apply checks their routes against the CPU
    #: (:mod:`ojai_setup.commands.apply_gate`) before it calls them ready
    routes_written: int = 0

    def to_json(self) -> dict:
        return {**self._asdict(), "root_commands": list(self.root_commands),
                "users": list(self.users), "packages": list(self.packages)}

    def sentence(self) -> str:
        """``Plan: edit 1 file, create 6, run 3 commands as root (update-grub, ...); download
        16.2 GiB; 1 step blocked; a reboot follows.``"""
        if not self.steps_changed and not self.steps_blocked:
            return "Plan: nothing to do; every step is satisfied."
        doing: list[str] = []
        if self.files_edited:
            doing.append(f"edit {_count(self.files_edited, 'file')}")
        if self.files_created:
            doing.append(f"create {self.files_created}" if self.files_edited
                         else f"create {_count(self.files_created, 'file')}")
        if self.links:
            doing.append(f"switch {_count(self.links, 'link')}")
        for user in self.users:
            doing.append(f"add the system user {user}")
        if self.packages:
            doing.append(f"install {', '.join(self.packages)}")
        if self.builds:
            doing.append(f"build {_count(self.builds, 'llama-server')}" if self.builds > 1
                         else "build llama-server from source")
        if self.root_commands:
            doing.append(f"run {_count(len(self.root_commands), 'command')} as root "
                         f"({', '.join(self.root_commands)})")
        parts = [", ".join(doing)] if doing else []
        if self.downloads:
            size = (("about " if self.download_estimated else "")
                    + f"{self.download_bytes / 2**30:.1f} GiB") if self.download_bytes else ""
            unsized = (f"{_count(self.downloads_unsized, 'file')} of unknown size"
                       if self.downloads_unsized else "")
            parts.append("download " + " and ".join(p for p in (size, unsized) if p))
        if self.steps_blocked:
            own = self.steps_blocked - self.steps_waiting
            what = _count(own, "step") + " blocked" if own else ""
            if self.steps_waiting:
                what += (" and " if what else "") + (
                    f"{self.steps_waiting} waiting for {'it' if own == 1 else 'them'}"
                    if own else f"{_count(self.steps_waiting, 'step')} waiting")
            it = "it is" if own == 1 else "they are"
            parts.append(f"{what}: left out until {it} fixed" if self.steps_changed else
                         f"{what}, so nothing can be applied until {it} fixed")
        if self.routes_written:
            parts.append("then its routes are checked against the CPU (--no-gate skips this)")
        if self.reboot:
            parts.append("a reboot follows")
        return "Plan: " + "; ".join(parts) + "."


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass
class _Tally:
    """The counts :func:`summarize` adds up, one action at a time."""

    edited: int = 0
    created: int = 0
    links: int = 0
    builds: int = 0
    downloads: int = 0
    unsized: int = 0
    size: int = 0
    scripts: int = 0
    estimated: bool = False
    commands: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)

    def command(self, argv: tuple[str, ...] | list[str]) -> None:
        name = short_command(argv)
        if name not in self.commands:
            self.commands.append(name)

    def download(self, size: int | None, guess: int | None) -> None:
        self.downloads += 1
        if size:
            self.size += size
        elif guess:
            self.size, self.estimated = self.size + guess, True
        else:
            self.unsized += 1


def _write_file(t: _Tally, a: WriteFile, step: str) -> None:
    t.edited += a.before is not None
    t.created += a.before is None
    t.scripts += step == "routes" and a.path.endswith(".sh")


def _write_secret(t: _Tally, a: WriteSecret, step: str) -> None:
    t.created += 1


def _symlink(t: _Tally, a: Symlink, step: str) -> None:
    t.links += 1


def _system_user(t: _Tally, a: CreateSystemUser, step: str) -> None:
    t.users.append(a.name)


def _run_command(t: _Tally, a: RunCommand, step: str) -> None:
    if a.needs_root:
        t.command(a.argv)


def _build(t: _Tally, a: BuildFromSource, step: str) -> None:
    t.builds += 1


def _hub_download(t: _Tally, a: HubDownload, step: str) -> None:
    t.download(a.size, a.estimated_size)


def _archive(t: _Tally, a: InstallArchive, step: str) -> None:
    t.download(a.size, None)


def _package(t: _Tally, a: InstallPackage, step: str) -> None:
    t.packages.append(f"{a.package} {a.version}")
    t.download(a.size, None)


#: what each kind of action adds to the counts (a kind not listed adds nothing)
_COUNTS: dict[type, Callable[[_Tally, Any, str], None]] = {
    WriteFile: _write_file, WriteSecret: _write_secret, Symlink: _symlink,
    CreateSystemUser: _system_user, RunCommand: _run_command, BuildFromSource: _build,
    HubDownload: _hub_download, InstallArchive: _archive, InstallPackage: _package,
}


def summarize(plan: Plan) -> PlanSummary:
    """Count what ``plan`` will do when applied."""
    t = _Tally()
    for planned in plan.actions():
        count = _COUNTS.get(type(planned.action))
        if count is not None:
            count(t, planned.action, planned.step)
    for handler in plan.handlers.values():
        if handler.needs_root:
            t.command(handler.argv)
    status = [r.status for r in plan.steps]
    return PlanSummary(
        steps_changed=status.count("change"), steps_blocked=status.count("blocked"),
        steps_satisfied=status.count("satisfied"), files_edited=t.edited,
        files_created=t.created, links=t.links, root_commands=tuple(t.commands),
        users=tuple(t.users), packages=tuple(t.packages), builds=t.builds,
        downloads=t.downloads, download_bytes=t.size, download_estimated=t.estimated,
        downloads_unsized=t.unsized, reboot=bool(plan.reboot_reasons()),
        steps_waiting=sum(1 for r in plan.steps if r.status == "blocked" and r.waits_for),
        routes_written=t.scripts)
