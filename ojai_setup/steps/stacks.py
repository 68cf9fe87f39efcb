"""The serving stacks, one row each: which setup steps a plan has for the stack that serves its
route, and why the others stand down.

llama.cpp (the default) installs llama-server, downloads the route's model, writes its launch
files, and puts Lemonade and the NPU beside it; an SGLang route on Instinct GPUs
(``domain/sglang-routes.toml``) is served by SGLang alone, which fetches its own weights. The
plan lists every step either way: a step its stack leaves out is satisfied, with the sentence
given here, so that no step has to ask which stack it is in. A new stack (a backend) is a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ojai_setup.core.paths import GIB
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import Step, StepResult


def _no_sglang_route(ctx: Context) -> str:
    from ojai_setup.domain.sglang import sglang_routes

    return ("no SGLang route asked for (those for Instinct GPUs: --model "
            + ", ".join(sglang_routes()) + ")")


def _sglang_fetches(ctx: Context) -> str:
    from ojai_setup.domain.sglang import SGLANG_STATE_DIR

    r = ctx.sglang.route
    return (f"{r.name}: ojai downloads nothing; SGLang fetches {r.repo} (about "
            f"{r.weights_bytes / GIB:.0f} GiB, the MTP layer inside it) into "
            f"{SGLANG_STATE_DIR}/huggingface at its first start")


@dataclass(frozen=True)
class Stack:
    name: str
    #: whether the context's route is served by this stack
    serves: Callable[[Context], bool]
    #: the steps this stack leaves out, each with the sentence saying why
    leaves_out: dict[str, Callable[[Context], str]] = field(default_factory=dict)


#: the first stack that serves the context's route is the plan's
STACKS: tuple[Stack, ...] = (
    Stack("sglang", serves=lambda ctx: ctx.sglang is not None, leaves_out={
        "llama.cpp": lambda ctx: (f"llama.cpp is not installed: {ctx.sglang.route.name} is an "
                                  "SGLang route, served by SGLang on the GPUs"),
        "model": _sglang_fetches,
        "routes": lambda ctx: (f"no llama-server routes: {ctx.sglang.route.name} is an SGLang "
                               "route (the sglang step)"),
        "lemonade": lambda ctx: (f"Lemonade is not in this path: {ctx.sglang.route.name} is "
                                 "served by SGLang itself"),
        "npu": lambda ctx: "no NPU route beside the SGLang route",
    }),
    Stack("llama.cpp", serves=lambda ctx: True, leaves_out={
        "sglang": _no_sglang_route,
    }),
)


def stack_of(ctx: Context) -> Stack:
    """The serving stack of the route the context asks for."""
    return next(s for s in STACKS if s.serves(ctx))


class StandDown:
    """A step the plan's serving stack leaves out: satisfied, saying why."""

    def __init__(self, name: str, why: Callable[[Context], str]) -> None:
        self.name, self._why = name, why

    def plan(self, ctx: Context) -> StepResult:
        return StepResult.satisfied(self.name, self._why(ctx))


def for_stack(steps: list[Step], ctx: Context) -> list[Step]:
    """``steps`` as the context's serving stack has them: each it leaves out standing down."""
    stack = stack_of(ctx)
    return [StandDown(s.name, stack.leaves_out[s.name]) if s.name in stack.leaves_out else s
            for s in steps]
