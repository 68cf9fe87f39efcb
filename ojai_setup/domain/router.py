"""Several routes behind one address: llama-server's router mode and its models preset.

``ojai setup --model A --model B`` serves each model under one route name (its drafted route
where it drafts, ``<model>-mtp``/``-draft``/``-ngram``; else, as an embedding model, its plain
route) from one llama-server started in router mode (build 11434's ``--models-preset FILE``,
``--models-max N``): the router reads the preset file, starts one child llama-server per model
when a request names it in its ``model`` field (``POST`` bodies; ``?model=`` on ``GET``), and
stops the least recently used one when ``N`` are loaded (``tools/server/server-models.cpp``).

The preset is an INI file (``common/preset.cpp``): one section per model, named as clients ask
for it, whose keys are the long options without their dashes and whose values are the options'
values (``true`` for a bare flag); ``load-on-startup`` and ``stop-timeout`` exist only there.
The router sets each child's ``--host``, ``--port`` and ``--alias`` itself, so they are left
out of the sections.

The memory is planned for the deployment as a whole (:func:`fit_router`): when every route fits
the GPU budget at once all stay loaded; otherwise as many as fit whatever the pair (the largest
ones together) are loaded at a time, the first of them at start, the others on demand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ojai_setup.core.paths import ROUTES_DIR
from ojai_setup.core.units import gib_text
from ojai_setup.formats.llama_help import Dialect

if TYPE_CHECKING:
    from ojai_setup.domain.catalog import Footprint, Route

#: the router's launch script, unit and preset are named after it
ROUTER = "router"
PRESET_PATH = f"{ROUTES_DIR}/{ROUTER}.ini"
#: the options the router sets for each child itself (left out of a preset's sections)
ROUTER_SETS = ("--host", "--port", "--alias", "-a")
#: seconds an on-demand route stays loaded without a request before its child sleeps (frees
#: its weights and cache), where the build has ``--sleep-idle-seconds``
IDLE_SECONDS = 600


class Member(NamedTuple):
    """One route of the deployment and the GPU memory it needs loaded."""

    name: str
    need_bytes: int


def served_name(route: Route) -> str:
    """The one name a catalog route is served under beside others: its drafted route's
    (``<model>-mtp``, ``-draft``, ``-ngram``), or an embedding model's plain route's."""
    from ojai_setup.domain.routes import route_names

    drafted, plain = route_names(route.name, route.drafted_suffix)
    return plain if route.embedding else drafted


def members(routes: list[tuple[Route, Footprint | None]], budget_bytes: int) -> list[Member]:
    """Each ``(route, footprint)`` with the GPU memory it needs loaded: its drafted route (one
    slot at the route's context), or an embedding model's plain route; a route that does not
    fit even alone is left out (the model step says so)."""
    from ojai_setup.domain.deployment import fit_gpu_routes

    out = []
    for route, footprint in routes:
        memory = fit_gpu_routes(route, budget_bytes, footprint=footprint)
        fitted = memory.plain if route.embedding else memory.mtp
        if fitted is not None:
            out.append(Member(name=served_name(route), need_bytes=fitted.need_bytes))
    return out


_gib = gib_text


class RouterFit(NamedTuple):
    """The routes against the GPU budget: how many are loaded at once, which at start."""

    budget_bytes: int
    members: tuple[Member, ...]
    #: the router's ``--models-max``
    models_max: int
    #: loaded at start (``load-on-startup``); the others load at their first request
    resident: tuple[str, ...]
    on_demand: tuple[str, ...]
    #: why the deployment cannot be served (None: it can)
    error: str | None = None

    @property
    def together_bytes(self) -> int:
        return sum(m.need_bytes for m in self.members)

    def sentence(self) -> str:
        each = ", ".join(f"{m.name} {_gib(m.need_bytes)}" for m in self.members)
        head = f"{each}; together {_gib(self.together_bytes)} of the {_gib(self.budget_bytes)} GPU budget"
        if self.error:
            return f"{head}: {self.error}"
        if not self.on_demand:
            return (f"{head}: all {len(self.members)} stay loaded at once "
                    f"(--models-max {self.models_max})")
        return (f"{head}: at most {self.models_max} loaded at once (--models-max "
                f"{self.models_max}); {', '.join(self.resident)} loaded at start, "
                f"{', '.join(self.on_demand)} on demand (at its first request, in place of the "
                "least recently used)")


def fit_router(members: list[Member], budget_bytes: int, models_max: int | None) -> RouterFit:
    """How many of ``members`` (in the order asked) may be loaded at once: all when they fit
    together; else the most whose largest fit together, so that any of them may be loaded
    beside the others (``models_max``, when given, must satisfy that)."""
    ordered = tuple(members)
    largest = sorted((m.need_bytes for m in ordered), reverse=True)
    fitting = 0
    while fitting < len(largest) and sum(largest[:fitting + 1]) <= budget_bytes:
        fitting += 1
    error = None
    if fitting == 0:
        too_big = [m.name for m in ordered if m.need_bytes > budget_bytes]
        error = f"{', '.join(too_big)} does not fit alone"
        count = 1
    elif models_max is not None:
        count = models_max
        if models_max > fitting:
            error = (f"--models-max {models_max}: the {models_max} largest together need "
                     f"{_gib(sum(largest[:models_max]))}, more than the budget; at most "
                     f"{fitting} fit at once (--models-max {fitting})")
    else:
        count = fitting
    return RouterFit(budget_bytes=budget_bytes, members=ordered, models_max=count,
                     resident=tuple(m.name for m in ordered[:count]),
                     on_demand=tuple(m.name for m in ordered[count:]), error=error)


def _options(args: list[str], dialect: Dialect) -> list[tuple[str, str]]:
    """``args`` (rendered for ``dialect``) as preset keys and values, without what the router
    sets itself."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(args):
        flag = args[i]
        opt = dialect.option(flag)
        takes = opt.takes_value if opt is not None else "no"
        has_value = i + 1 < len(args) and (takes == "required" or (
            takes == "optional" and not args[i + 1].startswith("-")))
        value = args[i + 1] if has_value else "true"
        i += 2 if has_value else 1
        if flag in ROUTER_SETS:
            continue
        out.append((flag.lstrip("-"), value))
    return out


def render_preset(sections: list[tuple[str, list[str], bool]], dialect: Dialect, *,
                  idle_seconds: int | None = None) -> str:
    """The models preset: for each route its name, its rendered ``llama-server`` arguments and
    whether it loads at start. ``idle_seconds``: a route loaded on demand sleeps after that
    long without a request (``--sleep-idle-seconds``, where ``dialect`` has it)."""
    lines = ["; llama-server router mode: one section per route, named as clients ask for it",
             "; (the request's \"model\" field); written by ojai setup", "version = 1", ""]
    sleeps = idle_seconds is not None and dialect.has("--sleep-idle-seconds")
    for name, args, at_start in sections:
        lines.append(f"[{name}]")
        for key, value in _options(args, dialect):
            if any(c in value for c in "\n;#"):
                raise ValueError(f"route {name}: --{key} {value!r} cannot be written in the "
                                 "models preset (a newline, ';' or '#')")
            lines.append(f"{key} = {value}")
        lines.append(f"load-on-startup = {'true' if at_start else 'false'}")
        if sleeps and not at_start:
            lines.append(f"sleep-idle-seconds = {idle_seconds}")
        lines.append("")
    return "\n".join(lines)


def router_args(dialect: Dialect, *, models_max: int, host: str, port: int) -> list[str]:
    """The router's own arguments: the preset, how many models at once, where it listens."""
    return ["--models-preset", PRESET_PATH, "--models-max", str(models_max),
            "--host", host, "--port", str(port)]
