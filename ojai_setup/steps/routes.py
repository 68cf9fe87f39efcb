"""What actually serves: launch scripts for the model's routes and Lemonade's configuration.

Two routes per catalog model, in the installed llama-server's own dialect:

- the drafted route, one slot (drafting gains invert under concurrency), named by its kind:
  ``<model>-mtp`` (MTP heads, alone or chained with n-gram types), ``<model>-draft`` (a
  separate draft model), ``<model>-ngram`` (n-gram drafting);
- ``<model>``: the plain route, several slots, drafting turned off explicitly where the binary
  has a way to say so (``--no-spec-type`` or ``--spec-type none``), on the next port.

The arguments are rendered for the installed binary (probed with ``--help``). When the binary
is not installed yet (it is in the same plan), they are rendered for the upstream llama.cpp
build ojai was tested against, and the plan made after applying checks them against the real
binary.
"""

from __future__ import annotations

import json
from pathlib import Path

from typing import TYPE_CHECKING

from ojai_setup.core.address import is_loopback
from ojai_setup.core.paths import API_KEY_VARIABLE, ROUTES_DIR, SECRETS_DIR, TUNED_FILE, UNITS_DIR
from ojai_setup.core.paths import GIB
from ojai_setup.domain.routes import route_names, script_path
from ojai_setup.model.actions import RunCommand, WriteSecret
from ojai_setup.model.follow_ups import daemon_reload
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import StepResult

if TYPE_CHECKING:
    from ojai_setup.domain.catalog import Route as CatalogRoute
    from ojai_setup.domain.render import Route

REFERENCE_HELP = Path(__file__).resolve().parent.parent / "formats" / "reference-help-b11434.txt"
#: HSA_OVERRIDE_GFX_VERSION for a GPU whose own target the binary lacks
OVERRIDES = {"gfx1150": "11.5.0", "gfx1151": "11.5.1"}


#: the root-only environment file giving every llama-server route its API key
API_KEY_ENV = f"{SECRETS_DIR}/llama-server.env"


def network_warning(what: str, host: str, ports: str, *, api_key: bool) -> str:
    """The warning a plan shows for a server listening beyond this machine."""
    guard = ("only with the API key from --api-key-file" if api_key else
             "with no API key (set one with --api-key-file FILE --systemd)")
    return (f"{what} listen on {host} (not loopback): anyone who can reach this machine on "
            f"port {ports} can use them, {guard}")


def _binary_targets(ctx: Context, binary: str) -> set[str] | None:
    """The GPU targets an ojai-installed binary was built for, from its install record."""
    record = ctx.root.resolve(str(Path(binary).parent)) / "ojai-install.json"
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    targets = {t for t in (data.get("family"), data.get("gpu_target")) if t}
    backend = data.get("backend")
    return targets or ({backend} if backend in ("cpu", "vulkan") else None)


def _vulkan_build(ctx: Context, binary: str) -> bool:
    """Whether ``binary`` is (or the nightly this plan installs will be) a Vulkan build: its
    launch script then sets no HSA override and no library path (upstream's Vulkan build finds
    its libraries and backends beside it through RPATH ``$ORIGIN``)."""
    if ctx.settings.llamacpp in ("nightly", "source") and binary == f"{ctx.llama_link}/llama-server":
        return ctx.settings.llamacpp_backend == "vulkan"  # what this apply puts behind the link
    return "vulkan" in (_binary_targets(ctx, binary) or ())


def _environment(ctx: Context, binary: str) -> dict[str, str]:
    from ojai_setup.domain.nightly import NightlyError, family_for_target

    target = ctx.gpu_target
    built_for = _binary_targets(ctx, binary)
    if target is None or built_for is None or built_for & {"cpu", "vulkan"}:
        return {}
    try:
        covered = target in built_for or family_for_target(target) in built_for
    except NightlyError:
        covered = target in built_for
    if covered or target not in OVERRIDES:
        return {}
    return {"HSA_OVERRIDE_GFX_VERSION": OVERRIDES[target]}


def drafted_route(model: CatalogRoute, name: str, main: str, draft: str | None, *, gpu: bool,
                  host: str, port: int, flash_attn: str | None = None,
                  load_mode: str | None = None) -> Route:
    """The drafted route of the catalog route ``model``: one slot, its ``spec_type`` (a chain
    where the catalog says so), the draft length for a model drafter, the n-gram knobs, and a
    separate draft model's GPU layers, context and cache types."""
    from ojai_setup.domain.render import Route

    separate = model.pair_kind == "draft_model"
    return Route(name=name, model=main, draft_model=draft, spec_type=model.spec_type_value,
                 draft_n_max=model.draft_n_max if model.model_drafted else None,
                 ctx_size=model.context_size, parallel=1,
                 n_gpu_layers="all" if gpu else None, host=host, port=port,
                 flash_attn=flash_attn, load_mode=load_mode,
                 ngram=model.ngram.flags() if model.ngram else {},
                 draft_n_gpu_layers=(model.draft_gpu_layers if gpu else None) if separate else None,
                 draft_ctx_size=model.draft_ctx_size if separate else None,
                 draft_cache_type_k=model.draft_cache_type if separate else None,
                 draft_cache_type_v=model.draft_cache_type if separate else None)


def _api_key(ctx: Context, actions: list, handlers: dict) -> str | None | StepResult:
    """With ``--api-key-file``: the environment file the units read (its write added to
    ``actions`` when it differs), or the blocked result; None without a key."""
    settings = ctx.settings
    if settings.api_key_file is None:
        return None
    if not settings.systemd:
        return StepResult.blocked(RoutesStep.name, "--api-key-file needs --systemd: the key "
                                  "reaches llama-server through the unit's root-only "
                                  "environment file, never through a script")
    from ojai_setup.planning.plan import path_digest

    digest = ctx.api_key_sha256
    if digest is None:
        return StepResult.blocked(RoutesStep.name, ctx.api_key_error or "no API key")
    real = ctx.root.resolve(API_KEY_ENV)
    if path_digest(ctx.root, API_KEY_ENV) != digest or (real.stat().st_mode & 0o777) != 0o600:
        actions.append(WriteSecret(path=API_KEY_ENV, variable=API_KEY_VARIABLE,
                                   source=settings.api_key_file, sha256=digest,
                                   needs_root=True, notify=("systemd",),
                                   reason="the API key the routes ask for"))
        handlers["systemd"] = daemon_reload("load the new units")
    return API_KEY_ENV


class RoutesStep:
    name = "routes"
    #: the launch scripts start this llama-server on these model files, as this user
    needs = ("llama.cpp", "model", "service-user")

    def plan(self, ctx: Context) -> StepResult:  # noqa: C901
        facts = ctx.facts
        settings = ctx.settings
        if not settings.model:
            return StepResult.satisfied(self.name, "no model route asked for, so no launch "
                                        "scripts (add --model NAME)")
        from ojai_setup.domain.deployment import PLAIN_SLOTS, fit_gpu_routes
        from ojai_setup.domain.launch import (
            LaunchError,
            has_bundled_libs,
            render_llama_script,
            render_llama_unit,
        )
        from ojai_setup.domain.render import Route, UnsupportedRoute, render_args

        model = ctx.route
        if model is None:
            return StepResult.blocked(self.name, ctx.route_error or "no such route")
        if settings.extra_models:
            return plan_router(ctx)
        if model.embedding:
            length = "embeddings only: nothing drafts"
        elif model.model_drafted:
            length = (f"draft length {model.draft_n_max}: "
                      f"{ctx.draft_length_source or 'catalog default'}")
        else:
            knobs = model.ngram.flags() if model.ngram else {}
            length = ("n-gram " + ", ".join(f"{k} {v}" for k, v in knobs.items()) if knobs
                      else "n-gram knobs: the binary's defaults")
        binary, installed = ctx.llama.path, ctx.llama.installed
        if binary is None:
            return StepResult.blocked(self.name, "no llama-server to launch: let ojai install "
                                      "one (--llamacpp nightly or source) or put one on PATH")
        if not binary.startswith("/"):
            return StepResult.blocked(self.name, f"{binary} is known on this captured machine only "
                                      "by its output, not by its path; let ojai install one "
                                      "(--llamacpp nightly or source)")
        dialect, note = ctx.llama.dialect, ctx.llama.note
        if dialect is None:
            return StepResult.blocked(self.name, ctx.llama.error or f"cannot read what {binary} supports")
        main = model.main_path(settings.models_dir)
        draft = model.draft_path(settings.models_dir)
        mtp_name, plain_name = route_names(model.name, model.drafted_suffix)
        # each route fitted with its own context and slots, then the two together
        memory = fit_gpu_routes(model, ctx.budget_gib * GIB, footprint=ctx.footprint)
        gpu = facts.gpu is not None and bool(facts.gpu.agents)
        from ojai_setup.domain.launch_defaults import decide

        launch = decide(dialect, gpu=gpu, catalog_flash_attn=model.flash_attn,
                        catalog_load_mode=model.load_mode, flash_attn=settings.flash_attn,
                        load_mode=settings.load_mode)
        routes = []
        if not model.embedding:
            try:
                routes.append(drafted_route(model, mtp_name, main, draft, gpu=gpu,
                                            host=settings.host, port=settings.port,
                                            flash_attn=launch.flash_attn,
                                            load_mode=launch.load_mode))
            except ValueError as exc:
                return StepResult.blocked(self.name, f"route {mtp_name}: {exc}")
        elif memory.plain is None:
            return StepResult.blocked(self.name, f"{plain_name}: {memory.sentence()}")
        # an embedding model's one route takes the first port
        plain_port = settings.port if model.embedding else settings.port + 1
        if memory.plain is not None:
            routes.append(Route(
                name=plain_name, model=main, ctx_size=memory.plain.ctx_size,
                parallel=PLAIN_SLOTS, n_gpu_layers="all" if facts.gpu and facts.gpu.agents else None,
                flash_attn=launch.flash_attn, load_mode=launch.load_mode,
                host=settings.host, port=plain_port, embeddings=model.embedding))
        vulkan = _vulkan_build(ctx, binary)
        env = {} if vulkan else _environment(ctx, binary)
        bundled = not vulkan and (has_bundled_libs(ctx.root, binary) or
                                  (not installed and settings.llamacpp == "nightly"))
        actions: list = []
        records: dict[str, dict] = {}
        handlers: dict[str, RunCommand] = {}
        warnings: tuple[str, ...] = memory.warnings()
        if ctx.llama.warning:
            warnings += (ctx.llama.warning,)
        if not is_loopback(settings.host):
            warnings += (network_warning(
                f"the llama-server route {plain_name}" if model.embedding else
                f"the llama-server routes {mtp_name} and {plain_name}", settings.host,
                str(settings.port) if model.embedding else f"{settings.port} and {settings.port + 1}",
                api_key=settings.api_key_file is not None),)
        key = _api_key(ctx, actions, handlers)
        if isinstance(key, StepResult):
            return key
        env_file = key
        for r in routes:
            try:
                args = render_args(r, dialect)
                script = render_llama_script(binary, args, env, r.name, bundled_libs=bundled)
            except (UnsupportedRoute, LaunchError) as exc:
                return StepResult.blocked(self.name, f"route {r.name}: {exc}")
            path = script_path(r.name)
            a = ctx.file_action(path, script, 0o755, f"launch script of route {r.name}{note}")
            if a:
                actions.append(a)
            drafted = r.spec_type != "none"
            records[r.name] = {"script": path, "host": r.host, "port": r.port,
                               "spec_type": r.spec_type, "draft_n_max": r.draft_n_max,
                               "slots": r.parallel, "model": model.name,
                               "main": main, "draft": draft, "mtp": model.mtp,
                               "pairing": model.pair_kind,
                               "drafting": model.drafting if drafted else "none",
                               **({"embedding": True} if model.embedding else {}),
                               "ngram": dict(r.ngram),
                               "api_key_env": env_file, "ctx_size": r.ctx_size,
                               "conflicts": list(memory.conflicts.get(r.name, ()))}
            if settings.systemd:
                try:
                    unit = render_llama_unit(path, r.name, ctx.service_user,
                                             models_dir=model.local_dir or settings.models_dir,
                                             host=r.host,
                                             env_file=env_file, groups=ctx.groups,
                                             conflicts=tuple(f"ojai-{other}.service" for other
                                                             in memory.conflicts.get(r.name, ())))
                except LaunchError as exc:
                    return StepResult.blocked(self.name, f"route {r.name}: {exc}")
                a = ctx.file_action(f"{UNITS_DIR}/ojai-{r.name}.service", unit, 0o644,
                           f"systemd unit for route {r.name}", notify=("systemd",))
                if a:
                    actions.append(a)
                    handlers["systemd"] = daemon_reload("load the new units")
        if model.embedding:
            what = f"{plain_name} (embeddings, {PLAIN_SLOTS} slots, port {plain_port})"
            if not actions:
                return StepResult.satisfied(self.name, f"the launch script for {what} is in "
                                            f"place in {ROUTES_DIR}; {memory.sentence()}; "
                                            f"{launch.sentence()}", warnings=warnings)
            return StepResult.change(
                self.name, f"write the launch script for {what}{note}; {memory.sentence()}; "
                f"{launch.sentence()}", actions, handlers=handlers, records={"routes": records},
                warnings=warnings)
        plain = (f" and {plain_name} (port {settings.port + 1})" if memory.plain is not None
                 else "")
        if not actions:
            return StepResult.satisfied(self.name, f"launch scripts for {mtp_name} (port "
                                        f"{settings.port}){plain} are in place in {ROUTES_DIR} "
                                        f"({length}); {memory.sentence(units=settings.systemd)}; "
                                        f"{launch.sentence()}",
                                        reads=(TUNED_FILE,), warnings=warnings)
        plain = (f" and {plain_name} ({PLAIN_SLOTS} slots, port {settings.port + 1})"
                 if memory.plain is not None else "")
        return StepResult.change(
            self.name, f"write launch scripts for {mtp_name} ({model.drafting}, 1 slot, port "
            f"{settings.port}; {length}){plain}{note}; {memory.sentence(units=settings.systemd)}; "
            f"{launch.sentence()}",
            actions,
            handlers=handlers, records={"routes": records}, reads=(TUNED_FILE,), warnings=warnings)


def _router_section(sub: Context, dialect, *, gpu: bool, budget: int):
    """One route of the router (``sub``, its own context): its name, its arguments rendered
    for ``dialect``, the GPU memory it needs loaded and its record; or the blocked result."""
    from ojai_setup.domain.deployment import PLAIN_SLOTS, fit_gpu_routes
    from ojai_setup.domain.launch_defaults import decide
    from ojai_setup.domain.render import Route, UnsupportedRoute, render_args
    from ojai_setup.domain.router import served_name

    settings = sub.settings
    model = sub.route
    if model is None:
        return StepResult.blocked(RoutesStep.name, f"{sub.settings.model}: "
                                  f"{sub.route_error or 'no such route'}")
    name = served_name(model)
    main = model.main_path(settings.models_dir)
    draft = model.draft_path(settings.models_dir)
    memory = fit_gpu_routes(model, budget, footprint=sub.footprint)
    launch = decide(dialect, gpu=gpu, catalog_flash_attn=model.flash_attn,
                    catalog_load_mode=model.load_mode, flash_attn=settings.flash_attn,
                    load_mode=settings.load_mode)
    if model.embedding:
        if memory.plain is None:
            return StepResult.blocked(RoutesStep.name, f"{name}: {memory.sentence()}")
        route = Route(name=name, model=main, ctx_size=memory.plain.ctx_size,
                      parallel=PLAIN_SLOTS, n_gpu_layers="all" if gpu else None,
                      flash_attn=launch.flash_attn, load_mode=launch.load_mode,
                      host=settings.host, port=settings.port, embeddings=True)
        need = memory.plain.need_bytes
    else:
        try:
            route = drafted_route(model, name, main, draft, gpu=gpu, host=settings.host,
                                  port=settings.port, flash_attn=launch.flash_attn,
                                  load_mode=launch.load_mode)
        except ValueError as exc:
            return StepResult.blocked(RoutesStep.name, f"route {name}: {exc}")
        assert memory.mtp is not None
        need = memory.mtp.need_bytes
    try:
        args = render_args(route, dialect)
    except UnsupportedRoute as exc:
        return StepResult.blocked(RoutesStep.name, f"route {name}: {exc}")
    drafted = route.spec_type != "none"
    plain_args = None
    if not model.embedding:  # what ojai bench compares the route with: no drafting, one slot
        plain = Route(name=route_names(model.name, model.drafted_suffix)[1], model=main,
                      ctx_size=route.ctx_size, parallel=1, n_gpu_layers=route.n_gpu_layers,
                      flash_attn=launch.flash_attn, load_mode=launch.load_mode,
                      host=settings.host, port=settings.port)
        try:
            plain_args = render_args(plain, dialect)
        except UnsupportedRoute as exc:
            return StepResult.blocked(RoutesStep.name, f"route {plain.name}: {exc}")
    return name, args, need, {
        "args": args, "plain_args": plain_args,
        "model": model.name, "main": main, "draft": draft, "mtp": model.mtp,
        "pairing": model.pair_kind, "spec_type": route.spec_type,
        "draft_n_max": route.draft_n_max, "slots": route.parallel,
        "drafting": model.drafting if drafted else "none",
        **({"embedding": True} if model.embedding else {}),
        "ngram": dict(route.ngram), "ctx_size": route.ctx_size,
        "models_dir": model.local_dir or settings.models_dir}


def plan_router(ctx: Context) -> StepResult:
    """The routes step for several models (``--model A --model B``): one llama-server in
    router mode behind one port, started from ``router.sh`` on the models preset ojai writes
    (:mod:`ojai_setup.domain.router`), each model under one route name that the request's
    ``model`` field selects."""
    from ojai_setup.domain.launch import (
        LaunchError,
        has_bundled_libs,
        render_llama_script,
        render_llama_unit,
    )
    from ojai_setup.domain.router import (
        IDLE_SECONDS,
        PRESET_PATH,
        ROUTER,
        Member,
        fit_router,
        render_preset,
        router_args,
    )

    settings, facts = ctx.settings, ctx.facts
    binary, installed = ctx.llama.path, ctx.llama.installed
    dialect, note = ctx.llama.dialect, ctx.llama.note
    if dialect is None:
        return StepResult.blocked(RoutesStep.name, ctx.llama.error or f"cannot read what {binary} supports")
    if not dialect.has("--models-preset"):
        return StepResult.blocked(
            RoutesStep.name, f"llama-server {dialect.version_label()} has no router mode (its help lists no "
            "--models-preset), so it cannot serve several routes behind one port; install a "
            "build that has it (upstream llama.cpp b11434 or newer: --llamacpp nightly or "
            "source), or set up one --model at a time")
    gpu = facts.gpu is not None and bool(facts.gpu.agents)
    budget = ctx.budget_gib * GIB
    sections: list[tuple[str, list[str], dict]] = []
    members: list[Member] = []
    for sub in ctx.each_route():
        section = _router_section(sub, dialect, gpu=gpu, budget=budget)
        if isinstance(section, StepResult):
            return section
        name, args, need, extra = section
        members.append(Member(name=name, need_bytes=need))
        sections.append((name, args, extra))
    fitted = fit_router(members, budget, settings.models_max)
    if fitted.error:
        return StepResult.blocked(RoutesStep.name, f"the routes do not fit the GPU budget as asked: "
                                  f"{fitted.sentence()}")
    try:
        preset = render_preset([(n, a, n in fitted.resident) for n, a, _ in sections], dialect,
                               idle_seconds=IDLE_SECONDS if fitted.on_demand else None)
    except ValueError as exc:
        return StepResult.blocked(RoutesStep.name, str(exc))
    vulkan = _vulkan_build(ctx, binary)
    env = {} if vulkan else _environment(ctx, binary)
    bundled = not vulkan and (has_bundled_libs(ctx.root, binary) or
                              (not installed and settings.llamacpp == "nightly"))
    actions: list = []
    handlers: dict[str, RunCommand] = {}
    key = _api_key(ctx, actions, handlers)
    if isinstance(key, StepResult):
        return key
    try:
        script = render_llama_script(binary, router_args(dialect, models_max=fitted.models_max,
                                                         host=settings.host, port=settings.port),
                                     env, ROUTER, bundled_libs=bundled)
    except LaunchError as exc:
        return StepResult.blocked(RoutesStep.name, f"the router: {exc}")
    path = script_path(ROUTER)
    names = ", ".join(n for n, _, _ in sections)
    for a in (ctx.file_action(PRESET_PATH, preset, 0o644, f"models preset of the router "
                              f"({names}){note}"),
              ctx.file_action(path, script, 0o755, f"launch script of the router (port "
                              f"{settings.port}){note}")):
        if a:
            actions.append(a)
    if settings.systemd:
        dirs = {extra["models_dir"] for _, _, extra in sections}
        try:
            unit = render_llama_unit(path, ROUTER, ctx.service_user,
                                     models_dir=sorted(dirs)[0] if len(dirs) == 1
                                     else settings.models_dir,
                                     host=settings.host, env_file=key, groups=ctx.groups)
        except LaunchError as exc:
            return StepResult.blocked(RoutesStep.name, f"the router: {exc}")
        a = ctx.file_action(f"{UNITS_DIR}/ojai-{ROUTER}.service", unit, 0o644,
                            "systemd unit for the router", notify=("systemd",))
        if a:
            actions.append(a)
            handlers["systemd"] = daemon_reload("load the new units")
    records = {n: {"script": path, "host": settings.host, "port": settings.port,
                   "router": True, "preset": PRESET_PATH, "api_key_env": key, "conflicts": [],
                   **{k: v for k, v in extra.items() if k != "models_dir"}}
               for n, _, extra in sections}
    warnings: tuple[str, ...] = ()
    if ctx.llama.warning:
        warnings += (ctx.llama.warning,)
    if not is_loopback(settings.host):
        warnings += (network_warning(f"the routes {names}", settings.host, str(settings.port),
                                     api_key=settings.api_key_file is not None),)
    what = (f"{len(sections)} routes behind port {settings.port}, one llama-server in router "
            f"mode selecting by the request's model field ({names}); {fitted.sentence()}")
    if not actions:
        return StepResult.satisfied(RoutesStep.name, f"the router's launch script and models preset are in "
                                    f"place in {ROUTES_DIR}: {what}", warnings=warnings)
    return StepResult.change(RoutesStep.name, f"write the router's launch script and models preset for "
                             f"{what}{note}", actions, handlers=handlers,
                             records={"routes": records}, warnings=warnings)
