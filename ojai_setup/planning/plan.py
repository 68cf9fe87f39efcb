"""Plans: the actions of every step, plus the fingerprint of the machine they were made against.

``ojai setup`` makes a plan (:func:`make_plan`), shows it (:meth:`Plan.unified_diffs`,
:meth:`Plan.reboot_reasons`, :attr:`Plan.exit_code`) and may save it (:meth:`Plan.save`).
``ojai setup --apply --plan plan.json`` loads it (:meth:`Plan.load`), refuses it when the
machine changed since (:func:`check_fresh`) and hands it to :func:`ojai_setup.apply.executor.apply`,
which carries out exactly the actions in the file.

The fingerprint holds a digest of every machine path the plan read or will write
(:func:`path_digest`), a digest of the facts, and the ojai version.
"""

import difflib
import hashlib
import json
import os
import shlex
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Mapping, NamedTuple, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from ojai_setup import __version__
from ojai_setup.core.digest import sha256_file
from ojai_setup.core.paths import PRIVATE_FILE_MODE
from ojai_setup.core.root import Root
from ojai_setup.core.status import ExitStatus
from ojai_setup.domain.check_engine import Finding
from ojai_setup.facts.disk import filesystem
from ojai_setup.model.actions import ACTION_KINDS, Action, RunCommand, WriteFile
from ojai_setup.model.settings import Settings
from ojai_setup.planning.result import Step, StepResult
from ojai_setup.planning.space import DiskLedger

PLAN_FORMAT = "ojai-plan"
PLAN_FORMAT_VERSION = 1

#: files larger than this are fingerprinted by size and modification time, not hashed
LARGE_FILE = 64 * 2**20


def ojai_version() -> str:
    """This ojai's version (``ojai_setup.__version__``, which the package metadata is made from;
    reading it costs no :mod:`importlib.metadata` import)."""
    return __version__



def path_digest(root: Root, machine_path: str) -> str | None:
    """What is at ``machine_path`` now, as a short comparable string.

    ``None``: nothing there. ``sha256:<hex>``: a regular file. ``large:<size>:<mtime_ns>``: a
    file over :data:`LARGE_FILE` (model weights are not re-hashed on every plan).
    ``symlink:<target>``: a symbolic link (not followed). ``directory``: a directory.
    ``other``: a device, socket or fifo.
    """
    real = root.resolve(machine_path)
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "symlink:" + os.readlink(real)
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    if stat.S_ISREG(st.st_mode):
        if st.st_size > LARGE_FILE:
            return f"large:{st.st_size}:{st.st_mtime_ns}"
        return "sha256:" + sha256_file(real)
    return "other"


def describe_digest(digest: str | None) -> str:
    """A digest as words, for messages (``sha256 ab12cd34..``, ``absent``, ``link to /x``)."""
    if digest is None:
        return "absent"
    if digest.startswith("sha256:"):
        return f"sha256 {digest[7:15]}.."
    if digest.startswith("symlink:"):
        return f"link to {digest[8:]}"
    if digest.startswith("large:"):
        _, size, mtime = digest.split(":", 2)
        when = datetime.fromtimestamp(int(mtime) / 1e9, timezone.utc).isoformat(timespec="seconds")
        return f"{int(size)} bytes modified {when}"
    return digest


def text_digest(text: str) -> str:
    """The :func:`path_digest` a regular file holding ``text`` has."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_snapshot(facts: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    """A model (facts, settings) as a JSON-able dict."""
    if isinstance(facts, BaseModel):
        return facts.model_dump(mode="json")
    return json.loads(canonical_json(dict(facts)))


def facts_digest(facts: BaseModel | Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(json_snapshot(facts)).encode("utf-8")).hexdigest()


class Fingerprint(BaseModel):
    """The state of the machine a plan was made against."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ojai_version: str
    facts_sha256: str
    #: machine path -> :func:`path_digest` at planning time (``None``: absent)
    files: dict[str, str | None]

    @property
    def digest(self) -> str:
        """One sha256 over everything above."""
        return hashlib.sha256(canonical_json(self.model_dump(mode="json")).encode()).hexdigest()


#: the phases of an apply, in the order it runs them (:meth:`Plan.apply_order`)
APPLY_PHASES = ("fetch", "system", "boot")
#: actions that download, unpack or build: long and fallible, so they run before any edit
#: (proving a new build before its link switches too: it runs servers for minutes)
FETCH_KINDS = frozenset(kind for kind, row in ACTION_KINDS.items() if row.fetch)


def apply_phase(action: Action) -> str:
    """``fetch`` (a download, unpack or build), ``boot`` (a change the next boot reads: it
    needs a reboot to take effect) or ``system`` (every other change)."""
    if action.kind in FETCH_KINDS:
        return "fetch"
    if action.needs_reboot:
        return "boot"
    return "system"


class PlannedAction(BaseModel):
    """An action together with the step that asked for it."""

    model_config = ConfigDict(frozen=True)

    step: str
    action: Action


class Plan(BaseModel):
    """A reviewed plan: what each step wants, and the machine state it was decided on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["ojai-plan"] = PLAN_FORMAT
    format_version: Literal[1] = PLAN_FORMAT_VERSION
    ojai_version: str
    created: datetime
    root: str
    settings: dict[str, Any]
    facts: dict[str, Any]
    steps: tuple[StepResult, ...]
    #: follow-up commands by name (``update-grub``), run once at the end of an apply
    handlers: dict[str, RunCommand] = {}
    fingerprint: Fingerprint
    #: doctor's findings of severity warn or fail on this machine, shown above the steps
    preconditions: tuple[Finding, ...] = ()

    @model_validator(mode="after")
    def _handlers_known(self) -> "Plan":
        for planned in self.actions():
            for name in planned.action.notify:
                if name not in self.handlers:
                    raise ValueError(f"step {planned.step!r}: {planned.action.describe()} "
                                     f"notifies unknown handler {name!r}")
        return self

    # -- reading a plan -------------------------------------------------------------------
    def actions(self) -> list[PlannedAction]:
        """Every action, in the order the steps list them."""
        return [PlannedAction(step=r.step, action=a) for r in self.steps for a in r.actions]

    def apply_order(self) -> list[PlannedAction]:
        """Every action in the order an apply carries them out (:func:`apply_phase`): the long
        fallible work first (downloads, unpacking, builds), then the other system files, then
        what the next boot reads; in plan order within each phase."""
        return sorted(self.actions(), key=lambda p: APPLY_PHASES.index(apply_phase(p.action)))

    @property
    def exit_code(self) -> ExitStatus:
        """0 nothing to do, 2 changes pending, 1 a step is blocked (the steps that do not
        need it can still be applied: :meth:`changes`)."""
        if any(r.status == "blocked" for r in self.steps):
            return ExitStatus.FAILED
        if any(r.status == "change" for r in self.steps):
            return ExitStatus.CHANGES
        return ExitStatus.OK

    def blocked(self) -> list[StepResult]:
        """Every step that cannot be applied: blocked on its own or waiting for one that is."""
        return [r for r in self.steps if r.status == "blocked"]

    def changes(self) -> list[StepResult]:
        """The steps an apply carries out (blocked ones and those waiting for them left out)."""
        return [r for r in self.steps if r.status == "change"]

    def left_out(self) -> str:
        """The blocked and waiting steps as one phrase (``llama.cpp is blocked; routes waits
        for llama.cpp``), or ``""``."""
        parts = []
        for r in self.blocked():
            parts.append(f"{r.step} waits for {' and '.join(r.waits_for)}" if r.waits_for
                         else f"{r.step} is blocked")
        return "; ".join(parts)

    def needs_root(self) -> bool:
        return any(p.action.needs_root for p in self.actions())

    def reboot_reasons(self) -> list[str]:
        """Why a reboot will be needed after applying (each reason once, in plan order)."""
        reasons: list[str] = []
        for r in self.steps:
            if r.status != "change":
                continue
            for reason in (*(a.needs_reboot for a in r.actions), *r.reboot):
                if reason and reason not in reasons:
                    reasons.append(reason)
        return reasons

    def unified_diffs(self) -> list[str]:
        """A unified diff for every file the plan writes, labelled with its machine path."""
        diffs: list[str] = []
        for planned in self.actions():
            a = planned.action
            if isinstance(a, WriteFile):
                diffs.append(unified_diff(a.before, a.after, a.path))
        return diffs

    # -- files ----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the plan as JSON, atomically (temp file in the same folder, then rename)."""
        from ojai_setup.core.atomic import write_text  # only `--out` writes a plan

        write_text(Path(path), self.model_dump_json(indent=2) + "\n", mode=PRIVATE_FILE_MODE)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Plan":
        """Read a saved plan; :class:`PlanFileError` says clearly why a file is not one."""
        src = Path(path)
        try:
            text = src.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise PlanFileError(f"--plan {src}: no such plan file; make one with "
                                f"`ojai setup --out {shlex.quote(str(src))}`",
                                missing=True) from None
        except PermissionError:
            raise PlanFileError(f"{src}: cannot read the plan file: permission denied (a plan is "
                                "saved readable by its owner only; run as that user, or with "
                                "sudo)") from None
        except IsADirectoryError:
            raise PlanFileError(f"--plan {src}: is a folder, not a plan file",
                                missing=True) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise PlanFileError(f"{src}: cannot read the plan file "
                                f"({getattr(exc, 'strerror', None) or 'not UTF-8 text'})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            from ojai_setup.core.problems import json_problem

            raise PlanFileError(f"{src}: not a valid plan file: it {json_problem(exc)}; make "
                                f"the plan again with `ojai setup --out "
                                f"{shlex.quote(str(src))}`") from None
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise PlanFileError(f"{src}: not an ojai plan (no \"format\": \"{PLAN_FORMAT}\" "
                                f"field); make one with `ojai setup --out {shlex.quote(str(src))}`")
        if data.get("format_version") != PLAN_FORMAT_VERSION:
            raise PlanFileError(f"{src}: plan format version {data.get('format_version')!r} is "
                                f"not supported by ojai {ojai_version()} (it reads version "
                                f"{PLAN_FORMAT_VERSION}); make the plan again")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            from ojai_setup.core.problems import problems

            raise PlanFileError(f"{src}: the plan file is damaged: {problems(exc.errors())}; "
                                f"make the plan again with `ojai setup --out "
                                f"{shlex.quote(str(src))}`") from None


class PlanFileError(ValueError):
    """A plan file that cannot be used: missing (``missing``: a usage error), not JSON,
    foreign or damaged."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def unified_diff(before: str | None, after: str, path: str, *,
                 labels: tuple[str, str] | None = None) -> str:
    """``diff -u`` of a file's content; a new file is compared with ``/dev/null``.
    ``labels``: the two header names, when they are not the path itself."""
    old = _diff_lines(before or "")
    new = _diff_lines(after)
    fromfile, tofile = labels or ("/dev/null" if before is None else path, path)
    lines = difflib.unified_diff(old, new, fromfile=fromfile, tofile=tofile)
    return "".join(lines)


def _diff_lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


class PlanInputs(Protocol):
    """What :func:`make_plan` reads of a :class:`~ojai_setup.planning.context.Context`."""

    root: Root
    facts: BaseModel
    settings: BaseModel


def make_plan(ctx: PlanInputs, steps: Sequence[Step]) -> Plan:
    """Ask every step for its result and fingerprint what they read and will write.

    Paths a step reads through ``ctx.root`` while planning are fingerprinted too, besides the
    ones it lists in ``StepResult.reads``. Raises ``ValueError`` when two steps declare the
    same handler name with different commands, or a step result is named after another step.
    """
    results: list[StepResult] = []
    handlers: dict[str, RunCommand] = {}
    paths: list[str] = []
    provided: set[str] = set()
    ledger = DiskLedger(lambda folder: filesystem(ctx.root.resolve(folder)))
    for step in steps:
        seen = len(ctx.root.reads)
        result = step.plan(ctx)
        if result.step != step.name:
            raise ValueError(f"step {step.name!r} returned a result named {result.step!r}")
        result = wait_for_blocked(result, getattr(step, "needs", ()), results)
        result = ledger.admit(block_unrunnable(result, ctx.root, provided))
        results.append(result)
        paths.extend(ctx.root.reads[seen:])
        paths.extend(result.reads)
        for action in result.actions:
            paths.extend(action.targets())
        for name, command in result.handlers.items():
            if name in handlers and handlers[name] != command:
                raise ValueError(f"handler {name!r} is declared twice with different commands: "
                                 f"{handlers[name].describe()} and {command.describe()}")
            handlers[name] = command
    files = {p: path_digest(ctx.root, p) for p in sorted(set(paths))}
    version = ojai_version()
    return Plan(
        ojai_version=version,
        created=datetime.now(timezone.utc),
        root=str(ctx.root.path),
        settings=json_snapshot(ctx.settings),
        facts=json_snapshot(ctx.facts),
        steps=tuple(results),
        handlers=handlers,
        fingerprint=Fingerprint(ojai_version=version, facts_sha256=facts_digest(ctx.facts),
                                files=files),
    )


def wait_for_blocked(result: StepResult, needs: Sequence[str],
                     earlier: Sequence[StepResult]) -> StepResult:
    """``result``, or the step waiting when a step it needs (planned before it) is blocked or
    waits itself: a change is held back (blocked, its actions left out, ``waits_for`` naming
    those steps, its sentence saying what it would do once they are fixed); a step blocked on
    its own keeps its sentence and names them too. Every other step of the plan is applied
    without it."""
    blocked = [r.step for r in earlier if r.step in needs and r.status == "blocked"]
    if not blocked or result.status == "satisfied":
        return result
    if result.status == "blocked":
        return result.model_copy(update={"waits_for": tuple(blocked)})
    names = " and ".join(blocked)
    return StepResult(step=result.step, status="blocked", reads=result.reads,
                      waits_for=tuple(blocked),
                      sentence=f"waits for {names} (blocked above); once "
                      f"{'it is' if len(blocked) == 1 else 'they are'} fixed, it will "
                      f"{gist(result.sentence)}")


def gist(sentence: str) -> str:
    """The head of a step's sentence, for a line about it: up to its first ``; `` or full
    stop outside brackets, without what the brackets say (``write launch scripts for
    gemma-4-26b-a4b-mtp and gemma-4-26b-a4b``)."""
    out, depth, quoted = [], 0, False
    for i, c in enumerate(sentence):
        if c == "`":
            quoted = not quoted
        if not quoted and c in "([{":
            depth += 1
            continue
        if not quoted and c in ")]}":
            depth = max(0, depth - 1)
            continue
        if depth:
            continue
        if not quoted and c in ";." and sentence[i + 1:i + 2] in (" ", ""):
            break
        out.append(c)
    return " ".join("".join(out).split())


#: programs a package that a plan installs brings (a later command of the plan may run them)
PACKAGE_PROGRAMS: dict[str, tuple[str, ...]] = {
    "lemonade-server": ("lemonade", "lemond"),
    "fastflowlm": ("flm",),
}
#: how to get a program a command needs, where ojai knows it
PROGRAM_HINTS: dict[str, str] = {
    "systemctl": "leave out --systemd (systemd does not manage this machine's services), or "
                 "set up systemd",
    "systemd-sysusers": "Debian and Ubuntu: apt install systemd (or passwd, for useradd)",
    "cmake": "Debian and Ubuntu: apt install cmake; or a nightly build with --llamacpp nightly",
    "cc": "Debian and Ubuntu: apt install build-essential",
    "c++": "Debian and Ubuntu: apt install build-essential",
    "make": "Debian and Ubuntu: apt install make (or ninja-build)",
    "git": "Debian and Ubuntu: apt install git; or a local source with --llamacpp-src",
}


def _installs(action: Action) -> list[str]:
    """The packages ``action`` installs (an InstallPackage, or ``apt-get install ...``)."""
    if action.kind == "install_package":
        return [action.package]
    if isinstance(action, RunCommand) and action.argv[:1] in (("apt-get",), ("apt",)) \
            and "install" in action.argv:
        return [a for a in action.argv[action.argv.index("install") + 1:]
                if not a.startswith("-")]
    return []


def block_unrunnable(result: StepResult, root: Root, provided: set[str]) -> StepResult:
    """``result``, or the step blocked when a program it runs is missing and no earlier action
    of the plan installs it: a command it runs (an action, or a follow-up its actions notify)
    that the machine does not have, or a program ojai runs on this computer against the
    machine (:meth:`~ojai_setup.model.actions.Action.host_programs`: a system user's
    systemd-sysusers or useradd, a source build's cmake and compilers) that this computer does
    not have. Known at planning, so the dry run says it before anything changes. ``provided``
    collects the programs the plan's installs bring, step after step."""
    if result.status != "change":
        return result
    programs: dict[str, list[str]] = {}  # a missing command's program -> its commands
    host: list[str] = []  # what ojai would run on this computer, and does not find
    hints: list[str] = []

    def hint(program: str) -> None:
        if program in PROGRAM_HINTS and PROGRAM_HINTS[program] not in hints:
            hints.append(PROGRAM_HINTS[program])

    for action in result.actions:
        commands = [action] if isinstance(action, RunCommand) else []
        commands += [result.handlers[n] for n in action.notify if n in result.handlers]
        for command in commands:
            program = command.argv[0]
            if program not in provided and root.which(program) is None:
                programs.setdefault(program, [])
                if shlex.join(command.argv) not in programs[program]:
                    programs[program].append(shlex.join(command.argv))
                hint(program)
        for choices in action.host_programs():
            if not any(p in provided or root.host_which(p) for p in choices):
                none = {1: "it is not", 2: "neither is"}.get(len(choices), "none is")
                line = (f"to {action.describe()}, ojai runs {' or '.join(choices)} on this "
                        "computer" + ("" if root.is_host else " (against the machine folder)")
                        + f", and {none} installed")
                if line not in host:
                    host.append(line)
                hint(choices[0])
        for package in _installs(action):
            provided.update(PACKAGE_PROGRAMS.get(package, ()))
    if not programs and not host:
        return result
    sentences = []
    if programs:
        names = list(programs)
        runs = [f"`{c}`" for cs in programs.values() for c in cs]
        shown = ", ".join(runs[:2]) + (f" and {len(runs) - 2} more" if len(runs) > 2 else "")
        where = " (a machine folder answers commands from its captures in .ojai/commands)" \
            if not root.is_host else ""
        sentences.append(f"this step runs {shown}, and this machine has no "
                         f"{' or '.join(names)}{where}.")
    sentences += [f"{h[0].upper()}{h[1:]}." for h in host[:2]]
    ways = [*hints, "install what is missing and plan again"]
    return StepResult.blocked(result.step, " ".join(sentences[:3]), reads=result.reads,
                              ways=ways)


def remake_command(plan: Plan, plan_path: str) -> str:
    """The whole command that makes ``plan`` again, for the same machine root and with the
    options it was made with, saving it to ``plan_path`` (shell-quoted)."""
    try:
        settings = Settings(**plan.settings)
    except (ValidationError, TypeError):  # a plan edited by hand: its options are unknown
        settings = Settings()
    return settings.command("--out", plan_path, root=plan.root)


def apply_command(plan: Plan, plan_path: str, *, apply: bool = True) -> str:
    """The command that applies the saved plan ``plan_path`` (made for ``plan.root``), or with
    ``apply=False`` the one that shows it again."""
    words = ["ojai", "setup"] + (["--root", plan.root] if plan.root != "/" else [])
    return shlex.join(words + (["--apply"] if apply else []) + ["--plan", plan_path])


class StalePlan(NamedTuple):
    """Why a saved plan no longer matches the machine."""

    changes: tuple[str, ...]
    plan_path: str = "plan.json"
    #: the whole command that makes the plan again (:func:`remake_command`)
    redo: str | None = None

    @property
    def message(self) -> str:
        command = self.redo or f"ojai setup --out {shlex.quote(self.plan_path)}"
        return "; ".join(self.changes) + f"; run `{command}` again and review it"

    def __str__(self) -> str:
        return self.message


def check_fresh(plan: Plan, root: Root, current_facts: BaseModel | Mapping[str, Any], *,
                plan_path: str = "plan.json") -> StalePlan | None:
    """None when ``plan`` still matches the machine, else what changed and what to do."""
    changes: list[str] = []
    if plan.root != str(root.path):
        changes.append(f"the plan was made for the machine at {plan.root}, not {root.path}")
    if plan.fingerprint.ojai_version != ojai_version():
        changes.append(f"the plan was made by ojai {plan.fingerprint.ojai_version}, "
                       f"this is ojai {ojai_version()}")
    for path, recorded in plan.fingerprint.files.items():
        now = path_digest(root, path)
        if now != recorded:
            changes.append(f"{path} changed since the plan was made "
                           f"({describe_digest(recorded)} -> {describe_digest(now)})")
    if facts_digest(current_facts) != plan.fingerprint.facts_sha256:
        differing = _json_differences(plan.facts, json_snapshot(current_facts))
        shown = ", ".join(differing[:5]) + (f" and {len(differing) - 5} more"
                                            if len(differing) > 5 else "")
        changes.append(f"the machine's facts changed since the plan was made ({shown or 'facts'})")
    if not changes:
        return None
    return StalePlan(tuple(changes), plan_path, remake_command(plan, plan_path))


def _json_differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two JSON values differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            where = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                found.append(where)
            else:
                found.extend(_json_differences(old[key], new[key], where))
        return found
    return [] if old == new else [prefix or "facts"]
