"""What a plan will do, counted: the one line a person reads before saying yes (``apt``'s "N
upgraded, M newly installed", Terraform's "Plan: 1 to add, 2 to change"), and the same counts
for programs in ``ojai setup --json`` (``"summary"``).

The files a plan writes come in two kinds a reviewer weighs differently: files that already
exist and are edited (the boot configuration above all), shown first and whole, and files ojai
creates (launch scripts, units), listed with their size (:func:`written_files`)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, NamedTuple

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


def summarize(plan: Plan) -> PlanSummary:
    """Count what ``plan`` will do when applied."""
    edited = created = links = builds = downloads = unsized = size = scripts = 0
    estimated = False
    commands: list[str] = []
    users: list[str] = []
    packages: list[str] = []

    def command(argv) -> None:
        name = short_command(argv)
        if name not in commands:
            commands.append(name)

    for planned in plan.actions():
        a = planned.action
        if isinstance(a, WriteFile):
            edited, created = edited + (a.before is not None), created + (a.before is None)
            scripts += planned.step == "routes" and a.path.endswith(".sh")
        elif isinstance(a, WriteSecret):
            created += 1
        elif isinstance(a, Symlink):
            links += 1
        elif isinstance(a, CreateSystemUser):
            users.append(a.name)
        elif isinstance(a, RunCommand) and a.needs_root:
            command(a.argv)
        elif isinstance(a, BuildFromSource):
            builds += 1
        if isinstance(a, InstallPackage):
            packages.append(f"{a.package} {a.version}")
        if isinstance(a, (HubDownload, InstallArchive, InstallPackage)):
            downloads += 1
            guess = getattr(a, "estimated_size", None)
            if a.size:
                size += a.size
            elif guess:
                size, estimated = size + guess, True
            else:
                unsized += 1
    for handler in plan.handlers.values():
        if handler.needs_root:
            command(handler.argv)
    status = [r.status for r in plan.steps]
    return PlanSummary(
        steps_changed=status.count("change"), steps_blocked=status.count("blocked"),
        steps_satisfied=status.count("satisfied"), files_edited=edited, files_created=created,
        links=links, root_commands=tuple(commands), users=tuple(users),
        packages=tuple(packages), builds=builds, downloads=downloads, download_bytes=size,
        download_estimated=estimated,
        downloads_unsized=unsized, reboot=bool(plan.reboot_reasons()),
        steps_waiting=sum(1 for r in plan.steps if r.status == "blocked" and r.waits_for),
        routes_written=scripts)
