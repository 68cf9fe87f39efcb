"""The one place that changes a machine: carries out a plan's actions.

Each action kind has an executor function, registered with :func:`register_executor`::

    @register_executor("write_file")
    def execute_write_file(root: Root, action: WriteFile, progress: Progress) -> ActionOutcome:
        ...

An executor returns an :class:`ActionOutcome` (or a bool: changed or not). One that returns
None is judged by its targets: it changed something when a target's digest differs afterwards
(an action without targets, a command, always counts as a change). Executors of installs
and downloads live with their subject (``ojai_setup.apply.archive``,
``ojai_setup.apply.build``, ``ojai_setup.apply.hub``) and are imported only when a plan holds such
an action (:data:`LAZY_EXECUTORS`). An executor calls :func:`fault_point` just before the step
that makes its change visible (the rename), so that tests can inject a crash there.

A ``WriteFile`` with ``validate_with="<name>"`` has its new content checked, in the temporary
file, by the validator of that name: ``fn(path, action)`` raising an exception (ValueError)
whose message says what is wrong. Register one with :func:`register_validator`, or list it in
:data:`LAZY_VALIDATORS` (``"grub"`` is ``ojai_setup.apply.validate.validate_grub``).

:func:`apply` checks privileges, executors, validators and that every target is still what the
plan saw, all before the first change; then it runs the actions in plan order with a journal
(backups of changed files), runs the notified handlers once, records the steps' state records,
and re-reads every target to verify it.
"""

from __future__ import annotations

import importlib
import os
import shlex
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, TypeVar

from pydantic import ValidationError as InvalidModel

from ojai_setup.apply import faults
from ojai_setup.apply.journal import Interrupted, Journal, recover
from ojai_setup.apply.lock import MachineLock
from ojai_setup.apply.outcome import ActionOutcome  # re-exported: executors import it from here
from ojai_setup.apply.signals import ApplyInterrupted, SignalGuard
from ojai_setup.core.atomic import Replacement, ensure_dir, replace_symlink
from ojai_setup.core.errors import ApplyError
from ojai_setup.core.paths import DIR_MODE, FILE_MODE
from ojai_setup.core.progress import Progress
from ojai_setup.core.root import Root
from ojai_setup.facts.state import JournalError, read_state, state_dir
from ojai_setup.model.actions import (
    ACTION_KINDS,
    BuildFromSource,
    CreateSystemUser,
    HubDownload,
    InstallArchive,
    InstallPackage,
    ProveBuild,
    RunCommand,
    Symlink,
    WriteFile,
    WriteSecret,
)
from ojai_setup.model.settings import Settings
from ojai_setup.model.journal import ActionRecord, PlannedRecord
from ojai_setup.model.state import HandlerRecord
from ojai_setup.planning.plan import (
    Plan,
    PlannedAction,
    describe_digest,
    path_digest,
    text_digest,
)

#: how long a command action or handler may run (update-grub, update-initramfs), seconds
COMMAND_TIMEOUT = 900.0


ExecutorFn = Callable[[Root, Any, Progress], "ActionOutcome | bool | None"]
#: a validator gets the temporary file holding the new content and the action, and raises an
#: exception (ValueError) whose message says what is wrong
Validator = Callable[[Path, WriteFile], None]

EXECUTORS: dict[str, ExecutorFn] = {}
VALIDATORS: dict[str, Validator] = {}

#: action kind -> (module, function) imported on first use (the executors of this module are
#: registered by their decorator; ``prove_build``'s by the command that plans it)
LAZY_EXECUTORS: dict[str, tuple[str, str]] = {
    kind: row.executor for kind, row in ACTION_KINDS.items()
    if row.executor is not None and row.executor[0] != __name__}

#: validator name -> (module, function) imported on first use
LAZY_VALIDATORS: dict[str, tuple[str, str]] = {
    "grub": ("ojai_setup.apply.validate", "validate_grub"),
    "kernel-cmdline": ("ojai_setup.apply.validate", "validate_kernel_cmdline"),
    "loader-entry": ("ojai_setup.apply.validate", "validate_loader_entry"),
    "kernelstub": ("ojai_setup.apply.validate", "validate_kernelstub"),
}

F = TypeVar("F", bound=Callable[..., Any])


def register_executor(kind: str) -> Callable[[F], F]:
    """Make the decorated function the executor of actions of ``kind``."""
    def decorate(fn: F) -> F:
        EXECUTORS[kind] = fn
        return fn
    return decorate


def register_validator(name: str) -> Callable[[F], F]:
    """Make the decorated function the validator named ``name`` (``WriteFile.validate_with``)."""
    def decorate(fn: F) -> F:
        VALIDATORS[name] = fn
        return fn
    return decorate


# -- errors ----------------------------------------------------------------------------------
class NeedsRoot(ApplyError):
    """Applying needs root; raised before the first change."""

    def __init__(self, message: str, command: str) -> None:
        super().__init__(message)
        self.command = command


class PlanConflict(ApplyError):
    """A target is neither what the plan saw nor what it would write; nothing was changed."""


class ValidationError(ApplyError):
    """New content failed its validator; the file was left unchanged."""


class CommandFailed(ApplyError):
    """A command action or handler exited non-zero."""


class VerifyError(ApplyError):
    """After applying, a target is not what the plan said it would be."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


# -- fault injection (see ojai_setup.apply.faults) -------------------------------------------
_FAULT_HOOK = faults._FAULT_HOOK
fault_point = faults.fault_point


# -- lookups ---------------------------------------------------------------------------------
def _load_lazy(registry: dict[str, Any], lazy: dict[str, tuple[str, str]], name: str,
               what: str) -> None:
    if name in registry or name not in lazy:
        return
    module_name, function = lazy[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ApplyError(f"cannot {what}: {module_name} cannot be imported ({exc})") from None
    if name not in registry:
        fn = getattr(module, function, None)
        if fn is None:
            raise ApplyError(f"cannot {what}: {module_name} has no {function}()")
        registry[name] = fn


def executor_for(kind: str) -> ExecutorFn:
    """The executor of ``kind``, importing its module on first use."""
    _load_lazy(EXECUTORS, LAZY_EXECUTORS, kind, f"carry out {kind} actions")
    try:
        return EXECUTORS[kind]
    except KeyError:
        raise ApplyError(f"no executor is registered for {kind} actions") from None


def validator_for(name: str) -> Validator:
    """The validator called ``name``, importing its module on first use."""
    _load_lazy(VALIDATORS, LAZY_VALIDATORS, name, f"run the {name!r} check")
    try:
        return VALIDATORS[name]
    except KeyError:
        raise ApplyError(f"no validator named {name!r} is registered") from None


def _outcome(result: ActionOutcome | bool | None, before: list[str | None],
             after: list[str | None]) -> ActionOutcome:
    if isinstance(result, ActionOutcome):
        return result
    if isinstance(result, bool):
        return ActionOutcome(result)
    return ActionOutcome(before != after or not before)


def _run_validator(fn: Validator, tmp: Path, action: WriteFile, root: Root) -> None:
    """Call a validator; one that takes a ``root`` parameter also gets the machine."""
    import inspect

    try:
        takes_root = "root" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_root = False
    if takes_root:
        fn(tmp, action, root=root)
    else:
        fn(tmp, action)


# -- built-in executors ----------------------------------------------------------------------
@register_executor("write_file")
def execute_write_file(root: Root, action: WriteFile, progress: Progress) -> ActionOutcome:
    """Write ``action.after``: temp file beside the target, fsync, validate, keep the original's
    mode and owner (``action.mode`` wins), rename over the target."""
    real = root.resolve(action.path)
    current = path_digest(root, action.path)
    if current == text_digest(action.after):
        mode = stat.S_IMODE(os.stat(real).st_mode)
        if action.mode is None or mode == action.mode:
            return ActionOutcome(False, f"{action.path} already has the planned content")
        os.chmod(real, action.mode)
        return ActionOutcome(True, f"{action.path}: mode {mode:o} -> {action.mode:o}")
    _expect(action.path, current, _write_before(action), text_digest(action.after))
    try:
        original = os.stat(real) if current is not None else None
        ensure_dir(real.parent, DIR_MODE)
        new = Replacement(real)
    except OSError as exc:
        raise ApplyError(f"cannot write {action.path}: {exc.strerror}") from None
    if action.mode is not None:
        mode = action.mode
    elif original is not None:
        mode = stat.S_IMODE(original.st_mode)
    else:
        mode = FILE_MODE

    def check(tmp: Path) -> None:
        if action.validate_with is None:
            return
        try:
            _run_validator(validator_for(action.validate_with), tmp, action, root)
        except Exception as exc:
            raise ValidationError(f"the new {action.path} failed the {action.validate_with!r} "
                                  f"check, so it was left unchanged: {exc}") from None

    new.commit(action.after.encode("utf-8"), mode=mode,
               owner=(original.st_uid, original.st_gid) if original is not None else None,
               check=check, before_rename=lambda: fault_point("before-rename"))
    return ActionOutcome(True, f"{'created' if current is None else 'updated'} {action.path}")


@register_executor("symlink")
def execute_symlink(root: Root, action: Symlink, progress: Progress) -> ActionOutcome:
    """Point ``action.path`` at ``action.target``: a new link beside it, renamed over it."""
    real = root.resolve(action.path)
    wanted = "symlink:" + action.target
    current = path_digest(root, action.path)
    if current == wanted:
        return ActionOutcome(False, f"{action.path} already points to {action.target}")
    _expect(action.path, current, _link_before(action), wanted)
    ensure_dir(real.parent, DIR_MODE)
    replace_symlink(real, action.target, before_rename=lambda: fault_point("before-rename"))
    return ActionOutcome(True, f"{action.path} -> {action.target}")


@register_executor("run_command")
def execute_run_command(root: Root, action: RunCommand, progress: Progress) -> ActionOutcome:
    """Run the command on the machine (replayed from its capture under a test root)."""
    command = shlex.join(action.argv)
    task = progress.task(f"run {command}", total=None)
    try:
        result = root.run(list(action.argv), env=dict(action.env) or None,
                          timeout=COMMAND_TIMEOUT)
    finally:
        task.done()
    if not result.ok:
        detail = (result.stderr.strip() or result.stdout.strip())[-800:]
        raise CommandFailed(f"`{command}` failed with exit code {result.exit_code}"
                            + (f": {detail}" if detail else ""))
    return ActionOutcome(True, f"ran {command}")


# -- conflicts and verification --------------------------------------------------------------
def _write_before(action: WriteFile) -> str | None:
    return None if action.before is None else text_digest(action.before)


def _link_before(action: Symlink) -> str | None:
    return None if action.before is None else "symlink:" + action.before


def _expect(path: str, current: str | None, before: str | None, after: str) -> None:
    if current not in (before, after):
        raise PlanConflict(f"{path} changed since the plan was made (the plan expected "
                           f"{describe_digest(before)}, found {describe_digest(current)}); "
                           f"nothing more was changed; run `ojai setup` again and review it")


def _precheck(root: Root, action: Any) -> None:
    """Raise PlanConflict when a file or link target moved away from the plan's picture."""
    if isinstance(action, WriteFile):
        _expect(action.path, path_digest(root, action.path), _write_before(action),
                text_digest(action.after))
    elif isinstance(action, Symlink):
        _expect(action.path, path_digest(root, action.path), _link_before(action),
                "symlink:" + action.target)


def _links_to(root: Root, link: str, dest: str) -> bool:
    """Whether machine path ``link`` is a symlink to ``dest`` (a relative target counts from
    the link's folder, which keeps links valid inside a machine root)."""
    digest = path_digest(root, link)
    if digest is None or not digest.startswith("symlink:"):
        return False
    target = PurePosixPath(digest.removeprefix("symlink:"))
    if not target.is_absolute():
        target = PurePosixPath(link).parent / target
    return os.path.normpath(str(target)) == os.path.normpath(dest)


def verify_action(root: Root, action: Any) -> str | None:
    """Why ``action``'s targets are not as planned after applying, or None when they are (the
    kind's verifier in :data:`~ojai_setup.model.actions.ACTION_KINDS`)."""
    where = ACTION_KINDS[action.kind].verifier
    if where is None:
        return None
    module, function = where
    return getattr(importlib.import_module(module), function)(root, action)


def verify_write_file(root: Root, action: WriteFile) -> str | None:
    real = root.resolve(action.path)
    now = path_digest(root, action.path)
    if now != text_digest(action.after):
        return (f"{action.path} does not hold the planned content after applying "
                f"(found {describe_digest(now)})")
    if action.mode is not None and stat.S_IMODE(os.stat(real).st_mode) != action.mode:
        return f"{action.path} does not have mode {action.mode:o} after applying"
    return None


def verify_symlink(root: Root, action: Symlink) -> str | None:
    now = path_digest(root, action.path)
    if now != "symlink:" + action.target:
        return (f"{action.path} does not point to {action.target} after applying "
                f"(found {describe_digest(now)})")
    return None


def verify_installed_folder(root: Root, action: InstallArchive | BuildFromSource | ProveBuild,
                            ) -> str | None:
    dest = getattr(action, "candidate", None) or action.dest  # a proven build's folder
    if path_digest(root, dest) != "directory":
        return f"{dest} is not a folder after installing"
    if action.link and not _links_to(root, action.link, dest):
        return f"{action.link} does not point to {dest} after installing"
    return None


def verify_write_secret(root: Root, action: WriteSecret) -> str | None:
    real = root.resolve(action.path)
    if path_digest(root, action.path) != action.sha256:
        return f"{action.path} does not hold the planned key after applying"
    if stat.S_IMODE(os.lstat(real).st_mode) != 0o600:
        return f"{action.path} is not mode 600 after applying"
    return None


def verify_create_system_user(root: Root, action: CreateSystemUser) -> str | None:
    from ojai_setup.apply.accounts import user_exists

    if not user_exists(root, action.name):
        return f"the system user {action.name} is missing after applying"
    return None


def verify_install_package(root: Root, action: InstallPackage) -> str | None:
    from ojai_setup.core.digest import sha256_file

    real = root.resolve(action.path)
    if not real.is_file() or sha256_file(real) != action.sha256.lower():
        return f"{action.path} is not the verified package after installing"
    return None


def verify_hub_download(root: Root, action: HubDownload) -> str | None:
    real = root.resolve(action.dest)
    if not real.is_file():
        return f"{action.dest} is missing after the download"
    if action.size is not None and real.stat().st_size != action.size:
        return (f"{action.dest} has {real.stat().st_size} bytes after the download, "
                f"expected {action.size}")
    return None


# -- apply -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ActionReport:
    step: str
    description: str
    changed: bool
    message: str
    #: machine paths the action writes
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class FollowUp:
    """A follow-up command (a handler) by its name and the command it runs."""

    name: str
    argv: tuple[str, ...]

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


@dataclass
class ApplyResult:
    """What an apply did (also when it stopped part way: see :func:`failure_of`)."""

    apply_id: str | None  # None when the plan had nothing to do
    actions: list[ActionReport] = field(default_factory=list)
    handlers: list[str] = field(default_factory=list)  # names of the handlers that ran
    reboot: list[str] = field(default_factory=list)  # reasons, from actions that changed
    journal: Path | None = None
    #: what an interrupted earlier apply left, settled before this one started
    recovered: str | None = None
    #: handler name -> its command, for every handler this apply knew of
    commands: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: the follow-up commands still owed when the apply ended (the next apply runs them)
    owed: list[FollowUp] = field(default_factory=list)
    #: follow-up commands that were run and failed: (command, why)
    failed_handlers: list[tuple[str, str]] = field(default_factory=list)
    #: machine paths whose original was backed up before they changed
    backed_up: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(a.changed for a in self.actions) or bool(self.handlers)

    @property
    def files_changed(self) -> list[str]:
        """The machine paths of the actions that changed something, in the order they did."""
        return list(dict.fromkeys(t for a in self.actions if a.changed for t in a.targets))

    def command_of(self, name: str) -> str:
        """The command of the handler ``name`` (the name itself when unknown)."""
        argv = self.commands.get(name)
        return shlex.join(argv) if argv else name

    @property
    def message(self) -> str:
        """One sentence for people: what changed, what ran, whether to reboot."""
        changed = [a for a in self.actions if a.changed]
        if not self.actions and not self.handlers:
            return "nothing to do: every step is satisfied"
        if not changed and not self.handlers:
            return (f"nothing changed: all {len(self.actions)} action(s) were already "
                    f"in place")
        parts = []
        if self.actions:
            parts.append(f"changed {len(changed)} of {len(self.actions)} action(s)")
        if self.handlers:
            parts.append("ran " + ", ".join(self.command_of(n) for n in self.handlers))
        if self.reboot:
            parts.append("reboot needed: " + "; ".join(self.reboot))
        return "; ".join(parts)


@dataclass(frozen=True)
class ApplyFailure:
    """How an apply that stopped part way ended, attached to the exception that stopped it
    (:func:`failure_of`): the first error, what was done before and after it (the follow-ups
    of finished edits that still ran, those still owed) and, for an interrupt, the signal
    (``SIGINT``, ``SIGTERM``). ``journal_error``: the journal could not be closed after it."""

    error: str
    result: ApplyResult
    signal: str | None = None
    journal_error: str | None = None


def failure_of(exc: BaseException) -> ApplyFailure | None:
    """What the apply that raised ``exc`` did before it stopped (None: it had not started)."""
    found = getattr(exc, "ojai_apply_failure", None)
    return found if isinstance(found, ApplyFailure) else None


class _Prefixed:
    """A :class:`Progress` whose tasks' names start with ``prefix``."""

    def __init__(self, progress: Progress, prefix: str) -> None:
        self._progress, self._prefix = progress, prefix

    def task(self, description: str, total: int | None = None):
        return self._progress.task(self._prefix + description, total)


def _ojai_program() -> str:
    """How to name this ojai to sudo: its full path when it is not on root's usual PATH (a
    virtualenv), else plain ``ojai``."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0].endswith("ojai") else ""
    found = shutil.which("ojai")
    path = os.path.abspath(argv0) if argv0 else found
    if not path or os.path.dirname(path) in ("/usr/bin", "/usr/local/bin", "/bin"):
        return "ojai"
    return path


def sudo_apply_command(root: Root, options: list[str], plan_path: str | None = None) -> str:
    """The whole ``sudo ojai setup ... --apply`` that applies as root what this user cannot:
    ``--root`` for a machine folder, the same options (a bare ``setup --apply`` would plan with
    the defaults), or the saved plan ``plan_path``."""
    where = [] if root.is_host else ["--root", str(root.path)]
    if plan_path:
        return "sudo " + shlex.join([_ojai_program(), "setup", *where, "--apply", "--plan",
                                     plan_path])
    return "sudo " + shlex.join([_ojai_program(), "setup", *where, *options, "--apply"])


def _writable(path: Path) -> bool:
    """Whether this user may write ``path``: the file itself when it exists, and the folder it
    is (or will be) created in, the nearest existing one."""
    effective = os.access in os.supports_effective_ids  # sudo -E, setuid: the effective user
    if path.exists() and not os.access(path, os.W_OK, effective_ids=effective):
        return False
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return os.access(parent, os.W_OK, effective_ids=effective)


def check_privileges(plan: Plan, root: Root, *, euid: int | None = None,
                     plan_path: str | None = None) -> None:
    """Raise :class:`NeedsRoot` when applying ``plan`` needs root and we lack it: on the host
    (any action that needs root), and on a machine folder (``--root``) whose files or folders
    the actions write this user may not write."""
    if (os.geteuid() if euid is None else euid) == 0:
        return
    needing = [p.action for p in plan.actions() if p.action.needs_root]
    if not root.is_host:
        needing = [a for a in needing
                   if not all(_writable(root.resolve(t)) for t in a.targets())]
    if not needing:
        return
    try:
        options = Settings(**plan.settings).options()
    except (InvalidModel, TypeError):
        options = []
    command = sudo_apply_command(root, options, plan_path)
    touched = ", ".join(dict.fromkeys(
        t for a in needing for t in (a.targets() or [a.describe()])))
    raise NeedsRoot(f"applying this plan needs root (it changes {touched}); nothing was "
                    f"changed. Run:\n  {command}", command)


def apply(plan: Plan, root: Root, progress: Progress, *,
          fault_hook: Callable[[str], None] | None = None, euid: int | None = None,
          plan_path: str | None = None, force_handlers: bool = True,
          locked: bool = False) -> ApplyResult:
    """Carry out exactly ``plan``'s actions on ``root``.

    A blocked step (and one waiting for it) carries no actions: the rest is applied without it.

    Before the first change: refuses a plan made for another root,
    raises :class:`NeedsRoot` (with the ``sudo`` command, naming ``plan_path``), loads every
    executor and validator, and raises :class:`PlanConflict` when a target is neither what the
    plan saw nor what it would write. Targets already as planned are left alone, so applying
    a plan twice changes nothing the second time.

    The actions run in :meth:`Plan.apply_order`: downloads, unpacking and builds first, then
    the other system files and the follow-up commands they notified, then what the next boot
    reads and its regeneration (``update-grub``) last, so that a failure in the long work
    leaves the boot untouched. Handlers notified by an action that changed something run
    once (and, when an earlier apply failed before running its handlers, those run too).
    When an action or a follow-up fails, the follow-ups of the edits that finished still run
    (``force_handlers``, as Ansible's), then the first error is raised. SIGINT and SIGTERM
    stop the apply (:class:`ApplyInterrupted`; the action under way is undone by its
    executor); the follow-ups of the finished edits then run too (``force_handlers``), unless
    a second signal comes, which leaves what is left of them owed. The exception that stopped an apply
    carries what it did (:func:`failure_of`). Every target is re-read afterwards
    (:class:`VerifyError`).

    ``locked``: the caller holds the machine's lock already (it planned under it); else it is
    taken here. ``fault_hook(stage)`` is called at each :func:`fault_point`; an exception it
    raises stops the apply there. ``euid`` stands in for the process's effective uid.
    """
    if plan.root != str(root.path):
        raise ApplyError(f"the plan was made for the machine at {plan.root}, not {root.path}; "
                         f"make a plan for this machine with `ojai setup`")
    planned = plan.apply_order()
    try:
        state = read_state(root, euid=euid)
    except JournalError as exc:
        raise ApplyError(f"{exc}; nothing was changed") from None
    if not planned and not state.pending_handlers and state.running is None:
        return ApplyResult(apply_id=None)
    check_privileges(plan, root, euid=euid, plan_path=plan_path)
    executors = {p.action.kind: executor_for(p.action.kind) for p in planned}
    run_handler = executor_for("run_command")
    for p in planned:
        name = getattr(p.action, "validate_with", None)
        if name is not None:
            validator_for(name)

    lock = None if locked else MachineLock(state_dir(root, euid=euid), "ojai setup --apply")
    if lock is not None:
        lock.acquire()
    try:
        try:
            recovered = recover(root, euid=euid)
        except (JournalError, OSError) as exc:
            raise ApplyError(f"cannot settle the interrupted apply: {exc}; nothing was "
                             f"changed") from None
        for p in planned:
            _precheck(root, p.action)
        return _apply_locked(plan, root, progress, planned, executors, run_handler,
                             fault_hook=fault_hook, euid=euid, recovered=recovered,
                             force_handlers=force_handlers)
    finally:
        if lock is not None:
            lock.release()


def finish_command(plan: Plan) -> str | None:
    """The whole ``ojai setup ... --apply`` command that plans again with ``plan``'s settings on
    its machine and finishes what an apply of it left (None: settings ojai cannot read)."""
    from pydantic import ValidationError

    try:
        return Settings.model_validate(plan.settings).command("--apply", root=plan.root)
    except (ValidationError, TypeError, ValueError):
        return None


def _planned_record(plan: Plan, planned: PlannedAction) -> PlannedRecord:
    a = planned.action
    return PlannedRecord(
        step=planned.step, kind=a.kind, description=a.describe(), targets=a.targets(),
        notify=[HandlerRecord(name=n, argv=plan.handlers[n].argv, env=dict(plan.handlers[n].env))
                for n in a.notify])


def _apply_locked(plan: Plan, root: Root, progress: Progress, planned: list[PlannedAction],  # noqa: C901
                  executors: dict[str, ExecutorFn], run_handler: ExecutorFn, *,
                  fault_hook: Callable[[str], None] | None, euid: int | None,
                  recovered: Interrupted | None, force_handlers: bool) -> ApplyResult:
    from ojai_setup.planning.plan import apply_phase

    try:
        journal = Journal(root, "apply", euid=euid, plan_fingerprint=plan.fingerprint.digest,
                          command=finish_command(plan))
    except JournalError as exc:
        raise ApplyError(f"{exc}; nothing was changed") from None
    result = ApplyResult(apply_id=journal.id, journal=journal.path,
                         recovered=recovered.message if recovered else None,
                         commands={name: cmd.argv for name, cmd in plan.handlers.items()})
    pending: dict[str, HandlerRecord] = {h.name: h for h in journal.state.pending_handlers}
    for h in pending.values():
        result.commands.setdefault(h.name, h.argv)
    token = _FAULT_HOOK.set(fault_hook) if fault_hook is not None else None
    error: str | None = None
    failure: BaseException | None = None
    signal_name: str | None = None
    journal_error: str | None = None
    steps = {s.step: s for s in plan.steps}
    left = {s.step: len(s.actions) for s in plan.steps}  # actions of each step still to run

    # a follow-up that a boot change notifies too runs once, after the boot changes
    boot_handlers = {n for p in planned if apply_phase(p.action) == "boot" for n in p.action.notify}

    def run_pending(*, later: frozenset[str] | set[str] = frozenset()) -> None:
        for name in list(pending):
            if name in later:
                continue
            record = pending[name]
            fault_point("handler-start")
            try:
                run_handler(root, RunCommand(argv=record.argv, env=record.env), progress)
            except CommandFailed as exc:
                journal.handler(record.model_copy(update={"exit_code": 1}))
                result.failed_handlers.append((shlex.join(record.argv), str(exc)))
                raise
            journal.handler(record.model_copy(update={"exit_code": 0}))
            result.handlers.append(name)
            del pending[name]
            journal.entry.owed = list(pending.values())
            journal.flush()
            fault_point("handler-done")

    signals = SignalGuard(ApplyInterrupted, once=True)
    overall = progress.task("apply plan", total=len(planned))
    with signals:
        try:
            # on disk before the first change: every action, every backup, what is owed
            journal.entry.owed = list(pending.values())
            journal.open([_planned_record(plan, p) for p in planned])
            fault_point("journal-opened")
            for p in planned:
                # downloads and installs are kept by rollback unless asked: no backup
                download = p.action.dest if isinstance(
                    p.action, (InstallArchive, BuildFromSource, HubDownload)) else None
                rollback_to = p.action.rollback_to if isinstance(p.action, WriteFile) else None
                for target in p.action.targets():
                    journal.stage(target, download=target == download, rollback_to=rollback_to)
            journal.flush()
            result.backed_up = [f.path for f in journal.entry.files if f.backup]
            fault_point("backups-written")
            booting = False
            for index, p in enumerate(planned):
                action = p.action
                if not booting and apply_phase(action) == "boot":
                    # every other change is in place and followed up: now the boot
                    booting = True
                    run_pending(later=boot_handlers)
                record = journal.entry.planned[index]
                record.status = "running"
                journal.flush()
                fault_point("action-start")
                targets = action.targets()
                before = [path_digest(root, t) for t in targets]
                try:
                    outcome = _outcome(executors[action.kind](root, action, progress),
                                       before, [path_digest(root, t) for t in targets])
                except BaseException:
                    record.status = "failed"
                    raise
                record.status, record.changed = "done", outcome.changed
                journal.action(ActionRecord(step=p.step, kind=action.kind,
                                            description=action.describe(),
                                            changed=outcome.changed,
                                            message=outcome.message))
                result.actions.append(ActionReport(p.step, action.describe(),
                                                   outcome.changed, outcome.message,
                                                   tuple(targets)))
                if outcome.changed:
                    for name in action.notify:
                        command = plan.handlers[name]
                        pending.setdefault(name, HandlerRecord(
                            name=name, argv=command.argv, env=dict(command.env)))
                    if action.needs_reboot:
                        result.reboot.append(action.needs_reboot)
                left[p.step] -= 1
                step = steps[p.step]
                if left[p.step] == 0 and any(r.changed for r in result.actions
                                             if r.step == p.step):
                    result.reboot.extend(step.reboot)
                    for key, value in step.records.items():
                        if isinstance(value, dict):
                            value = {**value, "boot_id": journal.entry.boot_id,
                                     "apply_id": journal.id}
                        journal.set_record(key, value)
                journal.entry.owed = list(pending.values())
                journal.flush()
                fault_point("action-done")
                overall.advance(1)
            overall.done()
            run_pending()
            result.reboot = list(dict.fromkeys(result.reboot))
            for reason in result.reboot:
                journal.reboot(reason)
            for p in planned:
                problem = verify_action(root, p.action)
                if problem is not None:
                    raise VerifyError(next(iter(p.action.targets()), ""), problem)
        except KeyboardInterrupt as exc:
            signals.hold()
            failure = exc
            signal_name = exc.signal_name if isinstance(exc, ApplyInterrupted) else "SIGINT"
            error = f"stopped by {signal_name}"
            if force_handlers and pending:
                # the edits that finished are followed up, so the machine is consistent; a
                # second signal leaves what is left owed, as --no-force-handlers would
                signals.stop_again()
                try:
                    _force_handlers(root, pending, result, journal, run_handler,
                                    _Prefixed(progress, f"after {signal_name} (again: leave "
                                              "it owed): "))
                except KeyboardInterrupt:
                    pass
                signals.hold()
        except Exception as exc:
            signals.hold()
            failure = exc
            error = str(exc) or type(exc).__name__
            if force_handlers:
                _force_handlers(root, pending, result, journal, run_handler, progress)
        except BaseException as exc:  # SystemExit and the like: journal it, pass it on
            signals.hold()
            error = str(exc) or type(exc).__name__
            raise
        finally:
            signals.hold()
            overall.done()
            if token is not None:
                _FAULT_HOOK.reset(token)
            result.reboot = list(dict.fromkeys(result.reboot))
            result.owed = [FollowUp(h.name, tuple(h.argv)) for h in pending.values()]
            try:
                journal.close("failed" if error else "complete", error,
                              pending_handlers=list(pending.values()))
            except JournalError as exc:
                if error is None:
                    raise
                # the first error is the one to report; the journal's own comes second
                journal_error = str(exc)
    if failure is not None:
        setattr(failure, "ojai_apply_failure", ApplyFailure(  # noqa: B010 - not a declared attribute
            error or "", result, signal=signal_name, journal_error=journal_error))
        raise failure
    return result


def _force_handlers(root: Root, pending: dict[str, HandlerRecord], result: ApplyResult,
                    journal: Journal, run_handler: ExecutorFn, progress: Progress) -> None:
    """After a failure: run the follow-ups the finished edits notified, each once, so that
    the machine is consistent; a follow-up that fails (or already failed) stays owed."""
    tried = {command for command, _ in result.failed_handlers}
    for name in list(pending):
        record = pending[name]
        if shlex.join(record.argv) in tried:
            continue
        try:
            fault_point("handler-start")
            run_handler(root, RunCommand(argv=record.argv, env=record.env), progress)
        except Exception as exc:
            journal.handler(record.model_copy(update={"exit_code": 1}))
            result.failed_handlers.append((shlex.join(record.argv), str(exc)))
            continue
        journal.handler(record.model_copy(update={"exit_code": 0}))
        result.handlers.append(name)
        del pending[name]
