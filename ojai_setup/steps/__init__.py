"""Setup steps, in the order they are planned and applied."""

from __future__ import annotations

from ojai_setup.model.facts import Facts
from ojai_setup.model.settings import Settings
from ojai_setup.planning.result import Step


def build_steps(settings: Settings, facts: Facts) -> list[Step]:
    from ojai_setup.steps.lemonade import LemonadeStep
    from ojai_setup.steps.llamacpp import LlamacppStep
    from ojai_setup.steps.models import ModelStep
    from ojai_setup.steps.npu import NpuStep
    from ojai_setup.steps.routes import RoutesStep
    from ojai_setup.steps.ttm import TtmStep

    return [TtmStep(), LlamacppStep(), ModelStep(), RoutesStep(), LemonadeStep(), NpuStep()]
