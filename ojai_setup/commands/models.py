"""``ojai models``: the catalog against this machine's GPU budget and models folder."""

from __future__ import annotations

from pathlib import Path

from ojai_setup.commands.terminal import Terminal
from ojai_setup.core.paths import GIB
from ojai_setup.core.root import Root
from ojai_setup.domain.catalog import fit
from ojai_setup.facts.collect import collect
from ojai_setup.model.settings import Settings


def model_rows(root: Root, settings: Settings) -> list[dict]:
    from ojai_setup.domain.models import verified_digest
    from ojai_setup.planning.gather import (
        budget_gib,
        invoking_user,
        resolve_profile,
        user_catalog,
    )

    facts = collect(root)
    profile = resolve_profile(facts, settings)
    if profile.no_ttm:  # GPUs with memory of their own: SGLang routes
        return sglang_rows(facts)
    budget = budget_gib(facts, settings, profile) * GIB if facts.memory or settings.gpu_memory_gib else 0
    catalog = user_catalog(root, settings, invoking_user(root)[1])
    rows = []
    for route in sorted(catalog.routes.values(), key=lambda r: r.memory_need(r.context_size)):
        f = fit(route, route.context_size, budget, alternatives=catalog.routes.values())
        files = []
        for mf in route.files():
            from ojai_setup.domain.catalog import model_path

            real = root.resolve(model_path(settings.models_dir, route.file_repo(mf), mf.file))
            files.append("verified" if real.is_file() and verified_digest(real)
                         else "present" if real.is_file() else "missing")
        state = ("downloaded" if all(s == "verified" for s in files)
                 else "partly" if any(s != "missing" for s in files) else "no")
        rows.append({"name": route.name, "title": route.title, "mtp": route.mtp,
                     "drafting": route.drafting, "spec_type": route.spec_type_value,
                     "context_size": route.context_size, "need_bytes": f.need_bytes,
                     "budget_bytes": budget, "fits": f.fits, "max_ctx": f.max_ctx,
                     "downloaded": state, "sizes_estimated": route.sizes_estimated,
                     "download_bytes": sum(mf.size for mf in route.files())})
    return rows


def sglang_rows(facts) -> list[dict]:
    """The SGLang routes against an Instinct node: the tensor-parallel size the weights need."""
    from ojai_setup.domain.checks import instinct_gpus
    from ojai_setup.domain.sglang import choose_tp, sglang_routes

    gpus = instinct_gpus(facts)
    sizes = [s for _, _, s in gpus if s]
    hbm = min(sizes) if sizes and len(sizes) == len(gpus) else None
    rows = []
    for route in sorted(sglang_routes().values(), key=lambda r: r.weights_bytes):
        tp = choose_tp(route, len(gpus), hbm)
        rows.append({"name": route.name, "title": route.title, "mtp": "sglang-" + route.algorithm.lower(),
                     "server": "sglang", "context_size": None, "need_bytes": route.weights_bytes,
                     "budget_bytes": (hbm or 0) * len(gpus), "fits": tp.tp is not None,
                     "tp": tp.tp, "max_ctx": None, "downloaded": "by SGLang",
                     "sizes_estimated": True, "download_bytes": route.weights_bytes})
    return rows


class ModelsReport:
    """The catalog's routes against this machine (:func:`model_rows`): a table for people."""

    schema = "ojai.models/1"

    def __init__(self, rows: list[dict], models_dir: str) -> None:
        self.rows, self.models_dir = rows, models_dir

    def to_json(self) -> dict:
        return {"routes": self.rows}

    def render(self, term: Terminal) -> None:
        from rich.table import Table

        rows = self.rows
        budget = rows[0]["budget_bytes"] if rows else 0
        sglang = bool(rows) and rows[0].get("server") == "sglang"
        where = ("HBM of the Instinct GPUs; SGLang downloads the weights" if sglang
                 else f"models in {self.models_dir}")
        table = Table(title=f"Routes (GPU {'memory' if sglang else 'budget'} {budget / GIB:.0f} "
                      f"GiB; {where})",
                      title_justify="left")
        for col in ("route", "drafting", "context", "needs", "fits", "downloaded"):
            table.add_column(col, no_wrap=col in ("context", "fits", "downloaded"),
                             min_width=15 if col == "route" else None)
        for r in rows:
            fits = "yes" if r["fits"] else (f"no (ctx {r['max_ctx']} fits)" if r["max_ctx"] else "no")
            if r.get("server") == "sglang":
                fits = f"yes (tp {r['tp']})" if r["fits"] else "no"
            need = f"{r['need_bytes'] / GIB:.1f} GiB" + (" (est.)" if r["sizes_estimated"] else "")
            size = f"{r['download_bytes'] / GIB:.1f} GiB" + (" (est.)" if r["sizes_estimated"] else "")
            table.add_row(f"{r['name']}\n[dim]{r['title']}\n{size} to download[/]",
                          r.get("drafting") or r["mtp"].replace("_", "-"),
                          str(r["context_size"] or "SGLang's"), need, fits,
                          r["downloaded"])
        term.print(table)
        term.print("Set one up with: ojai setup --model NAME")


def run_models(term: Terminal, root_dir: Path, settings: Settings) -> int:
    term.show(ModelsReport(model_rows(Root(root_dir), settings), settings.models_dir))
    return 0
