"""The NPU path: a FastFlowLM launch script (and with ``--systemd`` a unit) for a small always-on
model, when the NPU is ready."""

from __future__ import annotations

from ojai_setup.core.address import is_loopback
from ojai_setup.core.paths import FLM_PORT, GIB, ROUTES_DIR, UNITS_DIR
from ojai_setup.model.actions import RunCommand
from ojai_setup.model.follow_ups import daemon_reload
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import StepResult

FLM = "/usr/bin/flm"


def flm_route_name(tag: str) -> str:
    return "flm-" + tag.replace(":", "-").replace(".", "_")


def lemonade_flm_name(tag: str) -> str:
    """The name Lemonade lists a FastFlowLM model under: the tag with ``:`` made ``-``, then
    ``-FLM`` (``gemma3:4b`` -> ``gemma3-4b-FLM``; ``flm_discover_models`` in lemonade-sdk/lemonade
    ``src/cpp/server/backends/fastflowlm/fastflowlm_models.cpp``)."""
    return tag.replace(":", "-") + "-FLM"


def restart_command(layout) -> RunCommand | None:
    """How lemond is restarted in ``layout``; None for a lemond ojai does not manage (standalone)."""
    if layout.mode == "system-service":
        return RunCommand(argv=("systemctl", "restart", "lemond"), needs_root=True,
                          reason="lemond lists FastFlowLM's models from its start")
    if layout.mode == "user-service":
        return RunCommand(argv=("systemctl", "--user", "restart", "lemond"),
                          reason="lemond lists FastFlowLM's models from its start")
    return None


def lemonade_layout_for(ctx: Context):
    """Lemonade's layout: the installed one, or the system service ``--lemonade distro|release``
    installs earlier in the same apply; None without Lemonade, and None when that install
    cannot be planned here (the lemonade step is blocked then, and says why)."""
    if ctx.lemonade is not None:
        return ctx.lemonade.layout
    if ctx.settings.lemonade == "none":
        return None
    from ojai_setup.domain.lemonade import lemonade_layout
    from ojai_setup.domain.lemonade_release import distro_install_commands

    distro = ctx.facts.distro
    distro_id, like = (distro.id, list(distro.like)) if distro else ("", [])
    if ctx.settings.lemonade == "release":
        from ojai_setup.domain.lemonade_release import release_refusal

        if release_refusal(distro_id, like) is not None or ctx.lemonade_deb is None:
            return None
    elif distro_install_commands(distro_id, like, distro.version if distro else "")[0] is None:
        return None

    return lemonade_layout(system_unit=True, system_enabled=True, user_enabled=False,
                           home=ctx.home)


class NpuStep:
    name = "npu"
    #: its unit runs as the service user; Lemonade, which lists its models, may be installed by
    #: the lemonade step of the same plan
    needs = ("service-user", "lemonade")

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
        if not ctx.profile.npu and status is None and not (facts.npu and facts.npu.accel_devices):
            return StepResult.satisfied(self.name, f"no NPU on this machine ({ctx.profile.name}): "
                                        "no NPU route to set up")
        if status is None or not status.ready:
            todo = missing_npu_stack(status, NpuStackFacts(
                cmdline=" ".join(facts.cmdline or []),
                distro_id=facts.distro.id if facts.distro else "",
                distro_like=tuple(facts.distro.like) if facts.distro else (),
                packages=frozenset(facts.packages or {}),
                kernel=facts.kernel.version if facts.kernel else None,
                kernel_release=facts.kernel.release if facts.kernel else None,
                lemonade_installed=ctx.lemonade is not None))
            what = "FastFlowLM is not installed" if status is None else \
                "the NPU is not ready (" + ", ".join(status.failed()) + ")"
            return StepResult.satisfied(self.name, f"NPU path not set up: {what}. To get it: "
                                        + "; ".join(t.rstrip(".") for t in todo) + ".")
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
        if status.busy():
            warnings = (f"flm validate reports {', '.join(status.busy())} busy: another process "
                        "holds the NPU, and the FastFlowLM route cannot start until it lets go "
                        "(`fuser -v /dev/accel/accel*` names it)",)
        if not is_loopback(settings.host):
            warnings = (*warnings, f"FastFlowLM {tag} will listen on {settings.host} (not loopback): anyone "
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
                handlers["systemd"] = daemon_reload("load the new units")
        done: dict = {}
        registered: str | None = None
        layout = lemonade_layout_for(ctx)
        if layout is not None:
            from ojai_setup.domain.lemonade import (
                NPU_STATE_KEY,
                LemonadeRoute,
                LemonadeSettings,
                config_commands,
                lemonade_commands,
                settings_done_before,
            )

            commands = lemonade_commands(LemonadeRoute(name=tag, engine="flm"),
                                         LemonadeSettings(layout=layout,
                                                          system_flm=ctx.which("flm") is not None))
            current = ctx.lemonade.config_value if ctx.lemonade else (lambda key: None)
            runs, more, done = config_commands(
                layout, commands, "lemonade-flm-backend", current=current,
                done=settings_done_before(ctx.state.records))
            registered = lemonade_flm_name(tag)
            before = ctx.state.records.get(NPU_STATE_KEY)
            if isinstance(before, dict) and before.get("model") == registered:
                actions.extend(runs)
                handlers.update(more)
            else:
                # Lemonade lists an FLM model in /api/v1/models once FastFlowLM has it (its
                # `flm list --json` says installed): `lemonade pull` has lemond fetch it with
                # its engine, after that engine is in place, so no handler runs after it
                # (`lemonade pull MODEL` takes a registered name: `lemonade pull --help` of
                # Debian's lemonade-server 2026.39.1-2)
                actions.extend(r.model_copy(update={"notify": ()}) for r in runs)
                actions.extend(RunCommand(argv=h.argv, needs_root=h.needs_root, reason=h.reason)
                               for h in more.values())
                restart = restart_command(layout)
                if runs and restart is not None:
                    # a running lemond applies `config set flm.prefer_system=true` to its backend
                    # states but keeps the model list it built at start, which holds FastFlowLM's
                    # models only when it found flm then: without a restart the pull answers
                    # "not found in available models" (seen with the real lemond 2026.39.1-2;
                    # lemonade-sdk/lemonade src/cpp/server/server.cpp, the config change handler
                    # calls SystemInfoCache::invalidate_recipes() but not
                    # invalidate_models_cache(), and fastflowlm_models.cpp lists FLM models in
                    # that cache from `flm list --json`)
                    actions.append(restart)
                elif runs:
                    warnings = (*warnings, "lemond runs standalone, so ojai cannot restart it: "
                                "restart it after `lemonade config set flm.prefer_system=true`, "
                                f"then run `lemonade pull {registered}` again (a running lemond "
                                "lists FastFlowLM's models only from its start)")
                actions.append(RunCommand(
                    argv=("lemonade", "pull", registered),
                    needs_root=layout.mode == "system-service",
                    reason=f"register the NPU model {tag} with Lemonade as {registered}"))
        if not actions:
            return StepResult.satisfied(self.name, f"FastFlowLM route {tag} (port {FLM_PORT}) "
                                        f"is in place: {script}; it needs {beside}",
                                        warnings=warnings)
        sentence = f"write the FastFlowLM launch script for {tag} (port {FLM_PORT}; it needs {beside})"
        if registered is not None and any(getattr(a, "argv", ())[:2] == ("lemonade", "pull")
                                          for a in actions):
            sentence += (f"; register it with Lemonade as {registered} (lemonade pull "
                         f"{registered}), listed in Lemonade's /api/v1/models beside the MTP route")
        from ojai_setup.domain.lemonade import NPU_STATE_KEY

        record = {"config": done, **({"model": registered} if registered else {})}
        return StepResult.change(self.name, sentence, actions, handlers=handlers,
                                 warnings=warnings,
                                 records={"npu": {"tag": tag, "script": script, "port": FLM_PORT},
                                          NPU_STATE_KEY: record})
