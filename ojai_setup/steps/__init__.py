"""Setup steps, in the order they are planned and applied."""

from __future__ import annotations

from ..facts.models import Facts
from ..settings import Settings
from .base import Step


def build_steps(settings: Settings, facts: Facts) -> list[Step]:
    from .ttm import TtmStep

    steps: list[Step] = [TtmStep()]
    return steps
