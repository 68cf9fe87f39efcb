"""Lemonade in front of the routes: its model registry, load options and engine settings.

Writes the route into ``user_models.json`` and ``recipe_options.json`` in the config directory
Lemonade really reads (system service or standalone), keeping every entry the user has, and
plans the ``lemonade config set`` / ``lemonade backends install`` calls the route needs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ojai_setup.core.paths import GIB
from ojai_setup.model.actions import RunCommand
from ojai_setup.model.facts import Facts
from ojai_setup.planning.result import PlanContext, StepResult
from ojai_setup.steps.llamacpp import SERVER

STATE_KEY = "lemonade"
#: the NPU step's Lemonade settings (a step's records replace its keys whole)
NPU_STATE_KEY = "lemonade-npu"


def lemonade_installed(facts: Facts) -> bool:
    return "lemonade" in facts.tools or "lemond" in facts.tools


def home_dir(ctx: PlanContext) -> str:
    """The home of the user Lemonade runs for (the sudo caller's, when run through sudo)."""
    if not ctx.root.is_host:
        return "/root"
    user = os.environ.get("SUDO_USER")
    return os.path.expanduser(f"~{user}") if user else str(Path.home())


def _config_value(ctx: PlanContext, config_dir: str, key: str):
    path = f"{config_dir}/config.json"
    if not ctx.root.exists(path):
        return None
    try:
        data = json.loads(ctx.root.read_text(path))
    except ValueError:
        return None
    if key in data:
        return data[key]
    node = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _done_before(ctx: PlanContext) -> dict:
    from ojai_setup.facts.state import read_state

    try:
        records = read_state(ctx.root).records
    except Exception:  # noqa: BLE001 - an unreadable state only means "not done before"
        return {}
    done: dict = {}
    for key in (STATE_KEY, NPU_STATE_KEY):
        record = records.get(key)
        if isinstance(record, dict):
            done.update(record.get("config", {}))
    return done


def config_commands(ctx: PlanContext, layout, commands: list[list[str]], handler: str
                    ) -> tuple[list[RunCommand], dict[str, RunCommand], dict[str, str]]:
    """``config set`` calls still needed (one action each), ``backends install`` calls as a
    handler run after them, and the settings to record as done."""
    done = _done_before(ctx)
    actions: list[RunCommand] = []
    handlers: dict[str, RunCommand] = {}
    settings: dict[str, str] = {}
    sets = [c for c in commands if c[1:3] == ["config", "set"]]
    installs = [c for c in commands if c[1:3] == ["backends", "install"]]
    for cmd in sets:
        key, _, value = cmd[3].partition("=")
        settings[key] = value
        current = _config_value(ctx, layout.config_dir, key)
        if str(current).lower() == value.lower() or (current is None and done.get(key) == value):
            continue
        actions.append(RunCommand(argv=tuple(cmd), needs_root=layout.mode == "system-service",
                                  reason=f"Lemonade setting {key}={value}",
                                  notify=(handler,) if installs else ()))
    if installs:
        argv = ("sh", "-c", " && ".join(" ".join(c) for c in installs)) if len(installs) > 1 \
            else tuple(installs[0])
        handlers[handler] = RunCommand(argv=argv, needs_root=layout.mode == "system-service",
                                                   reason="install the engine Lemonade will use")
    return actions, handlers, settings


class LemonadeStep:
    name = "lemonade"

    def plan(self, ctx: PlanContext) -> StepResult:
        from ojai_setup.domain.lemonade import (
            LemonadeRoute,
            LemonadeSettings,
            detect_layout,
            lemonade_commands,
            recipe_options_action,
            user_models_action,
        )
        from ojai_setup.formats.lemonade import ConfigError
        from ojai_setup.steps.models import chosen_route

        facts: Facts = ctx.facts  # type: ignore[assignment]
        settings = ctx.settings
        if not settings.model:
            return StepResult.satisfied(self.name, "no model route asked for")
        if not lemonade_installed(facts):
            return StepResult.satisfied(
                self.name, "Lemonade is not installed, so only the launch scripts serve the "
                "routes (to add it: sudo add-apt-repository ppa:lemonade-team/stable && sudo apt "
                "install lemonade-server)")
        model = chosen_route(settings)
        layout = detect_layout(ctx.root, home_dir(ctx))
        args = ["--spec-draft-n-max", str(model.draft_n_max)]
        try:
            writes = [a for a in (
                user_models_action(ctx.root, layout, model.name, model.lemonade_checkpoint,
                                   model.lemonade_draft_checkpoint,
                                   max(round(model.weights_bytes / GIB, 2), 0.01), ["mtp"]),
                recipe_options_action(ctx.root, layout, f"user.{model.name}", model.context_size,
                                      "rocm", args),
            ) if a is not None]
            own = SERVER if settings.llamacpp != "none" else None
            commands = lemonade_commands(
                LemonadeRoute(name=model.name, engine="llamacpp"),
                LemonadeSettings(layout=layout, llama_server=own))
        except ConfigError as exc:
            return StepResult.blocked(self.name, f"{exc} (nothing was overwritten)")
        runs, handlers, done = config_commands(ctx, layout, commands, "lemonade-backends")
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
