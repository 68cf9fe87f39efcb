"""A saved plan is checked, not trusted: it must be what ojai plans now from the same settings.

``ojai setup --apply --plan FILE`` plans again from the settings the file records and applies
the file only when every action (with the whole content of every file it writes), every
follow-up command and every state record is the same. :func:`plan_differences` names each
difference, so a plan edited by hand, or one that went stale, is refused with a reason.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from ojai_setup.model.actions import WriteFile
from ojai_setup.planning.plan import Plan, PlannedAction


def _dump(model: Any) -> Any:
    return json.loads(model.model_dump_json())


def _first_line_difference(saved: str | None, fresh: str | None) -> str:
    a = (saved or "").splitlines()
    b = (fresh or "").splitlines()
    for n, (x, y) in enumerate(zip(a, b, strict=False), start=1):
        if x != y:
            return f"line {n}: saved {x!r}, planned now {y!r}"
    if len(a) != len(b):
        n = min(len(a), len(b)) + 1
        extra = (a if len(a) > len(b) else b)[n - 1]
        who = "saved" if len(a) > len(b) else "planned now"
        return f"line {n} only in the {who} content: {extra!r}"
    return "line ends or the final newline differ"


def _action_difference(saved: PlannedAction, fresh: PlannedAction) -> str | None:
    a, b = saved.action, fresh.action
    if _dump(a) == _dump(b) and saved.step == fresh.step:
        return None
    if isinstance(a, WriteFile) and isinstance(b, WriteFile) and a.path == b.path:
        if a.after != b.after:
            return (f"the content it writes to {a.path} is not what ojai plans now "
                    f"({_first_line_difference(a.after, b.after)})")
        if a.before != b.before:
            return f"the content it expects in {a.path} is not what is there now"
    da, db = _dump(a), _dump(b)
    fields = sorted(k for k in set(da) | set(db) if da.get(k) != db.get(k))
    return (f"{a.describe()} (step {saved.step}) differs from what ojai plans now "
            f"({fresh.action.describe()}, step {fresh.step}) in {', '.join(fields) or 'its step'}")


def plan_differences(saved: Plan, fresh: Plan) -> list[str]:
    """Every way ``saved`` differs from ``fresh`` (planned now from the same settings)."""
    found: list[str] = []
    old, new = saved.actions(), fresh.actions()
    matcher = difflib.SequenceMatcher(a=[json.dumps(_dump(p)) for p in old],
                                      b=[json.dumps(_dump(p)) for p in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        pairs = list(zip(old[i1:i2], new[j1:j2], strict=False))
        for s, f in pairs:
            why = _action_difference(s, f)
            if why:
                found.append(why)
        for s in old[i1 + len(pairs):i2]:
            found.append(f"the saved plan has an action ojai does not plan now: "
                         f"{s.action.describe()} (step {s.step})")
        for f in new[j1 + len(pairs):j2]:
            found.append(f"ojai now plans an action the saved plan lacks: "
                         f"{f.action.describe()} (step {f.step})")
    for name in sorted(set(saved.handlers) | set(fresh.handlers)):
        s, f = saved.handlers.get(name), fresh.handlers.get(name)
        if s is None:
            found.append(f"ojai now plans the follow-up command {name} ({f.describe()}), "
                         f"which the saved plan lacks")
        elif f is None:
            found.append(f"the saved plan has a follow-up command ojai does not plan now: "
                         f"{name} ({s.describe()})")
        elif _dump(s) != _dump(f):
            found.append(f"the follow-up command {name} is `{s.describe()[4:]}` in the saved "
                         f"plan, `{f.describe()[4:]}` as planned now")
    saved_steps = {r.step: r for r in saved.steps}
    # a step that cannot be applied any more says why first: its actions are gone because of it
    blocked = [f"step {r.step} is blocked now: {r.sentence}" for r in fresh.steps
               if r.status == "blocked" and r.step in saved_steps
               and saved_steps[r.step].status != "blocked"]
    found = blocked + found
    for r in fresh.steps:
        s = saved_steps.get(r.step)
        if s is None:
            continue
        if s.status != r.status and not found:
            found.append(f"step {r.step} is {s.status} in the saved plan, {r.status} now")
        if s.waits_for != r.waits_for:  # the steps an apply of it leaves out
            found.append(f"step {r.step} waits for "
                         f"{' and '.join(s.waits_for) or 'nothing'} in the saved plan, for "
                         f"{' and '.join(r.waits_for) or 'nothing'} now")
        if _dump(s).get("records") != _dump(r).get("records"):
            found.append(f"the state records of step {r.step} differ from what ojai plans now")
    if [r.step for r in saved.steps] != [r.step for r in fresh.steps]:
        found.append("the saved plan's steps are not the steps ojai plans now")
    return found


def step_differences(saved: Plan, fresh: Plan) -> list[str]:
    """Step by step, how ``saved`` differs from ``fresh`` (planned now from the same settings):
    one sentence per step whose status, sentence or actions are not the same any more."""
    found: list[str] = []
    fresh_steps = {r.step: r for r in fresh.steps}
    saved_names = [r.step for r in saved.steps]
    for s in saved.steps:
        f = fresh_steps.get(s.step)
        if f is None:
            found.append(f"step {s.step} is in the saved plan but not planned now")
            continue
        if s.status != f.status:
            found.append(f"{s.step}: {s.status} in the saved plan, {f.status} now ({f.sentence})")
            continue
        if s.waits_for != f.waits_for:
            found.append(f"{s.step}: waits for {' and '.join(s.waits_for) or 'nothing'} in the "
                         f"saved plan, for {' and '.join(f.waits_for) or 'nothing'} now")
            continue
        old, new = [_dump(a) for a in s.actions], [_dump(a) for a in f.actions]
        if old != new:
            pairs = [PlannedAction(step=s.step, action=a) for a in s.actions]
            again = [PlannedAction(step=f.step, action=a) for a in f.actions]
            why = next((w for a, b in zip(pairs, again, strict=False) if (w := _action_difference(a, b))), None)
            if why is None:
                why = f"{len(s.actions)} action(s) in the saved plan, {len(f.actions)} now"
            found.append(f"{s.step}: {why}")
        elif s.sentence != f.sentence:
            found.append(f"{s.step}: the saved plan says \u201c{s.sentence}\u201d, now "
                         f"\u201c{f.sentence}\u201d")
    found.extend(f"step {name} is planned now but not in the saved plan"
                 for name in fresh_steps if name not in saved_names)
    return found
