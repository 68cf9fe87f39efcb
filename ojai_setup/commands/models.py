"""``ojai models``: the catalog against this machine's GPU budget and models folder."""

from __future__ import annotations

from pathlib import Path

from ojai_setup.commands.terminal import Terminal
from ojai_setup.core.paths import GIB
from ojai_setup.core.root import Root
from ojai_setup.core.status import ExitStatus
from ojai_setup.core.units import gib_text
from ojai_setup.domain.catalog import fit
from ojai_setup.facts.collect import collect
from ojai_setup.model.settings import Settings


def model_rows(root: Root, settings: Settings) -> list[dict]:
    from ojai_setup.facts.models import verified_digest
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
                     "download_bytes": sum(mf.size for mf in route.files()),
                     "for_tests": route.for_tests})
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


def _gib(size: int) -> str:
    """``9.7 GiB``; from 100 GiB on, whole GiB (``641 GiB``)."""
    return gib_text(size, 1 if size < 100 * GIB else 0)


class ModelsReport:
    """The catalog's routes against this machine (:func:`model_rows`): for people, one line a
    route with its name whole (the name ``--model`` takes), how it drafts, its context, the
    memory it needs, whether it fits and whether it is downloaded; ``wide`` adds its title,
    spec type, largest context that fits and download size. Routes that exist for ojai's
    own tests are left out unless ``all``."""

    schema = "ojai.models/1"

    def __init__(self, rows: list[dict], models_dir: str, root: Path | str = "/", *,
                 wide: bool = False, all_routes: bool = False) -> None:
        self.models_dir, self.root, self.wide = models_dir, root, wide
        self.hidden = 0 if all_routes else sum(1 for r in rows if r.get("for_tests"))
        self.rows = rows if all_routes else [r for r in rows if not r.get("for_tests")]

    def to_json(self) -> dict:
        return {"routes": self.rows}

    def render(self, term: Terminal) -> None:
        from rich import box
        from rich.table import Table

        from ojai_setup.core.commandline import ojai_command

        rows = self.rows
        budget = rows[0]["budget_bytes"] if rows else 0
        sglang = bool(rows) and rows[0].get("server") == "sglang"
        where = ("HBM of the Instinct GPUs; SGLang downloads the weights" if sglang
                 else f"models in {self.models_dir}")
        term.print(f"Routes (GPU {'memory' if sglang else 'budget'} {budget / GIB:.0f} GiB; "
                   f"{where})", crop=False)
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1))
        # the name a person types is never cut: its column is as wide as the longest
        table.add_column("route", no_wrap=not self.wide, overflow="ignore",
                         min_width=max((len(r["name"]) for r in rows), default=5))
        if self.wide:
            table.add_column("title", no_wrap=True)
        table.add_column("drafting", no_wrap=True)
        table.add_column("context", no_wrap=True, justify="right")
        table.add_column("memory", no_wrap=True, justify="right")
        table.add_column("fits", no_wrap=True)
        if self.wide:
            table.add_column("max ctx", no_wrap=True, justify="right")
            table.add_column("download", no_wrap=True, justify="right")
        table.add_column("downloaded", no_wrap=True)
        estimated = False
        for r in rows:
            est = "~" if r["sizes_estimated"] else ""
            estimated = estimated or bool(est)
            if r.get("server") == "sglang":  # SGLang's: the tensor-parallel size it needs
                fits = f"tp {r['tp']}" if r["fits"] else "no"
                drafting = r["mtp"].removeprefix("sglang-")
            else:
                fits = "yes" if r["fits"] else "no"
                drafting = r.get("drafting") or r["mtp"].replace("_", "-")
                if not self.wide:  # the n-gram type is in --wide
                    drafting = drafting.split(" (")[0]
            cells = [r["name"], r["title"]] if self.wide else [r["name"]]
            cells += [drafting, str(r["context_size"] or "-"), est + _gib(r["need_bytes"]), fits]
            if self.wide:
                cells += [str(r["max_ctx"] or "-"), est + _gib(r["download_bytes"])]
            cells.append("SGLang's" if r.get("server") == "sglang" else r["downloaded"])
            table.add_row(*cells)
        if self.wide:  # as wide as it is: a terminal narrower than that wraps its lines
            from rich.console import Console
            from rich.measure import Measurement

            def console(width: int) -> Console:
                return Console(file=term.console.file, width=width, no_color=not term.color,
                               force_terminal=term.color or None, highlight=False, emoji=False)

            wide = console(1000)
            console(Measurement.get(wide, wide.options, table).maximum).print(table)
        else:
            term.print(table, crop=False)
        if estimated:
            term.print("~ estimated by the catalog (the real sizes are checked at download)")
        if self.hidden:
            term.print(f"{self.hidden} routes for ojai's own tests not shown (--all shows them)")
        if not self.wide:
            term.print("--wide adds each route's title, largest context that fits and download "
                       "size")
        term.print("Set one up with:", crop=False)
        term.print("  " + ojai_command(self.root, "setup", "--model", "NAME"), crop=False,
                   soft_wrap=True)


def run_models(term: Terminal, root_dir: Path, settings: Settings, *, wide: bool = False,
               all_routes: bool = False) -> ExitStatus:
    root = Root(root_dir)
    term.show(ModelsReport(model_rows(root, settings), settings.models_dir, root.path,
                           wide=wide, all_routes=all_routes))
    return ExitStatus.OK
