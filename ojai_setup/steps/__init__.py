"""Setup steps, in the order they are planned and applied.

Each step is pure: ``plan(ctx)`` takes the :class:`~ojai_setup.planning.context.Context`
gathered once before planning and returns a result; steps never import each other. The serving
stack of the route asked for (:mod:`ojai_setup.steps.stacks`) chooses which of them plan; the
others stand down, saying why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ojai_setup.planning.result import Step

if TYPE_CHECKING:
    from ojai_setup.planning.context import Context

#: every step's name, in plan order
STEP_NAMES = ("gpu-memory", "llama.cpp", "model", "service-user", "routes", "sglang", "power",
              "lemonade", "npu")


def build_steps(ctx: Context) -> list[Step]:
    """The steps of a plan for ``ctx``, as its serving stack has them."""
    from ojai_setup.steps.lemonade import LemonadeStep
    from ojai_setup.steps.llamacpp import LlamacppStep
    from ojai_setup.steps.models import ModelStep
    from ojai_setup.steps.npu import NpuStep
    from ojai_setup.steps.power import PowerStep
    from ojai_setup.steps.routes import RoutesStep
    from ojai_setup.steps.service_user import ServiceUserStep
    from ojai_setup.steps.sglang import SglangStep
    from ojai_setup.steps.stacks import for_stack
    from ojai_setup.steps.ttm import TtmStep

    return for_stack([TtmStep(), LlamacppStep(), ModelStep(), ServiceUserStep(),
                      RoutesStep(), SglangStep(), PowerStep(), LemonadeStep(), NpuStep()], ctx)
