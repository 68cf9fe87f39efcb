"""The NPU path: a FastFlowLM launch script (and with ``--systemd`` a unit) for a small always-on
model, when the NPU is ready."""

from __future__ import annotations

from ojai_setup.core.address import is_loopback
from ojai_setup.core.paths import FLM_PORT, GIB, ROUTES_DIR, UNITS_DIR
from ojai_setup.domain.lemonade import (
    NPU_STATE_KEY,
    config_commands,
    settings_done_before,
)
from ojai_setup.model.actions import RunCommand
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import StepResult

FLM = "/usr/bin/flm"


def flm_route_name(tag: str) -> str:
    return "flm-" + tag.replace(":", "-").replace(".", "_")


class NpuStep:
    name = "npu"

    def plan(self, ctx: Context) -> StepResult:
        from ojai_setup.domain.flm import (
            FLM_MODELS,
            NoModelFits,
            NpuStackFacts,
            choose_model,
            missing_npu_stack,
        )
        from ojai_setup.domain.launch import render_flm_script, render_flm_unit
        from ojai_setup.formats.flm import FlmStatus

        facts = ctx.facts
        settings = ctx.settings
        if not settings.npu:
            return StepResult.satisfied(self.name, "the NPU path is not asked for (--no-npu)")
        status = FlmStatus.model_validate(facts.npu.flm) if facts.npu and facts.npu.flm else None
        if status is None or not status.ready:
            todo = missing_npu_stack(status, NpuStackFacts(
                cmdline=" ".join(facts.cmdline or []),
                distro_id=facts.distro.id if facts.distro else "",
                lemonade_installed=ctx.lemonade is not None))
            what = "FastFlowLM is not installed" if status is None else \
                "the NPU is not ready (" + ", ".join(status.failed()) + ")"
            return StepResult.satisfied(self.name, f"NPU path not set up: {what}. To get it: "
                                        + "; ".join(todo))
        total = facts.memory.total_bytes if facts.memory else 0
        budget = total - ctx.budget_gib * GIB - 4 * GIB
        try:
            tag = choose_model([m.tag for m in FLM_MODELS], budget)
        except NoModelFits as exc:
            return StepResult.satisfied(self.name, f"NPU path not set up: {exc}")
        chosen = next(m for m in FLM_MODELS if m.tag == tag)
        ctx_len = chosen.context
        # the NPU's buffers are system memory outside the TTM limit: the route runs beside
        # whichever GPU route runs
        beside = (f"about {chosen.footprint_gb:g} GiB of the {budget / GIB:.1f} GiB of RAM left "
                  f"outside the {ctx.budget_gib} GiB GPU budget and the system's 4 GiB, so it "
                  "runs beside the GPU routes")
        name = flm_route_name(tag)
        script = f"{ROUTES_DIR}/{name}.sh"
        actions: list = []
        warnings: tuple[str, ...] = ()
        if not is_loopback(settings.host):
            warnings = (f"FastFlowLM {tag} will listen on {settings.host} (not loopback): anyone "
                        f"who can reach this machine on port 52625 can use it; FastFlowLM has "
                        f"no API key",)
        a = ctx.file_action(script, render_flm_script(tag, ctx_len=ctx_len, host=settings.host, flm=FLM),
                   0o755, f"launch script of FastFlowLM route {tag} on the NPU")
        if a:
            actions.append(a)
        handlers: dict = {}
        if settings.systemd:
            unit = render_flm_unit(script, tag, ctx.service_user, groups=ctx.groups)
            a = ctx.file_action(f"{UNITS_DIR}/ojai-{name}.service", unit, 0o644,
                       f"systemd unit for FastFlowLM route {tag}", notify=("systemd",))
            if a:
                actions.append(a)
                handlers["systemd"] = RunCommand(argv=("systemctl", "daemon-reload"),
                                                 needs_root=True, reason="load the new units")
        done: dict = {}
        if ctx.lemonade is not None:
            from ojai_setup.domain.lemonade import (
                LemonadeRoute,
                LemonadeSettings,
                lemonade_commands,
            )

            layout = ctx.lemonade.layout
            commands = lemonade_commands(LemonadeRoute(name=tag, engine="flm"),
                                         LemonadeSettings(layout=layout,
                                                          system_flm=ctx.which("flm") is not None))
            runs, more, done = config_commands(
                layout, commands, "lemonade-flm-backend", current=ctx.lemonade.config_value,
                done=settings_done_before(ctx.state.records))
            actions.extend(runs)
            handlers.update(more)
        if not actions:
            return StepResult.satisfied(self.name, f"FastFlowLM route {tag} (port {FLM_PORT}) "
                                        f"is in place: {script}; it needs {beside}",
                                        warnings=warnings)
        return StepResult.change(self.name, f"write the FastFlowLM launch script for {tag} "
                                 f"(port {FLM_PORT}; it needs {beside})", actions,
                                 handlers=handlers, warnings=warnings,
                                 records={"npu": {"tag": tag, "script": script, "port": FLM_PORT},
                                          NPU_STATE_KEY: {"config": done}})
