"""Download a catalog route's main model and its draft (an MTP head or a draft model), and
prove they belong together (n-gram drafting has no pair to prove)."""

from __future__ import annotations

from ojai_setup.core.paths import GIB
from ojai_setup.core.units import size_text as _size
from ojai_setup.domain.routes import route_names
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import SpaceNeed, StepResult, merged


class ModelStep:
    name = "model"

    def plan(self, ctx: Context) -> StepResult:
        settings = ctx.settings
        if not settings.model:
            return StepResult.satisfied(self.name, "no model route asked for (add --model NAME; "
                                        "`ojai models` lists them)")
        if settings.extra_models:
            return merged(self.name, [self.plan(sub) for sub in ctx.each_route()])
        from ojai_setup.domain.catalog import fit, model_path
        from ojai_setup.facts.models import plan_model_downloads, verify_local_pair
        from ojai_setup.facts.disk import partial_bytes

        route, catalog = ctx.route, ctx.catalog
        if route is None or catalog is None:
            return StepResult.blocked(self.name, ctx.route_error or "no catalog")
        if settings.lemonade_downloads:
            return StepResult.satisfied(
                self.name, f"{route.name}: not downloaded by ojai (--lemonade-downloads): Lemonade "
                f"downloads {route.lemonade_checkpoint}"
                + (f" and {route.lemonade_draft_checkpoint}" if route.lemonade_draft_checkpoint else "")
                + " into its own Hugging Face cache on first load")
        budget = ctx.budget_gib * GIB
        verdict = fit(route, route.context_size, budget, alternatives=catalog.routes.values(),
                      footprint=ctx.footprint,
                      name=route.name if route.embedding
                      else route_names(route.name, route.drafted_suffix)[0])
        if not verdict.fits:
            return StepResult.blocked(self.name, "does not fit the GPU memory budget: "
                                      + verdict.sentence())
        if route.local_dir is not None:
            return StepResult.satisfied(
                self.name, f"{route.name}: uses {route.main_path(settings.models_dir)}"
                + (f" and its {len(route.main) - 1} other shard(s)" if len(route.main) > 1 else "")
                + " where it is (the owner's own file: nothing to download, no published sha256 "
                f"to check it against); {verdict.sentence()}")
        downloads = plan_model_downloads(ctx.root, route, settings.models_dir)
        on_disk = [p for p in (route.main_path(settings.models_dir),
                               route.draft_path(settings.models_dir))
                   if p and ctx.root.exists(p)]
        kept_note = None  # why the files' metadata could not be kept in the state folder
        if len(on_disk) == (2 if route.draft else 1):
            pair, kept_note = verify_local_pair(ctx.root, route, settings.models_dir)
            if not pair.ok:
                what = "MTP pair" if route.mtp else "draft model pair"
                return StepResult.blocked(self.name, f"{route.name}: the files on disk are not a "
                                          f"matched {what}: " + "; ".join(pair.reasons)
                                          + ". Delete them to download the right files.")
        if downloads and ctx.hub_error:
            return StepResult.blocked(
                self.name, f"{route.name}: {ctx.hub_error}. Ways forward: HF_ENDPOINT (a mirror) "
                f"and HF_TOKEN (a gated repository); put the files into {settings.models_dir} "
                f"yourself ({route.repo}/<file>); or --lemonade-downloads (Lemonade fetches "
                "them when it first loads the route)")
        if downloads:
            pending = {a.dest for a in downloads}
            total = sum(f.size for f in route.files()
                        if model_path(settings.models_dir, route.file_repo(f), f.file) in pending)
            need = total - sum(partial_bytes(ctx.root.resolve(d)) for d in pending)
            if ctx.models_free_bytes is None:
                return StepResult.blocked(self.name, ctx.models_free_error or
                                          f"cannot tell the free space in {settings.models_dir}")
            kept = f" ({_size(total - need)} of them kept from an interrupted download)" \
                if need < total else ""
            return StepResult.change(
                self.name, f"download {route.title} ({len(downloads)} file{'' if len(downloads) == 1 else 's'}, about "
                f"{_size(total)}) into {settings.models_dir}; {verdict.sentence()}",
                downloads, space=(SpaceNeed(
                    folder=settings.models_dir, bytes=need, what=route.name,
                    detail=f"the downloads need {_size(need)}{kept}",
                    fix="choose another folder with --models-dir"),))
        said = f"; {kept_note}" if kept_note else ""
        if route.embedding:
            return StepResult.satisfied(self.name, f"{route.name}: main file present and verified "
                                        f"in {settings.models_dir} (an embedding model: nothing "
                                        "drafts, no pair to prove)" + said)
        if route.pair_kind == "ngram":
            return StepResult.satisfied(self.name, f"{route.name}: main file present and verified "
                                        f"in {settings.models_dir} (pairing not applicable: "
                                        "n-gram drafting reads no draft model)" + said)
        what = {"in_file": "main file with in-file MTP heads", "sidecar": "main and MTP draft",
                "draft_model": ("main file, its own draft model" if route.self_draft
                                else "main and draft model")}[route.pair_kind]
        return StepResult.satisfied(self.name, f"{route.name}: {what} present, verified and "
                                    f"paired in {settings.models_dir}" + said)
