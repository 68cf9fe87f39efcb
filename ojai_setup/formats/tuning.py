"""The tuned settings file (``/etc/ojai/tuned.toml``): measured overrides of the catalog.

``ojai tune`` writes ``/etc/ojai/tuned.toml`` (under the machine root); ``ojai setup`` lays it
over the catalog when it plans the routes and Lemonade's recipe options, and says where each
value came from. One table per route (the catalog's model name)::

    [routes.gemma-4-26b-a4b]
    draft_n_max = 3
    date = "2026-11-30T21:40:00+00:00"
    speedup = 1.42            # confirmed mean speedup at that length (MTP over plain)
    binary = "/opt/ojai/llama.cpp/current/llama-server"
    results = "/var/lib/ojai/tune/gemma-4-26b-a4b.json"

    [routes.gemma-4-26b-a4b.backends."/opt/ojai/llama.cpp/b1311-vulkan/llama-server"]
    safe = false
    reason = "the MTP arm collapsed in the long generation: ..."

``ojai tune`` also chooses the kind of drafting; a route tuned to n-gram drafting says so::

    [routes.gemma-3-270m]
    spec_type = "ngram-simple"
    knobs = { "--spec-ngram-simple-size-n" = 3, "--spec-ngram-simple-size-m" = 8 }
    speedup = 2.71

and a route where nothing beat plain by the threshold is tuned to no drafting (the plain
route; ``speedup`` is then the best drafted setting's, a loss or too small a gain)::

    [routes.gemma-3-270m]
    drafting = false
    reason = "no setting beat plain by 5 %: best ngram-mod (n-max 16) +1.2 % (interval ...)"

A damaged file is an error naming the file and the field, never silently ignored.
"""

import tomllib

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ojai_setup.core.errors import InputError


class TuningError(InputError):
    """The tuned settings file is unreadable or invalid; the text says where."""


# Built (defer_build) when a tuned file is first read: only a model route or ojai tune reads one.
class BackendTuning(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    safe: bool
    reason: str = ""
    draft_n_max: int | None = Field(default=None, ge=1)
    speedup: float | None = None


class RouteTuning(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    #: False: measured, and no drafting beat plain; the route is served plain
    drafting: bool = True
    #: the chosen kind (``--spec-type`` value); None: the catalog's own
    spec_type: str | None = None
    draft_n_max: int | None = Field(default=None, ge=1)
    #: the n-gram knobs of the chosen kind, by flag (``--spec-ngram-simple-size-m`` = 8)
    knobs: dict[str, int] = {}
    reason: str = ""
    date: str
    speedup: float | None = None
    binary: str | None = None
    results: str | None = None
    backends: dict[str, BackendTuning] = {}

    @model_validator(mode="after")
    def _consistent(self) -> "RouteTuning":
        if self.drafting and self.draft_n_max is None and self.spec_type is None:
            raise ValueError("a drafted route's tuning needs draft_n_max or spec_type "
                             "(or drafting = false)")
        if not self.drafting and (self.draft_n_max is not None or self.spec_type or self.knobs):
            raise ValueError("drafting = false takes no draft_n_max, spec_type or knobs")
        return self

    def source(self) -> str:
        measured = f", measured {(self.speedup - 1) * 100:+.0f}%" if self.speedup is not None else ""
        if not self.drafting:
            return f"tuned {self.date[:10]}: no drafting beat plain{measured}"
        return f"tuned {self.date[:10]}{measured}"


class Tuning(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    routes: dict[str, RouteTuning] = {}


def parse_tuning(text: str, source: str) -> Tuning:
    """The tuned settings in ``text`` (read from ``source``, named in errors)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TuningError(f"{source}: not valid TOML: {exc}") from None
    try:
        return Tuning.model_validate(data)
    except ValidationError as exc:
        from ojai_setup.core.problems import problems

        raise TuningError(f"{source}: {problems(exc.errors())}; run `ojai tune` again to "
                          "write it anew, or remove it") from None


def _q(value: str) -> str:
    """A TOML basic string: backslash, quote and every control character escaped (a reason may
    carry a server log's lines)."""
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    out = out.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    out = "".join(c if ord(c) >= 0x20 and ord(c) != 0x7F else f"\\u{ord(c):04x}" for c in out)
    return '"' + out + '"'


def render_tuning(tuning: Tuning) -> str:
    lines = ["# Measured route settings, written by `ojai tune`; `ojai setup` applies them over the",
             "# catalog. Delete a route's table to go back to the catalog default.", ""]
    for name in sorted(tuning.routes):
        t = tuning.routes[name]
        lines.append(f"[routes.{_q(name)}]")
        if not t.drafting:
            lines.append("drafting = false")
        if t.spec_type is not None:
            lines.append(f"spec_type = {_q(t.spec_type)}")
        if t.draft_n_max is not None:
            lines.append(f"draft_n_max = {t.draft_n_max}")
        if t.knobs:
            lines.append("knobs = { " + ", ".join(f"{_q(k)} = {v}" for k, v in sorted(t.knobs.items()))
                         + " }")
        if t.reason:
            lines.append(f"reason = {_q(t.reason)}")
        lines.append(f"date = {_q(t.date)}")
        if t.speedup is not None:
            lines.append(f"speedup = {t.speedup!r}")
        for key in ("binary", "results"):
            value = getattr(t, key)
            if value is not None:
                lines.append(f"{key} = {_q(value)}")
        for binary in sorted(t.backends):
            b = t.backends[binary]
            lines += ["", f"[routes.{_q(name)}.backends.{_q(binary)}]", f"safe = {str(b.safe).lower()}"]
            if b.reason:
                lines.append(f"reason = {_q(b.reason)}")
            if b.draft_n_max is not None:
                lines.append(f"draft_n_max = {b.draft_n_max}")
            if b.speedup is not None:
                lines.append(f"speedup = {b.speedup!r}")
        lines.append("")
    return "\n".join(lines)
