"""Lemonade in front of the routes: its model registry, load options and engine settings.

Writes the route into ``user_models.json`` and ``recipe_options.json`` in the config directory
Lemonade really reads (system service or standalone), keeping every entry the user has, and
plans the ``lemonade config set`` / ``lemonade backends install`` calls the route needs.
"""

from __future__ import annotations

from ojai_setup.core.paths import GIB, LLAMA_SERVER
from ojai_setup.domain.lemonade import STATE_KEY, config_commands, settings_done_before
from ojai_setup.model.actions import RunCommand
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import StepResult


class LemonadeStep:
    name = "lemonade"

    def plan(self, ctx: Context) -> StepResult:
        from ojai_setup.domain.lemonade import (
            LemonadeRoute,
            LemonadeSettings,
            lemonade_commands,
            recipe_options_action,
            user_models_action,
        )
        from ojai_setup.formats.lemonade import ConfigError

        settings = ctx.settings
        if not settings.model:
            return StepResult.satisfied(self.name, "no model route asked for")
        if ctx.lemonade is None:
            return StepResult.satisfied(
                self.name, "Lemonade is not installed, so only the launch scripts serve the "
                "routes (to add it: sudo add-apt-repository ppa:lemonade-team/stable && sudo apt "
                "install lemonade-server)")
        model = ctx.route
        if model is None:
            return StepResult.blocked(self.name, ctx.route_error or "no such route")
        layout = ctx.lemonade.layout
        args = ["--spec-draft-n-max", str(model.draft_n_max)]
        try:
            writes = [a for a in (
                user_models_action(ctx.root, layout, model.name, model.lemonade_checkpoint,
                                   model.lemonade_draft_checkpoint,
                                   max(round(model.weights_bytes / GIB, 2), 0.01), ["mtp"]),
                recipe_options_action(ctx.root, layout, f"user.{model.name}", model.context_size,
                                      "rocm", args),
            ) if a is not None]
            own = LLAMA_SERVER if settings.llamacpp != "none" else None
            commands = lemonade_commands(
                LemonadeRoute(name=model.name, engine="llamacpp"),
                LemonadeSettings(layout=layout, llama_server=own))
        except ConfigError as exc:
            return StepResult.blocked(self.name, f"{exc} (nothing was overwritten)")
        runs, handlers, done = config_commands(
            layout, commands, "lemonade-backends", current=ctx.lemonade.config_value,
            done=settings_done_before(ctx.state.records))
        actions = [*writes, *runs]
        if writes and layout.mode == "system-service":
            handlers["lemond-restart"] = RunCommand(argv=("systemctl", "restart", "lemond"),
                                                    needs_root=True, reason="lemond rereads its models")
            actions = [w.model_copy(update={"notify": ("lemond-restart",)}) for w in writes] + runs
        reads = (f"{layout.config_dir}/config.json",)
        if not actions:
            return StepResult.satisfied(self.name, f"Lemonade ({layout.mode}, {layout.config_dir}) "
                                        f"already serves user.{model.name}", reads=reads)
        return StepResult.change(
            self.name, f"register user.{model.name} (label mtp) with Lemonade in "
            f"{layout.config_dir} ({layout.reason})", actions, handlers=handlers, reads=reads,
            records={STATE_KEY: {"config": done}})
