"""A saved plan (``ojai setup --out FILE``, then ``--plan FILE``): whether it is still fresh
for the machine, and why an apply of it is refused. It is planned again from the settings it
records and compared with what it says (:mod:`ojai_setup.planning.compare`)."""

from __future__ import annotations

from pathlib import Path

from ojai_setup.commands.planner import build_plan
from ojai_setup.commands.setup_views import SavedPlanReport
from ojai_setup.commands.terminal import Terminal
from ojai_setup.core.root import Root
from ojai_setup.core.status import ExitStatus
from ojai_setup.facts.collect import collect
from ojai_setup.model.settings import Settings
from ojai_setup.planning.plan import Plan, PlanFileError, check_fresh


def settings_problem(exc: Exception) -> str:
    """What is wrong with the settings a saved plan records, in words (``settings.port must be
    at most 65535``)."""
    from ojai_setup.core.problems import problems

    if hasattr(exc, "errors"):
        return problems(exc.errors(), prefix="settings.")
    return "a field ojai does not know"  # TypeError: an unexpected keyword


def recheck_saved(plan: Plan, root: Root, plan_file: Path) -> str | None:
    """Why a saved plan is refused (plan again from its settings; every action, file content
    and follow-up command must be the same), or None."""
    from pydantic import ValidationError

    from ojai_setup.planning.compare import plan_differences

    from ojai_setup.planning.plan import remake_command

    redo = f"make and review a new plan: `{remake_command(plan, str(plan_file))}`"
    try:
        settings = Settings(**plan.settings)
    except (ValidationError, TypeError) as exc:
        return (f"{plan_file}: the settings it records are not valid ({settings_problem(exc)}); "
                f"nothing was applied; {redo}")
    differences = plan_differences(plan, build_plan(root, settings))
    if not differences:
        return None
    shown = "; ".join(differences[:5]) + (f"; and {len(differences) - 5} more"
                                          if len(differences) > 5 else "")
    return (f"{plan_file} is not what ojai plans for this machine with the settings it records "
            f"(edited by hand, or stale): {shown}. Nothing was applied; {redo}")


def saved_plan_status(root: Root, plan: Plan, plan_file: Path) -> dict:
    """Whether a saved plan is still fresh for the machine at ``root``: its fingerprint (every
    file it read or writes, the facts, the ojai version) checked, and the plan made again from
    the settings it records compared step by step. The commands that make it again and apply
    it are given whole, options and ``--root`` included."""
    from pydantic import ValidationError

    from ojai_setup.core.errors import OjaiError
    from ojai_setup.planning.compare import step_differences
    from ojai_setup.planning.plan import apply_command, remake_command

    path = str(plan_file)
    stale = check_fresh(plan, root, collect(root), plan_path=path)
    changes = list(stale.changes) if stale else []
    steps: list[str] = []
    if plan.root == str(root.path):
        try:
            steps = step_differences(plan, build_plan(root, Settings(**plan.settings)))
        except (ValidationError, TypeError) as exc:
            steps = [f"the settings the plan records are not valid ({settings_problem(exc)})"]
        except OjaiError as exc:
            steps = [f"ojai cannot plan again with the settings the plan records: {exc}"]
    return {"path": path, "created": plan.created.isoformat(timespec="seconds"),
            "ojai_version": plan.ojai_version, "root": plan.root,
            "fresh": not changes and not steps, "changes": changes, "steps_differ": steps,
            "made_with": remake_command(plan, path), "apply_command": apply_command(plan, path)}


def show_saved(term: Terminal, root: Root, plan_file: Path, *, show_new: bool = False) -> int:
    """``ojai setup --plan FILE``: the saved plan and whether it is still fresh
    (:class:`SavedPlanReport`), with its exit code."""
    try:
        plan = Plan.load(plan_file)
    except PlanFileError as exc:
        term.error(str(exc))
        return ExitStatus.USAGE if exc.missing else ExitStatus.FAILED
    report = SavedPlanReport(plan, saved_plan_status(root, plan, plan_file), show_new=show_new)
    term.show(report)
    return report.exit_code
