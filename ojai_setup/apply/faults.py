"""Named points where a test can stop an apply or a rollback (an exception, or a real
``kill -9`` of the process), to prove that every boundary leaves a machine ojai can finish or
undo. Nothing fires unless a hook is set."""

from __future__ import annotations

import contextvars
from typing import Callable

_FAULT_HOOK: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "ojai_fault_hook", default=None)


def set_fault_hook(hook: Callable[[str], None] | None) -> contextvars.Token:
    return _FAULT_HOOK.set(hook)


def fault_point(stage: str) -> None:
    """Give an injected fault the chance to fire at ``stage``."""
    hook = _FAULT_HOOK.get()
    if hook is not None:
        hook(stage)
