"""One PNG per run: speedup per prompt with its interval, and tokens/s over position for
both arms of the long generation (matplotlib, drawn off-screen)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ojai_setup.measure.results import BenchResult
from ojai_setup.measure.stats import bootstrap_ci


class PlotsMissing(ImportError):
    """matplotlib is not installed: ojai's ``plots`` extra brings it."""


def plots_missing_note() -> str:
    """How to get plot.png where matplotlib is missing, for this very Python."""
    import shlex
    import sys

    return (f"no plot.png: matplotlib is not installed (ojai's plots extra); "
            f"`{shlex.quote(sys.executable)} -m pip install matplotlib` (or install ojai with "
            "`pip install '.[plots]'`) and the next run draws it")


def render_plot(result: BenchResult, path: Path) -> Path:
    """Draw ``path``; :class:`PlotsMissing` when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        raise PlotsMissing(plots_missing_note()) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    title = f"ojai bench: {result.route or 'servers by URL'}  ({result.started})"
    fig.suptitle(title, fontsize=11)

    by_prompt: dict[str, list[float]] = defaultdict(list)
    for p in result.pairs:
        if p.speedup is not None:
            by_prompt[p.prompt_id].append(p.speedup)
    if by_prompt:
        names = list(by_prompt)
        means = [sum(v) / len(v) for v in by_prompt.values()]
        lows, highs = [], []
        for v, m in zip(by_prompt.values(), means, strict=True):
            ci = bootstrap_ci(v) or (min(v), max(v))
            lows.append(m - ci[0])
            highs.append(ci[1] - m)
        x = range(len(names))
        left.errorbar(x, means, yerr=[lows, highs], fmt="o", capsize=4, color="tab:blue",
                      label="mean over seeds (95% bootstrap interval)")
        for i, v in enumerate(by_prompt.values()):
            left.scatter([i] * len(v), v, s=12, color="tab:gray", alpha=0.6, zorder=1)
        left.axhline(1.0, color="black", linewidth=0.8)
        threshold = 1.0 + float(result.settings.get("threshold", 0.0))
        left.axhline(threshold, color="tab:red", linestyle="--", linewidth=0.8,
                     label=f"threshold {threshold:.2f}x")
        if result.summary:
            left.axhline(result.summary.mean, color="tab:green", linewidth=0.8,
                         label=f"campaign mean {result.summary.mean:.2f}x")
        left.set_xticks(list(x), names, rotation=30, ha="right", fontsize=8)
        left.legend(fontsize=7, loc="best")
    else:
        left.text(0.5, 0.5, "no finished pairs", ha="center", va="center", transform=left.transAxes)
    from ojai_setup.measure.kinds import label

    drafted = label(result.kind)
    left.set_ylabel(f"speedup ({drafted} tokens/s / plain tokens/s)")
    left.set_title("paired runs", fontsize=10)

    long = result.long
    if long and (long.mtp or long.plain):
        for arm, color in (("mtp", "tab:orange"), ("plain", "tab:blue")):
            data = getattr(long, arm)
            if data is None or not data.rates:
                continue
            xs = [(i + 0.5) * data.window for i in range(len(data.rates))]
            right.plot(xs, data.rates, marker="o", markersize=3, color=color,
                       label=f"{drafted if arm == 'mtp' else arm} ({data.tokens} tokens)")
            if data.collapse.detected and data.collapse.window is not None:
                right.axvline(data.collapse.window * data.window, color="tab:red", linestyle=":",
                              label=f"{drafted if arm == 'mtp' else arm} collapse begins")
        right.set_xlabel("generated tokens (window centre)")
        right.legend(fontsize=7, loc="best")
        right.set_ylim(bottom=0)
    else:
        right.text(0.5, 0.5, "no long generation", ha="center", va="center", transform=right.transAxes)
    right.set_ylabel("tokens/s")
    right.set_title("long generation: tokens/s over position", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def render_sweep_plot(result, path: Path) -> Path:
    """``ojai tune``'s backend x drafting x depth sweep: generation speed over depth, a line
    per backend and drafting, and the plain decoding limit; :class:`PlotsMissing` without
    matplotlib."""
    try:
        import matplotlib
    except ImportError:
        raise PlotsMissing(plots_missing_note().replace("plot.png", path.name)) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    lines: dict[tuple[str, str], list] = defaultdict(list)
    for c in result.cells:
        if c.gen_tps:
            lines[(c.backend, c.drafting)].append((c.depth, c.gen_tps))
    for (backend, drafting), points in sorted(lines.items()):
        points.sort()
        ax.plot([d for d, _ in points], [v for _, v in points], marker="o",
                linestyle="-" if drafting == "plain" else "--", label=f"{backend} {drafting}")
    if result.limit:
        depths = sorted({c.depth for c in result.cells}) or [0]
        ax.plot(depths, [result.limit.tokens_per_second_at(d) for d in depths], color="black",
                linestyle=":", label=f"plain decoding limit ({result.limit.bandwidth / 1e9:.0f} GB/s)")
    if result.depth_choice and result.depth_choice.gen_tps:
        ax.scatter([result.depth_choice.depth], [result.depth_choice.gen_tps], s=160,
                   facecolors="none", edgecolors="tab:red", label="chosen")
    ax.set_xlabel("depth (tokens of context before the task)")
    ax.set_ylabel("generation tokens/s (median)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"ojai tune {result.route}: backend x drafting x depth", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
