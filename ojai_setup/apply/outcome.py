"""What an executor did (:class:`ActionOutcome`): its own module, so that an executor module
the executor imports (accounts) needs nothing from the executor."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ActionOutcome:
    """What an executor did: whether it changed anything, in a sentence."""

    changed: bool
    message: str = ""
