"""Setup steps, in the order they are planned and applied.

Each step is pure: ``plan(ctx)`` takes the :class:`~ojai_setup.planning.context.Context`
gathered once before planning and returns a result; steps never import each other.
"""

from __future__ import annotations

from ojai_setup.planning.result import Step


def build_steps() -> list[Step]:
    from ojai_setup.steps.lemonade import LemonadeStep
    from ojai_setup.steps.llamacpp import LlamacppStep
    from ojai_setup.steps.models import ModelStep
    from ojai_setup.steps.npu import NpuStep
    from ojai_setup.steps.power import PowerStep
    from ojai_setup.steps.routes import RoutesStep
    from ojai_setup.steps.service_user import ServiceUserStep
    from ojai_setup.steps.sglang import SglangStep
    from ojai_setup.steps.ttm import TtmStep

    return [TtmStep(), LlamacppStep(), ModelStep(), ServiceUserStep(),
            RoutesStep(), SglangStep(), PowerStep(), LemonadeStep(), NpuStep()]
