"""Carrying out a :class:`~ojai_setup.model.actions.CreateSystemUser`: the unprivileged user the
services run as, made by ``systemd-sysusers`` (``useradd --system`` where it is missing).

Under a machine root other than ``/`` the tool is pointed at that root (``--root``), so a test
machine gets the user in its own ``/etc/passwd`` and the host's accounts are not touched.
"""

from __future__ import annotations

import shutil
import subprocess

from ojai_setup.apply.faults import fault_point
from ojai_setup.apply.outcome import ActionOutcome
from ojai_setup.core.errors import ApplyError
from ojai_setup.core.progress import Progress
from ojai_setup.core.root import Root
from ojai_setup.formats.accounts import has_user
from ojai_setup.model.actions import CreateSystemUser

NOLOGIN = "/usr/sbin/nologin"
HOME = "/nonexistent"


def user_exists(root: Root, name: str) -> bool:
    real = root.resolve("/etc/passwd")
    try:
        return has_user(real.read_text(encoding="utf-8", errors="replace"), name)
    except FileNotFoundError:
        return False


def sysusers_line(action: CreateSystemUser) -> str:
    """The ``sysusers.d`` line creating the user (and a group of the same name)."""
    description = (action.description or f"{action.name} services").replace('"', "'")
    return f'u {action.name} - "{description}" {HOME} {NOLOGIN}'


def _command(root: Root, action: CreateSystemUser) -> list[str]:
    if shutil.which("systemd-sysusers"):
        argv = ["systemd-sysusers"]
        if not root.is_host:
            argv.append(f"--root={root.path}")
        return [*argv, "--inline", sysusers_line(action)]
    if shutil.which("useradd"):
        argv = ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", HOME,
                "--shell", NOLOGIN, "--comment", action.description or f"{action.name} services"]
        if not root.is_host:
            argv += ["--root", str(root.path)]
        return [*argv, action.name]
    raise ApplyError(f"cannot create the system user {action.name}: neither systemd-sysusers "
                     "nor useradd is installed")


def execute_create_system_user(root: Root, action: CreateSystemUser,
                               progress: Progress) -> ActionOutcome:
    if user_exists(root, action.name):
        return ActionOutcome(False, f"the system user {action.name} exists already")
    argv = _command(root, action)
    fault_point("before-rename")
    task = progress.task(f"create the system user {action.name}", total=None)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              stdin=subprocess.DEVNULL, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ApplyError(f"cannot create the system user {action.name}: {exc}") from None
    finally:
        task.done()
    if proc.returncode != 0 or not user_exists(root, action.name):
        detail = (proc.stderr.strip() or proc.stdout.strip())[-500:]
        if not detail:  # the tool said nothing (systemd-sysusers on a full disk): say what we see
            try:
                free = shutil.disk_usage(root.resolve("/etc")).free
            except OSError:
                free = None
            detail = (f"it printed nothing, and /etc/passwd has no {action.name}"
                      + (f"; {free // 1024} KiB are free where /etc is" if free is not None
                         else "")
                      + ("; the disk is full" if free is not None and free < 1 << 20 else ""))
        raise ApplyError(f"`{' '.join(argv)}` did not create the system user {action.name} "
                         f"(exit {proc.returncode}): {detail}")
    return ActionOutcome(True, f"created the system user {action.name}")
