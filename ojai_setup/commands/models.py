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
        table = Table(title=f"Routes (GPU budget {budget / GIB:.0f} GiB; models in {self.models_dir})",
                      title_justify="left")
        for col in ("route", "drafting", "context", "needs", "fits", "downloaded"):
            table.add_column(col, no_wrap=col in ("context", "fits", "downloaded"),
                             min_width=15 if col == "route" else None)
        for r in rows:
            fits = "yes" if r["fits"] else (f"no (ctx {r['max_ctx']} fits)" if r["max_ctx"] else "no")
            need = f"{r['need_bytes'] / GIB:.1f} GiB" + (" (est.)" if r["sizes_estimated"] else "")
            size = f"{r['download_bytes'] / GIB:.1f} GiB" + (" (est.)" if r["sizes_estimated"] else "")
            table.add_row(f"{r['name']}\n[dim]{r['title']}\n{size} to download[/]",
                          r["drafting"], str(r["context_size"]), need, fits,
                          r["downloaded"])
        term.print(table)
        term.print("Set one up with: ojai setup --model NAME")


def run_models(term: Terminal, root_dir: Path, settings: Settings) -> int:
    term.show(ModelsReport(model_rows(Root(root_dir), settings), settings.models_dir))
    return 0
