"""The plan ``ojai setup`` makes for a machine: the context gathered once, every step planned
(:func:`ojai_setup.steps.build_steps`), and doctor's findings that matter to it."""

from __future__ import annotations

from ojai_setup.core.root import Root
from ojai_setup.model.settings import Settings
from ojai_setup.planning.gather import gather
from ojai_setup.planning.plan import Plan, make_plan


def build_plan(root: Root, settings: Settings) -> Plan:
    from ojai_setup.domain.checks import Severity, run_checks
    from ojai_setup.steps import build_steps

    try:
        ctx = gather(root, settings)
        plan = make_plan(ctx, build_steps(ctx))
    except PermissionError as exc:  # a file the plan must read, as a user who may not
        raise _unreadable(root, settings, exc) from None
    # what this plan changes is not a precondition of it (the TTM limit, when the step sets it)
    fixed_here = {"ttm"} if any(r.step == "gpu-memory" and r.status == "change"
                                for r in plan.steps) else set()
    findings = tuple(f for f in run_checks(ctx.facts, ctx.profile)
                     if Severity[f.severity.upper()] >= Severity.WARN
                     and f.id.split(".")[0] not in fixed_here)
    return plan.model_copy(update={"preconditions": findings})


def _unreadable(root: Root, settings: Settings, exc: PermissionError):
    """A file planning must read that this user may not: which one, and the command that
    plans as root."""
    import os
    import pwd

    from ojai_setup.core.errors import InputError

    path = str(exc.filename or "a file")
    try:
        path = root.machine_path(path)
    except ValueError:
        pass
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = f"user {os.geteuid()}"
    root_arg = "/" if root.is_host else str(root.path)
    return InputError(f"{path}: cannot be read as {user} (permission denied); the plan reads "
                      f"every file it may change, so plan as root: "
                      f"`sudo {settings.command(root=root_arg)}`")
