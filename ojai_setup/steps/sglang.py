"""An SGLang route on Instinct GPUs: its launch script and, with ``--systemd``, its unit.

The route (``domain/sglang-routes.toml``) is served by ``python -m sglang.launch_server`` with
the checkpoint's own NextN / MTP layer drafting through EAGLE, tensor parallel over as many of
the node's GPUs as the weights need (:func:`~ojai_setup.domain.sglang.choose_tp`). Every argument
is checked against the argument table of the SGLang that will run it (the installed package's
declarations, or the release ojai was made against when none is installed yet) before the
script is written; the plan records that version and table. Host, port and API key are
ojai's, as for the llama-server routes: 127.0.0.1 unless ``--host`` says otherwise, the key from
``--api-key-file`` through the unit's root-only environment file.
"""

from __future__ import annotations

from ojai_setup.core.address import is_loopback
from ojai_setup.core.paths import API_KEY_VARIABLE, ROUTES_DIR, SECRETS_DIR, UNITS_DIR
from ojai_setup.domain.routes import script_path
from ojai_setup.model.actions import RunCommand, WriteSecret
from ojai_setup.model.follow_ups import daemon_reload
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import StepResult

#: the root-only environment file giving every route its API key (the llama-server routes' too)
API_KEY_ENV = f"{SECRETS_DIR}/llama-server.env"


class SglangStep:
    name = "sglang"
    #: its unit runs as the service user
    needs = ("service-user",)

    def plan(self, ctx: Context) -> StepResult:
        assert ctx.sglang is not None, "planned only for an SGLang route (steps/stacks.py)"
        from ojai_setup.domain.checks import instinct_gpus
        from ojai_setup.domain.launch import LaunchError, render_sglang_script, render_sglang_unit
        from ojai_setup.domain.sglang import SGLANG_STATE_DIR, checked_args, choose_tp
        from ojai_setup.formats.sglang_args import UnsupportedSglangArgs

        route, install = ctx.sglang.route, ctx.sglang.install
        settings = ctx.settings
        if install.dialect is None:
            return StepResult.blocked(self.name, install.error or "cannot read SGLang's arguments")
        gpus = instinct_gpus(ctx.facts)
        sizes = [s for _, _, s in gpus if s]
        tp = choose_tp(route, len(gpus), min(sizes) if len(sizes) == len(gpus) and sizes else None)
        if tp.tp is None:
            return StepResult.blocked(self.name, tp.sentence)
        api_key = settings.api_key_file is not None
        try:
            args = checked_args(route, install.dialect, tp=tp.tp, host=settings.host,
                                port=settings.port, api_key=api_key)
        except UnsupportedSglangArgs as exc:
            return StepResult.blocked(self.name, str(exc))
        if api_key:
            args = args[:args.index("--api-key")]  # the script passes it from the environment
        actions: list = []
        handlers: dict[str, RunCommand] = {}
        warnings: tuple[str, ...] = ()
        if install.package is None:
            warnings += (f"SGLang is not installed where the route runs it ({install.python}): "
                         "install it there (SGLang's AMD guide: from source with the all_hip extra, "
                         "or use its lmsysorg/sglang ROCm image) before starting the route",)
        if not is_loopback(settings.host):
            guard = ("only with the API key from --api-key-file" if api_key else
                     "with no API key (set one with --api-key-file FILE --systemd)")
            warnings += (f"the SGLang route {route.name} listens on {settings.host} (not loopback): "
                         f"anyone who can reach this machine on port {settings.port} can use it, "
                         f"{guard}",)
        env_file = None
        if api_key:
            if not settings.systemd:
                return StepResult.blocked(self.name, "--api-key-file needs --systemd: the key "
                                          "reaches SGLang through the unit's root-only "
                                          "environment file, never through a script")
            from ojai_setup.planning.plan import path_digest

            digest = ctx.api_key_sha256
            if digest is None:
                return StepResult.blocked(self.name, ctx.api_key_error or "no API key")
            env_file = API_KEY_ENV
            real = ctx.root.resolve(API_KEY_ENV)
            if path_digest(ctx.root, API_KEY_ENV) != digest or (real.stat().st_mode & 0o777) != 0o600:
                actions.append(WriteSecret(path=API_KEY_ENV, variable=API_KEY_VARIABLE,
                                           source=settings.api_key_file, sha256=digest,
                                           needs_root=True, notify=("systemd",),
                                           reason="the API key the route asks for"))
                handlers["systemd"] = daemon_reload("load the new units")
        version = install.dialect.version
        # SGLang's AMD instructions start every Instinct server with SGLANG_USE_AITER=1: AMD's
        # aiter kernels for MoE, GEMM and MLA (docs.sglang.io, AMD GPUs and the DeepSeek pages)
        env = {"HF_HOME": f"{SGLANG_STATE_DIR}/huggingface", "SGLANG_USE_AITER": "1"}
        try:
            script = render_sglang_script(install.python, args, env, route.name, version=version,
                                          api_key_variable=API_KEY_VARIABLE if api_key else None)
            unit = render_sglang_unit(script_path(route.name), route.name, ctx.service_user,
                                      state_dir=SGLANG_STATE_DIR, env_file=env_file,
                                      groups=ctx.groups) if settings.systemd else None
        except LaunchError as exc:
            return StepResult.blocked(self.name, f"route {route.name}: {exc}")
        path = script_path(route.name)
        a = ctx.file_action(path, script, 0o755, f"launch script of the SGLang route {route.name}")
        if a:
            actions.append(a)
        if unit is not None:
            a = ctx.file_action(f"{UNITS_DIR}/ojai-{route.name}.service", unit, 0o644,
                                f"systemd unit for the SGLang route {route.name}", notify=("systemd",))
            if a:
                actions.append(a)
                handlers["systemd"] = daemon_reload("load the new units")
        spec = (f"{route.algorithm} with the checkpoint's MTP layer: steps {route.num_steps}, "
                f"top-k {route.eagle_topk}, {route.num_draft_tokens} draft tokens")
        record = {"script": path, "host": settings.host, "port": settings.port,
                  "server": "sglang", "model": route.name, "repo": route.repo, "tp": tp.tp,
                  "spec_type": route.algorithm, "draft_n_max": route.num_draft_tokens - 1,
                  "api_key_env": env_file, "sglang_version": version}
        records = {"routes": {route.name: record},
                   "sglang": {"version": version, "dialect": install.dialect.summary(),
                              "checked_against": install.note}}
        sentence = (f"the SGLang route {route.name} ({route.title}; port {settings.port}): {spec}; "
                    f"{tp.sentence}; arguments checked against {install.note}")
        if not actions:
            return StepResult.satisfied(self.name, f"{sentence}; its launch script is in place in "
                                        f"{ROUTES_DIR}", warnings=warnings)
        return StepResult.change(self.name, f"write {sentence}", actions, handlers=handlers,
                                 records=records, warnings=warnings)
