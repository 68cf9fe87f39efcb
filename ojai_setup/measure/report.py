"""How a benchmark looks to people: a live table while it runs, the report at the end, and
the comparison of two saved runs. Everything here renders data; nothing measures."""

from __future__ import annotations

from typing import Any

from ojai_setup.measure import kinds
from ojai_setup.measure.campaign import Observer
from ojai_setup.measure.results import SCHEMA, BenchResult, Pair


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{(x - 1) * 100:+.1f}%"


def _num(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def pair_row(p: Pair) -> list[str]:
    same = "-" if p.identical is None else ("same" if p.identical else f"@{p.first_divergence}")
    return [p.prompt_id, str(p.seed), "AB" if p.order.startswith("mtp") else "BA",
            _num(p.plain.server_tps), _num(p.mtp.server_tps), _pct(p.speedup),
            _pct(p.predicted_speedup), _num(p.mtp.mean_accepted_length, ".2f"), same]


def pair_columns(label: str = "drafted") -> tuple[str, ...]:
    return ("prompt", "seed", "order", "plain t/s", f"{label} t/s", "speedup", "model", "len", "temp 0")


PAIR_COLUMNS = pair_columns()


class LiveObserver(Observer):
    """A rich live display: the pairs table with a progress bar under it."""

    def __init__(self, console) -> None:
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.rows: list[list[str]] = []
        self.notes: list[str] = []
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console)
        self.task = None
        self.columns = PAIR_COLUMNS
        self.live = Live(self._render(), console=console, refresh_per_second=4, transient=False)

    def _render(self):
        from rich.console import Group
        from rich.table import Table

        table = Table(title="paired runs (decode tokens/s from the server's timings)", title_justify="left")
        for c in self.columns:
            table.add_column(c, justify="left" if c == "prompt" else "right", no_wrap=True)
        for r in self.rows[-12:]:
            table.add_row(*r)
        return Group(table, self.progress, *self.notes)

    def __enter__(self) -> LiveObserver:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    def arms(self, label: str) -> None:
        self.columns = pair_columns(label)

    def phase(self, name: str, total: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=self.progress.tasks[-1].total)
        self.task = self.progress.add_task(name, total=total)
        self.live.update(self._render())

    def advance(self, n: int = 1) -> None:
        if self.task is not None:
            self.progress.advance(self.task, n)

    def pair(self, pair: Pair, done: int, total: int) -> None:
        self.rows.append(pair_row(pair))
        self.live.update(self._render())

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.live.update(self._render())


class BenchReport:
    """A finished ``ojai bench`` run (:class:`BenchResult`) and the folder it was saved in."""

    schema = SCHEMA

    def __init__(self, result: BenchResult, folder) -> None:
        self.result, self.folder = result, folder

    def to_json(self) -> dict:
        return {**self.result.dump(), "folder": str(self.folder) if self.folder else None}

    def render(self, term) -> None:  # noqa: C901
        from rich.table import Table

        result, folder = self.result, self.folder
        p = term.print
        if result.stopped:
            p(f"[yellow]stopped early:[/] {result.stopped}")
        label = kinds.label(result.kind)
        p(f"pairing: {result.pairing}")
        if result.template:
            p(f"prompts: {result.template}")
        for s in result.servers:
            who = "started by ojai bench" if s.started_by_bench else "already running"
            arm = label if s.arm == "mtp" else s.arm
            p(f"{arm}: {s.route or s.url} ({who}; {s.slots or '?'} slot(s); "
              f"{s.version or s.build_info or 'version unknown'}"
              + (f"; --spec-type {s.spec_type}" if s.spec_type else "") + ")")
        if result.pairs and not term.color:  # the live table was not drawn
            table = Table(title="paired runs")
            for c in pair_columns(label):
                table.add_column(c, justify="left" if c == "prompt" else "right", no_wrap=True)
            for pair in result.pairs:
                table.add_row(*pair_row(pair))
            p(table)
        s = result.summary
        if s:
            ci = "" if s.ci_low is None else f", {s.ci_level:.0%} interval {_pct(s.ci_low)} to {_pct(s.ci_high)}"
            sd = "" if s.sd is None else f", sd {s.sd * 100:.1f} points"
            p(f"speedup over {s.n} pair(s): mean {_pct(s.mean)} (range {_pct(s.low)} to {_pct(s.high)}{sd}{ci})")
        m = result.model
        if m:
            source = {"metrics": "the server's /metrics counters",
                      "timings": "inferred from the completions' timings"}.get(m.counters or "",
                                                                            m.counters or "unknown")
            p(f"acceptance ({source}): {_num(m.accepted_fraction and m.accepted_fraction * 100, '.1f')}% "
              f"of drafted tokens accepted; {_num(m.mean_accepted_length, '.2f')} tokens per "
              "verification step" + ("" if m.kind == "none" else
                                     f"; per-token a = {_num(m.acceptance, '.3f')} at g = {m.draft_n_max}"))
            if m.implied_mean_length is not None:
                p(f"synthetic rates on the server imply {m.implied_mean_length:.2f} tokens per step; "
                  f"measured {_num(m.mean_accepted_length, '.2f')}")
            if m.kind == "none":
                p(f"model: {m.note}; measured {_pct(m.measured_speedup)}")
            else:
                p(f"model: draft cost c = {_num(m.draft_cost, '.3f')} (from the timings); predicted "
                  f"speedup {_pct(m.predicted_speedup)}, measured {_pct(m.measured_speedup)}")
        t = result.temperature0
        if t:
            p(f"temperature 0: {t.identical} of {t.compared} pair(s) byte-identical"
              + (f"; {t.truncated_both} hit the token budget in both arms" if t.truncated_both else ""))
        sc = result.scoring
        if sc:
            p(f"scores ({sc.command}): {sc.differing_pairs} of {sc.scored_pairs} scored pair(s) differ; "
              f"mean {label} {_num(sc.mtp_mean, '.3f')}, plain {_num(sc.plain_mean, '.3f')}")
        lg = result.long
        if lg:
            for arm in (lg.mtp, lg.plain):
                if arm is None:
                    continue
                rates = ", ".join(f"{r:.0f}" for r in arm.rates)
                p(f"long generation, {arm.arm}: {arm.tokens} tokens at {_num(arm.server_tps)} tokens/s; "
                  f"per {arm.window} tokens: {rates}")
                p(f"  {'[bold red]COLLAPSE[/] ' if arm.collapse.detected else ''}{arm.collapse.reason}")
        c = result.concurrency
        if c and c.points:
            table = Table(title="parallel streams (aggregate tokens/s)")
            for col in ("k", label, "plain", f"{label}/plain"):
                table.add_column(col, justify="right")
            by = {(pt.arm, pt.k): pt for pt in c.points}
            for k in sorted({pt.k for pt in c.points}):
                m_, pl = by.get(("mtp", k)), by.get(("plain", k))
                ratio = _pct(m_.aggregate_tps / pl.aggregate_tps) if m_ and pl else "-"
                table.add_row(str(k), _num(m_ and m_.aggregate_tps), _num(pl and pl.aggregate_tps), ratio)
            p(table)
            p(f"concurrency: {c.note}")
        if result.verdict:
            style = {"adopt": "green", "do not adopt": "bold red"}.get(result.verdict.decision, "yellow")
            p(f"verdict: [{style}]{result.verdict.decision}[/] ({result.verdict.reason})")
        if folder is not None:
            p(f"saved: {folder}/results.json" + (f" and {result.plot}" if result.plot else ""))
            if result.no_plot:
                from rich.markup import escape

                p(f"[yellow]{escape(result.no_plot)}[/]")


def compare(a: BenchResult, b: BenchResult) -> dict:
    """What changed between two runs: settings, servers, and the headline figures."""
    def headline(r: BenchResult) -> dict:
        long_mtp = r.long.mtp if r.long else None
        return {
            "pairs": len(r.pairs),
            "mean speedup": r.summary.mean if r.summary else None,
            "interval low": r.summary.ci_low if r.summary else None,
            "interval high": r.summary.ci_high if r.summary else None,
            "tokens per step": r.model.mean_accepted_length if r.model else None,
            "acceptance a": r.model.acceptance if r.model else None,
            "draft cost c": r.model.draft_cost if r.model else None,
            "identical at temp 0": r.temperature0.identical if r.temperature0 else None,
            "long drafted tokens/s": long_mtp.server_tps if long_mtp else None,
            "collapse": (long_mtp.collapse.detected if long_mtp else None),
            "inversion at k": r.concurrency.inversion_k if r.concurrency else None,
            "verdict": r.verdict.decision if r.verdict else None,
        }

    def servers(r: BenchResult) -> dict:
        out = {}
        for s in r.servers:
            out[f"{s.arm} version"] = s.version or s.build_info
            out[f"{s.arm} command"] = " ".join(s.command) if s.command else None
            for mf in s.models:
                out[f"{s.arm} {mf.role} file"] = f"{mf.path} ({(mf.sha256 or '?')[:12]})"
        return out

    ha, hb = headline(a), headline(b)
    sa, sb = {**a.settings, **servers(a)}, {**b.settings, **servers(b)}
    changed = {k: (sa.get(k), sb.get(k)) for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k)}
    return {"a": {"started": a.started, "route": a.route}, "b": {"started": b.started, "route": b.route},
            "figures": {k: (ha[k], hb[k]) for k in ha}, "changed": changed}


class CompareReport:
    """What changed between two saved runs (:func:`compare`)."""

    schema = "ojai.bench-compare/1"

    def __init__(self, diff: dict) -> None:
        self.diff = diff

    def to_json(self) -> dict:
        return self.diff

    def render(self, term) -> None:
        from rich.table import Table

        diff = self.diff

        table = Table(title=f"A {diff['a']['started']} ({diff['a']['route']})  vs  "
                            f"B {diff['b']['started']} ({diff['b']['route']})")
        for col in ("figure", "A", "B"):
            table.add_column(col, justify="left" if col == "figure" else "right")

        def fmt(v):
            if isinstance(v, float):
                return f"{v:.3f}"
            return "-" if v is None else str(v)

        for k, (x, y) in diff["figures"].items():
            table.add_row(k + (" *" if x != y else ""), fmt(x), fmt(y))
        term.print(table)
        if diff["changed"]:
            term.print("settings and servers that differ:")
            for k, (x, y) in diff["changed"].items():
                term.print(f"  {k}: {fmt(x)} -> {fmt(y)}")
        else:
            term.print("same settings and servers")
