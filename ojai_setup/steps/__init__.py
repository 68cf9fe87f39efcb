"""Setup steps, in the order they are planned and applied."""

from __future__ import annotations

from ..facts.models import Facts
from ..settings import Settings
from .base import Step


def build_steps(settings: Settings, facts: Facts) -> list[Step]:
    from .lemonade import LemonadeStep
    from .llamacpp import LlamacppStep
    from .models import ModelStep
    from .npu import NpuStep
    from .routes import RoutesStep
    from .ttm import TtmStep

    return [TtmStep(), LlamacppStep(), ModelStep(), RoutesStep(), LemonadeStep(), NpuStep()]
