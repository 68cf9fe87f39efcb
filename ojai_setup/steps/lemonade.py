"""Lemonade in front of the routes: its model registry, load options and engine settings.

Writes the route into ``user_models.json`` and ``recipe_options.json`` in the config directory
Lemonade really reads (system service or standalone), keeping every entry the user has: the
entry names the files ojai downloaded (``local_path``), so Lemonade loads them instead of
downloading its own copy. Points Lemonade at ojai's own llama-server in ``config.json`` (the
executable, on the channel that keeps the build's own libraries first), or plans the
``lemonade config set`` / ``lemonade backends install`` calls that get Lemonade's build.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from ojai_setup.core.paths import GIB, LLAMA_SERVER, LLAMACPP_DIR
from ojai_setup.model.actions import InstallPackage, RunCommand
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import StepResult

if TYPE_CHECKING:
    from ojai_setup.domain.lemonade import OwnLlamaServer


def own_llama_server(ctx: Context) -> OwnLlamaServer | None:
    """ojai's own ``llama-server`` that Lemonade should run (None: let Lemonade get its own).

    The build ``ojai tune`` chose for the route, when it is another of ojai's installs; else
    what ``--llamacpp`` installs in this apply (behind ``current`` or its backend's own link);
    else, with ``--llamacpp none``, what an earlier apply installed behind ``current``. An
    installed build's record says whether it is a nightly or a source build, and its backend."""
    from ojai_setup.domain.lemonade import OwnLlamaServer

    settings = ctx.settings
    server = f"{ctx.llama_link}/llama-server"  # where this plan's build goes
    chosen = ctx.llama.path
    if chosen and chosen != server and chosen.startswith(f"{LLAMACPP_DIR}/") and \
            ctx.llama.installed:  # ojai tune's choice for the route
        tuned = _installed_server(ctx, chosen)
        if tuned is not None:
            return tuned
    if settings.llamacpp == "nightly":
        return OwnLlamaServer(executable=server, install="nightly",
                              backend="vulkan" if settings.llamacpp_backend == "vulkan" else "rocm")
    if settings.llamacpp == "source":
        backend = settings.install_backend(bool(ctx.facts.rocm_version)) or "cpu"
        return OwnLlamaServer(executable=server, install="source",
                              backend=_LEMONADE_BACKEND.get(backend, "cpu"))
    return _installed_server(ctx, LLAMA_SERVER)


#: ggml's backend names -> Lemonade's ``llamacpp_backend``
_LEMONADE_BACKEND = {"hip": "rocm", "vulkan": "vulkan"}


def _installed_server(ctx: Context, binary: str) -> OwnLlamaServer | None:
    """The installed llama-server ``binary`` of ojai's as Lemonade runs it, from its folder's
    install record; None when it is not there or has no record."""
    from ojai_setup.domain import nightly
    from ojai_setup.domain.lemonade import OwnLlamaServer
    from ojai_setup.facts import llama_install

    if not ctx.root.exists(binary):
        return None
    folder = str(PurePosixPath(binary).parent)
    record = llama_install.read_install_record(ctx.root, folder)
    if record is not None:
        return OwnLlamaServer(executable=binary, install="source",
                              backend=_LEMONADE_BACKEND.get(record.backend, "cpu"))
    got = llama_install.read_record(ctx.root, folder)
    if got is not None:
        return OwnLlamaServer(executable=binary, install="nightly",
                              backend="vulkan" if got.family == nightly.VULKAN else "rocm")
    return None


def unreadable_by_service(ctx: Context, path: str) -> str | None:
    """Why the ``lemonade`` service user cannot read ``path`` (an existing file), or None:
    every folder above it must be searchable and the file readable by others (ojai's files
    belong to root)."""
    real = ctx.root.resolve(path)
    if not real.exists():
        return None
    if not real.stat().st_mode & 0o004:
        return f"{path} is not readable by other users (chmod o+r)"
    parts = path.strip("/").split("/")[:-1]
    for i in range(len(parts)):
        folder = "/" + "/".join(parts[:i + 1])
        if not ctx.root.resolve(folder).stat().st_mode & 0o001:
            return f"{folder} is not searchable by other users (chmod o+x)"
    return None


def folder_bins(ctx: Context, setting: dict[str, str]) -> dict[str, str]:
    """``llamacpp.*_bin`` values in Lemonade's config that name a folder holding an executable
    ``llama-server`` (as Lemonade's docs suggest; its code runs the value, so every load fails),
    set to that executable; the keys ojai sets anyway are left out."""
    from ojai_setup.domain.lemonade import LLAMACPP_BIN_KEYS

    fixed: dict[str, str] = {}
    if ctx.lemonade is None:
        return fixed
    for key in LLAMACPP_BIN_KEYS:
        value = ctx.lemonade.config_value(key)
        if key in setting or not isinstance(value, str) or not value.startswith("/"):
            continue
        binary = value.rstrip("/") + "/llama-server"
        real = ctx.root.resolve(binary)
        if ctx.root.resolve(value).is_dir() and real.is_file() and real.stat().st_mode & 0o111:
            fixed[key] = binary
    return fixed


def lemonade_version(ctx: Context):
    """The installed Lemonade's parsed version, or None."""
    from ojai_setup.formats.lemonade import parse_lemonade_version

    tool = ctx.facts.tools.get("lemond") or ctx.facts.tools.get("lemonade")
    return parse_lemonade_version(tool.version or "") if tool else None


class LemonadeStep:
    name = "lemonade"
    #: Lemonade is pointed at the model files and at the llama-server ojai installs (not at
    #: the launch scripts: it starts its own llama-server)
    needs = ("llama.cpp", "model")

    def plan(self, ctx: Context) -> StepResult:  # noqa: C901
        settings = ctx.settings
        if ctx.lemonade is None and settings.lemonade == "none":
            if not settings.model:
                return StepResult.satisfied(self.name, "no model route asked for")
            return StepResult.satisfied(
                self.name, "Lemonade is not installed, so only the launch scripts serve the "
                "routes (to add it: ojai setup --lemonade distro or --lemonade release, or sudo "
                "add-apt-repository ppa:lemonade-team/stable && sudo apt install lemonade-server)")

        from ojai_setup.domain.lemonade import (
            STATE_KEY,
            LemonadeRoute,
            LemonadeSettings,
            builtin_catalog_entry,
            config_action,
            config_commands,
            hidden_from_service,
            lemonade_commands,
            lemonade_config,
            lemonade_layout,
            recipe_options_action,
            settings_done_before,
            user_models_action,
        )
        from ojai_setup.formats.lemonade import LOCAL_PATH, ConfigError

        installs: list[RunCommand | InstallPackage] = []
        install_note = ""
        if ctx.lemonade is not None:
            layout = ctx.lemonade.layout
        else:
            distro = ctx.facts.distro
            distro_id = distro.id if distro else ""
            like = list(distro.like) if distro else []
            if settings.lemonade == "release":
                from ojai_setup.domain.lemonade_release import (
                    install_actions,
                    install_commands,
                    release_refusal,
                )

                deb = ctx.lemonade_deb
                refusal = release_refusal(distro_id, like)
                if refusal is not None:
                    return StepResult.blocked(self.name, refusal)
                if deb is None:
                    return StepResult.blocked(self.name, ctx.lemonade_deb_error
                                              or "no Lemonade release was looked up")
                installs = install_actions(deb)
                commands = install_commands(deb)
                where = (f"{deb.tag} from its GitHub release ({deb.name}, sha256 "
                         f"{deb.sha256[:12]}... checked before installing"
                         + ("; on Debian 13 its dependency libcpp-httplib0.41 comes from "
                            "trixie-backports" if distro and distro.version.startswith("13")
                            else "") + ")")
            else:
                from ojai_setup.domain.lemonade_release import distro_install_commands

                found, where = distro_install_commands(distro_id, like,
                                                       distro.version if distro else "")
                if found is None:
                    return StepResult.blocked(self.name, where)
                commands = found
                installs = [RunCommand(argv=tuple(c), needs_root=True,
                                       reason=f"install and start Lemonade {where}")
                            for c in commands]
            # the package installs the system service lemond and enables it
            layout = lemonade_layout(system_unit=True, system_enabled=True, user_enabled=False,
                                     home=ctx.home)
            install_note = (f"install Lemonade {where} and enable lemond ("
                            + "; ".join(" ".join(c) for c in commands) + ")")
            if not settings.model:
                return StepResult.change(self.name, install_note, installs)
        if not settings.model:
            if ctx.lemonade is not None and settings.lemonade != "none":
                return StepResult.satisfied(
                    self.name, f"Lemonade is already installed ({layout.mode}, "
                    f"{layout.config_dir}), so --lemonade {settings.lemonade} installs nothing; "
                    "no model route asked for")
            return StepResult.satisfied(self.name, "no model route asked for")
        model = ctx.route
        if model is None:
            return StepResult.blocked(self.name, ctx.route_error or "no such route")
        if settings.extra_models:
            return self._several(ctx, layout)
        reads = tuple(f"{layout.config_dir}/{f}" for f in
                      ("config.json", "user_models.json", "recipe_options.json"))
        notes: list[str] = []
        if settings.lemonade_downloads:
            main, draft, source = model.lemonade_checkpoint, model.lemonade_draft_checkpoint, None
            notes.append("Lemonade downloads the pair itself into its Hugging Face cache "
                         "(HF_HOME) on first load, as asked (--lemonade-downloads)")
        else:
            main = model.main_path(settings.models_dir)
            draft = model.draft_path(settings.models_dir)
            source = LOCAL_PATH
            if hidden_from_service(layout, settings.models_dir):
                return StepResult.blocked(
                    self.name, f"Lemonade runs as the system service lemond with ProtectHome=yes "
                    f"and cannot read the models in {settings.models_dir}; choose a models folder "
                    f"outside /home (--models-dir /var/lib/ojai/models, the default) or let "
                    f"Lemonade download its own copy (--lemonade-downloads)", reads=reads)
            if layout.protects_home:
                for path in (main, draft):
                    why = unreadable_by_service(ctx, path) if path else None
                    if why:
                        return StepResult.blocked(
                            self.name, f"the lemond service user cannot read {path}: {why}",
                            reads=reads)
            notes.append(f"Lemonade loads ojai's files in {settings.models_dir} (local_path), "
                         "no second download")
        builtin = builtin_catalog_entry(ctx.root, model.lemonade_checkpoint,
                                        model.lemonade_draft_checkpoint)
        if builtin:
            notes.append(f"Lemonade's own catalog already has this pair as {builtin}, which "
                         "would download its own copy")
        own = own_llama_server(ctx)
        lemonade_settings = LemonadeSettings(layout=layout, llama_server=own)
        # the label mtp makes Lemonade add --spec-type draft-mtp; other kinds say their type
        args = [] if model.mtp or model.embedding else ["--spec-type", model.spec_type_value]
        if model.model_drafted:
            args += ["--spec-draft-n-max", str(model.draft_n_max)]
        args += model.ngram_args()
        version = lemonade_version(ctx)
        if model.mtp and version is not None and version.injects_mtp_draft_defaults():
            # this Lemonade adds --spec-draft-p-min 0.75 to MTP models: keep llama.cpp's 0,
            # as ojai's own routes draft (every draft n_max tokens long)
            args += ["--spec-draft-p-min", "0"]
            notes.append(f"Lemonade {version.text.split()[-1]} adds --spec-draft-p-min 0.75 to MTP "
                         "models (lemonade-sdk/lemonade#3175): the route passes 0")
        try:
            values = lemonade_config(lemonade_settings)
            writes = [a for a in (
                user_models_action(ctx.root, layout, model.name, main, draft,
                                   max(round(model.weights_bytes / GIB, 2), 0.01),
                                   ["mtp"] if model.mtp else ["embeddings"] if model.embedding
                                   else [], source=source,
                                   mtp=model.mtp is not None),
                recipe_options_action(ctx.root, layout, f"user.{model.name}", model.context_size,
                                      own.backend if own else "rocm", args),
                config_action(ctx.root, layout, values),
            ) if a is not None]
            commands = lemonade_commands(LemonadeRoute(name=model.name, engine="llamacpp"),
                                         lemonade_settings)
        except ConfigError as exc:
            return StepResult.blocked(self.name, f"{exc} (nothing was overwritten)", reads=reads)
        if own is not None:
            notes.append(f"Lemonade runs ojai's {own.install} llama-server: "
                         + ", ".join(f"{k}={v}" for k, v in values.items()))
        repaired = folder_bins(ctx, values)
        if repaired:
            values = {**values, **repaired}
            try:
                writes = [w for w in writes if not w.path.endswith("/config.json")]
                action = config_action(ctx.root, layout, values)
                if action is not None:
                    writes.append(action)
            except ConfigError as exc:
                return StepResult.blocked(self.name, f"{exc} (nothing was overwritten)",
                                          reads=reads)
            notes.append("a llama.cpp binary setting named a folder, which Lemonade cannot run: "
                         + ", ".join(f"{k}={v}" for k, v in repaired.items()))
        runs, handlers, done = config_commands(
            layout, commands, "lemonade-backends",
            current=ctx.lemonade.config_value if ctx.lemonade else (lambda key: None),
            done=settings_done_before(ctx.state.records))
        actions = [*writes, *runs]
        if writes and layout.mode == "system-service":
            handlers["lemond-restart"] = RunCommand(argv=("systemctl", "restart", "lemond"),
                                                    needs_root=True, reason="lemond rereads its models")
            actions = [w.model_copy(update={"notify": ("lemond-restart",)}) for w in writes] + runs
        actions = [*installs, *actions]
        if install_note:
            notes.insert(0, install_note)
        detail = "; ".join(notes)
        if not actions:
            return StepResult.satisfied(self.name, f"Lemonade ({layout.mode}, {layout.config_dir}) "
                                        f"already serves user.{model.name}; {detail}", reads=reads)
        return StepResult.change(
            self.name, f"register user.{model.name} ("
            + ("label mtp" if model.mtp else "label embeddings" if model.embedding
               else model.drafting) + ") with Lemonade in "
            f"{layout.config_dir} ({layout.reason}); {detail}", actions, handlers=handlers,
            reads=reads, records={STATE_KEY: {"config": {**done, **values}, "model": model.name,
                                              "config_dir": layout.config_dir,
                                              "draft_n_max": model.draft_n_max}})

    def _several(self, ctx: Context, layout) -> StepResult:
        """Every route of ``--model A --model B`` registered with Lemonade (each planned as
        the only one, their entries then written into each file at once) and
        ``max_loaded_models`` set to how many fit the GPU budget at once."""
        import json

        from ojai_setup.domain.lemonade import STATE_KEY
        from ojai_setup.domain.router import fit_router, members
        from ojai_setup.formats.lemonade import ConfigError, merge_config
        from ojai_setup.model.actions import WriteFile
        from ojai_setup.planning.result import merged

        results = [self.plan(sub) for sub in ctx.each_route()]
        if any(r.status == "blocked" for r in results):
            return merged(self.name, results)
        budget = ctx.budget_gib * GIB
        fitted = fit_router(members([(sub.route, sub.footprint) for sub in ctx.each_route()
                                     if sub.route], budget), budget, ctx.settings.models_max)
        if fitted.error:
            return StepResult.blocked(self.name, "the routes do not fit the GPU budget as "
                                      f"asked: {fitted.sentence()}")
        reads = tuple(dict.fromkeys(p for r in results for p in r.reads))
        writes: dict[str, WriteFile] = {}
        texts: dict[str, dict] = {}
        others: list = []
        for r in results:
            for a in r.actions:
                if not isinstance(a, WriteFile) or not a.path.startswith(layout.config_dir + "/"):
                    if a not in others:
                        others.append(a)
                    continue
                before = json.loads(a.before) if a.before else {}
                after = json.loads(a.after)
                into = texts.setdefault(a.path, json.loads(json.dumps(before)))
                for k, v in after.items():  # this route's entries (and settings)
                    if before.get(k) != v:
                        into[k] = v
                if a.path not in writes:
                    writes[a.path] = a
        config = f"{layout.config_dir}/config.json"
        before_config = ctx.root.read_text(config) if ctx.root.exists(config) else None
        base = (json.dumps(texts[config], indent=2, ensure_ascii=False) + "\n"
                if config in texts else before_config)
        try:
            after_config = merge_config(base, {"max_loaded_models": fitted.models_max},
                                        path=config)
        except ConfigError as exc:
            return StepResult.blocked(self.name, f"{exc} (nothing was overwritten)", reads=reads)
        actions: list = []
        for path, a in writes.items():
            if path == config:
                continue
            text = json.dumps(texts[path], indent=2, ensure_ascii=False) + "\n"
            actions.append(a.model_copy(update={"after": text, "reason": a.reason if len(
                results) == 1 else f"{path.rsplit('/', 1)[-1]}: every route's entry"}))
        if after_config != before_config:
            template = writes.get(config)
            actions.append(WriteFile(
                path=config, before=before_config, after=after_config, mode=0o644,
                needs_root=layout.mode == "system-service",
                notify=template.notify if template else (
                    ("lemond-restart",) if layout.mode == "system-service" else ()),
                reason=f"max_loaded_models {fitted.models_max}"
                + (f"; {template.reason}" if template else "")))
        actions += others
        handlers = {k: v for r in results for k, v in r.handlers.items()}
        if actions and layout.mode == "system-service" and "lemond-restart" not in handlers:
            handlers["lemond-restart"] = RunCommand(argv=("systemctl", "restart", "lemond"),
                                                    needs_root=True,
                                                    reason="lemond rereads its models")
        registered = ", ".join(f"user.{sub.route.name}" for sub in ctx.each_route() if sub.route)
        at_once = ("all of them fit the GPU budget at once" if not fitted.on_demand else
                   f"as many as fit the {ctx.budget_gib} GiB GPU budget at once; Lemonade "
                   "unloads the least recently used to load another")
        sentence = (f"{registered} with Lemonade in {layout.config_dir}, max_loaded_models "
                    f"{fitted.models_max} ({at_once})")
        if not actions:
            return StepResult.satisfied(self.name, f"Lemonade already serves {sentence}",
                                        reads=reads)
        first = next((r.records[STATE_KEY] for r in results if STATE_KEY in r.records),
                     {"config_dir": layout.config_dir})
        records = {STATE_KEY: {**first,
                               "models": [sub.route.name for sub in ctx.each_route() if sub.route],
                               "draft_n_max_by_model": {
                                   sub.route.name: sub.route.draft_n_max
                                   for sub in ctx.each_route() if sub.route},
                               "max_loaded_models": fitted.models_max}}
        return StepResult.change(self.name, f"register {sentence}", actions, handlers=handlers,
                                 reads=reads, records=records)
