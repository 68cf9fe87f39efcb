"""The ``ojai bench`` commands: options in, a :class:`BenchResult` out, rendered by the
terminal. Heavy modules are imported inside the commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ojai_setup.core.status import ExitStatus

bench_app = typer.Typer(
    name="bench", add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
    help="Measure what drafting really buys: paired runs drafted (MTP, a draft model, n-gram) vs "
         "plain, a long generation, parallel streams. `ojai bench compare A B` shows what changed between two saved runs.")

#: the one prompt-file format of bench and tune (measure/prompts.py)
PROMPTS_HELP = ("Your prompts: text with one prompt per paragraph (blank lines between them), "
                "or JSON lines {\"id\", \"prompt\"} in a .jsonl file")

#: exit codes: OK finished (also when a cap ended it early), FAILED refused or failed,
#: INTERRUPTED Ctrl-C
INTERRUPTED = ExitStatus.INTERRUPTED


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"{what}: a comma-separated list of whole numbers, like 1,2,4") from None
    if not values or any(v < 1 for v in values):
        raise typer.BadParameter(f"{what}: whole numbers of at least 1")
    return values


@bench_app.callback(invoke_without_command=True)
def bench(
    ctx: typer.Context,
    root: Annotated[Path, typer.Option("--root", help="Machine root (results go to its /var/lib/ojai/bench).")] = Path("/"),
    route: Annotated[Optional[str], typer.Option("--route", help="The model (or either of its routes) to benchmark; default: the only one ojai wrote.")] = None,
    mtp_url: Annotated[Optional[str], typer.Option("--mtp-url", help="Benchmark this llama-server as the drafted arm (MTP, a draft model or n-gram drafting; with --plain-url).")] = None,
    plain_url: Annotated[Optional[str], typer.Option("--plain-url", help="The plain arm's llama-server.")] = None,
    prompts: Annotated[Optional[Path], typer.Option("--prompts", metavar="FILE", help=PROMPTS_HELP + " (default: 5 built-in real tasks).")] = None,
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Seeds per prompt.")] = 3,
    tokens: Annotated[int, typer.Option("--tokens", min=8, help="Token budget of each paired run.")] = 512,
    temperature: Annotated[float, typer.Option("--temperature", min=0.0, help="Sampling temperature (0: greedy, and outputs are compared byte for byte).")] = 0.0,
    top_p: Annotated[Optional[float], typer.Option("--top-p", min=0.0, max=1.0, help="top-p of every request (default: the server's own).")] = None,
    top_k: Annotated[Optional[int], typer.Option("--top-k", min=0, help="top-k of every request (default: the server's own).")] = None,
    threshold: Annotated[float, typer.Option("--threshold", help="Adopt drafting only when the whole interval of the mean speedup is above 1 + this (0.10: +10 %).")] = 0.10,
    long_tokens: Annotated[int, typer.Option("--long-tokens", min=0, help="Tokens per arm of the long generation (0: skip it).")] = 2000,
    window: Annotated[int, typer.Option("--window", min=10, help="Tokens per window of the long generation.")] = 200,
    collapse_ratio: Annotated[float, typer.Option("--collapse-ratio", min=0.01, max=0.99, help="A long generation collapsed when it stays under this share of its early windows or of the plain arm.")] = 0.5,
    concurrency: Annotated[str, typer.Option("--concurrency", help="Parallel streams to test, comma-separated ('' skips it).")] = "1,2,4",
    concurrency_tokens: Annotated[int, typer.Option("--concurrency-tokens", min=8, help="Tokens per stream in the concurrency test.")] = 256,
    no_pairs: Annotated[bool, typer.Option("--no-pairs", help="Skip the paired runs.")] = False,
    raw: Annotated[bool, typer.Option("--raw", help="Send prompts as they are, without the model's chat template.")] = False,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Generate the whole token budget in paired runs.")] = False,
    score: Annotated[Optional[str], typer.Option("--score", help="Shell command scoring one output (text on stdin and in $OJAI_BENCH_OUTPUT); its last output line is a number or passed/total.")] = None,
    max_minutes: Annotated[float, typer.Option("--max-minutes", min=0.1, help="Stop starting new work after this long.")] = 60.0,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Cap on all tokens generated.")] = 500_000,
    depth: Annotated[Optional[list[int]], typer.Option("--depth", metavar="TOKENS", help="Sweep backend x drafting at this context depth instead (repeat: --depth 0 --depth 8192), as ojai tune does with the route's own drafting setting; nothing is written.")] = None,
    binary: Annotated[Optional[list[str]], typer.Option("--binary", help="A llama-server build in the backend x drafting sweep (repeat); default: the route's own and each other backend ojai installed.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Benchmark the drafted route against the plain route of the same model and binary."""
    if ctx.invoked_subcommand is not None:
        return
    from ojai_setup.core.root import Root
    from ojai_setup.commands.terminal import Terminal
    from ojai_setup.measure.campaign import PARTS, BenchConfig
    from ojai_setup.measure.command import run_bench
    from ojai_setup.measure.prompts import BUILTIN, PromptFileError, load_prompts
    from ojai_setup.measure.report import BenchReport, LiveObserver
    from ojai_setup.measure.servers import BenchError

    term = Terminal(json_mode=json_out)
    try:
        prompt_set = load_prompts(prompts) if prompts else BUILTIN
    except PromptFileError as exc:
        term.error(str(exc))
        raise typer.Exit(ExitStatus.USAGE) from None
    if depth or binary:
        from ojai_setup.measure.tune import TuneConfig, TuneReport, bench_sweep_config, run_tune

        sweep = TuneConfig(binaries=tuple(binary or ()), depths=tuple(depth) if depth else None,
                           long_tokens=long_tokens, max_seconds=max_minutes * 60,
                           bench=BenchConfig(prompts=prompt_set, seeds=(1,), n_predict=min(tokens, 128),
                                             template=not raw, collapse_ratio=collapse_ratio,
                                             temperature=temperature, top_p=top_p, top_k=top_k))
        try:
            name, sweep = bench_sweep_config(Root(root), route, sweep)
            result = run_tune(Root(root), name, sweep, command="bench")
        except BenchError as exc:
            term.error(str(exc))
            raise typer.Exit(ExitStatus.FAILED) from None
        term.show(TuneReport(result))
        raise typer.Exit(ExitStatus.INTERRUPTED if result.interrupted else ExitStatus.OK)
    ks = _ints(concurrency, "--concurrency") if concurrency.strip() else ()
    parts = tuple(p for p in PARTS if not (p == "pairs" and no_pairs) and not (p == "long" and not long_tokens)
                  and not (p == "concurrency" and not ks))
    config = BenchConfig(prompts=prompt_set, seeds=tuple(range(1, seeds + 1)), n_predict=tokens,
                         temperature=temperature, top_p=top_p, top_k=top_k,
                         ignore_eos=ignore_eos, template=not raw,
                         threshold=threshold, long_tokens=long_tokens, long_window=window,
                         collapse_ratio=collapse_ratio,
                         concurrency=ks, concurrency_tokens=concurrency_tokens, parts=parts,
                         max_seconds=max_minutes * 60, max_tokens=max_tokens, score_command=score)
    live = LiveObserver(term.console) if (term.color and not json_out) else None
    try:
        if live:
            with live:
                result, folder = run_bench(Root(root), config, route=route, mtp_url=mtp_url,
                                           plain_url=plain_url, observer=live)
        else:
            result, folder = run_bench(Root(root), config, route=route, mtp_url=mtp_url,
                                       plain_url=plain_url)
    except BenchError as exc:
        term.error(str(exc))
        raise typer.Exit(ExitStatus.FAILED) from None
    except KeyboardInterrupt:
        term.error("interrupted before any pair finished; nothing saved")
        raise typer.Exit(INTERRUPTED) from None
    term.show(BenchReport(result, folder))
    raise typer.Exit(INTERRUPTED if result.interrupted else ExitStatus.OK)


@bench_app.command("compare")
def bench_compare(
    a: Annotated[str, typer.Argument(help="A saved run: its folder, its results.json, or its name under /var/lib/ojai/bench.")],
    b: Annotated[str, typer.Argument(help="The other run.")],
    root: Annotated[Path, typer.Option("--root", help="Machine root whose saved runs to look in.")] = Path("/"),
    json_out: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Show what changed between two saved runs: headline figures, settings, servers."""
    from ojai_setup.core.root import Root
    from ojai_setup.commands.terminal import Terminal
    from ojai_setup.measure.command import load_result, resolve_run
    from ojai_setup.measure.report import CompareReport, compare
    from ojai_setup.measure.servers import BenchError

    term = Terminal(json_mode=json_out)
    try:
        ra = load_result(resolve_run(Root(root), a))
        rb = load_result(resolve_run(Root(root), b))
    except BenchError as exc:
        term.error(str(exc))
        raise typer.Exit(ExitStatus.FAILED) from None
    term.show(CompareReport(compare(ra, rb)))


def _lengths(text: str) -> tuple[int, ...]:
    """``1-8`` or ``1,2,4``."""
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            values = tuple(range(lo, hi + 1))
        else:
            values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter("--lengths: a range like 1-8 or a list like 1,2,4") from None
    if not values or any(v < 1 for v in values):
        raise typer.BadParameter("--lengths: draft lengths of at least 1")
    return values


def tune(
    route: Annotated[str, typer.Argument(help="The model (or either of its routes) to tune.")],
    root: Annotated[Path, typer.Option("--root", help="Machine root (its /etc/ojai/tuned.toml and /var/lib/ojai/tune).")] = Path("/"),
    lengths: Annotated[str, typer.Option("--lengths", help="Draft lengths (--spec-draft-n-max) of draft heads and draft models to sweep: 1-8 or 1,2,4.")] = "1-8",
    kind: Annotated[Optional[list[str]], typer.Option("--kind", help="A kind of drafting to sweep (a --spec-type value: draft-mtp, draft-simple, ngram-simple, ngram-mod, a chain like draft-simple,ngram-mod; repeat); default: every kind that applies to the route and the binary.")] = None,
    ngram_lengths: Annotated[str, typer.Option("--ngram-lengths", help="Drafted lengths of n-gram drafting to sweep (--spec-ngram-*-size-m, --spec-ngram-mod-n-max).")] = "4,8,16",
    temperature: Annotated[Optional[float], typer.Option("--temperature", min=0.0, help="Sampling temperature of the runs (default: the route's own; 0 is greedy).")] = None,
    top_p: Annotated[Optional[float], typer.Option("--top-p", min=0.0, max=1.0, help="top-p of the runs (default: the route's own).")] = None,
    top_k: Annotated[Optional[int], typer.Option("--top-k", min=0, help="top-k of the runs (default: the route's own).")] = None,
    min_pairs: Annotated[int, typer.Option("--min-pairs", min=2, help="At least this many pairs per setting (more seeds when prompts x seeds is fewer).")] = 3,
    threshold: Annotated[float, typer.Option("--threshold", min=0.0, help="Choose a drafted setting only when its confirmed median's interval lies above 1 + this; else no drafting.")] = 0.05,
    binary: Annotated[Optional[list[str]], typer.Option("--binary", help="A llama-server build to tune with (repeat for each backend, e.g. ROCm and Vulkan); default: the route's own.")] = None,
    prompts: Annotated[Optional[Path], typer.Option("--prompts", metavar="FILE", help=PROMPTS_HELP + " (default: 5 built-in real tasks; a file of one prompt a line, tune's old format, is still read, with a note).")] = None,
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Seeds per prompt in each length's short paired run.")] = 2,
    tokens: Annotated[int, typer.Option("--tokens", min=8, help="Tokens per run in the sweep.")] = 128,
    confirm_seeds: Annotated[int, typer.Option("--confirm-seeds", min=1, help="Seeds per prompt in the confirming run.")] = 4,
    confirm_tokens: Annotated[int, typer.Option("--confirm-tokens", min=8, help="Tokens per run in the confirming run.")] = 256,
    long_tokens: Annotated[int, typer.Option("--long-tokens", min=0, help="Tokens of the long-generation safety check (0: skip).")] = 2000,
    collapse_ratio: Annotated[float, typer.Option("--collapse-ratio", min=0.01, max=0.99, help="The long-generation check fails when the drafted arm stays under this share of its early windows or of the plain arm.")] = 0.5,
    raw: Annotated[bool, typer.Option("--raw", help="Send prompts without the chat template.")] = False,
    no_early_stop: Annotated[bool, typer.Option("--no-early-stop", help="Measure every length.")] = False,
    max_minutes: Annotated[float, typer.Option("--max-minutes", min=0.1, help="Stop starting new work after this long (rerun to resume).")] = 60.0,
    no_write: Annotated[bool, typer.Option("--no-write", help="Measure and report, but leave /etc/ojai/tuned.toml alone.")] = False,
    synthetic_acceptance: Annotated[Optional[float], typer.Option("--synthetic-acceptance", min=0.0, max=1.0, help="Benchmarking only: force per-token acceptance A with llama-server's --spec-synth-rates.")] = None,
    no_gate: Annotated[bool, typer.Option("--no-gate", help="Measure a binary without first comparing its output with its own CPU backend's (the correctness gate).")] = False,
    depth: Annotated[Optional[list[int]], typer.Option("--depth", metavar="TOKENS", help="A context depth to measure every backend plain and drafted at (repeat: --depth 0 --depth 8192 --depth 32768); the choice is made at the deepest; default: the route's context.")] = None,
    depth_tokens: Annotated[int, typer.Option("--depth-tokens", min=8, help="Tokens generated per run at each depth.")] = 64,
    depth_runs: Annotated[int, typer.Option("--depth-runs", min=1, help="Runs per backend, drafting and depth.")] = 3,
    bandwidth: Annotated[Optional[float], typer.Option("--bandwidth", metavar="GB/s", min=0.1, help="The memory bandwidth for the plain decoding limit (from the machine's specification); default: measured.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Choose the route's backend, its kind of drafting and its length from measurement (or no
    drafting, when none beats plain) at the owner's context depth, and write it for `ojai setup`.

    Exit code 0 when a choice was made (no drafting included), 1 when none could be, 130 on
    Ctrl-C (rerun to resume)."""
    from dataclasses import replace

    from ojai_setup.core.root import Root
    from ojai_setup.commands.terminal import Terminal
    from ojai_setup.measure.tune import TuneConfig, TuneReport, run_tune
    from ojai_setup.formats.tuning import TuningError
    from ojai_setup.measure.prompts import BUILTIN, PromptFileError, load_prompts
    from ojai_setup.measure.servers import BenchError

    from ojai_setup.measure.kinds import canonical

    try:
        kind = [canonical(k) for k in kind or ()]
    except ValueError as exc:
        raise typer.BadParameter(f"--kind: {exc}") from None
    term = Terminal(json_mode=json_out)
    try:
        prompt_set = load_prompts(prompts, lines=True) if prompts else BUILTIN
    except PromptFileError as exc:
        term.error(str(exc))
        raise typer.Exit(ExitStatus.USAGE) from None
    if prompts:
        from ojai_setup.measure.prompts import old_format_note

        note = old_format_note(prompts)
        if note:
            term.note(note)
    config = TuneConfig(lengths=_lengths(lengths), ngram_lengths=_lengths(ngram_lengths),
                        kinds=tuple(kind or ()), min_pairs=min_pairs, threshold=threshold,
                        binaries=tuple(binary or ()),
                        confirm_seeds=tuple(range(101, 101 + confirm_seeds)), confirm_tokens=confirm_tokens,
                        long_tokens=long_tokens, early_stop=not no_early_stop, max_seconds=max_minutes * 60,
                        synthetic_acceptance=synthetic_acceptance, write=not no_write,
                        gate=not no_gate, depths=tuple(depth) if depth else None,
                        depth_tokens=depth_tokens, depth_runs=depth_runs,
                        bandwidth=bandwidth * 1e9 if bandwidth else None)
    config.bench = replace(config.bench, prompts=prompt_set, seeds=tuple(range(1, seeds + 1)),
                           n_predict=tokens, template=not raw, collapse_ratio=collapse_ratio,
                           temperature=temperature, top_p=top_p, top_k=top_k)
    try:
        result = run_tune(Root(root), route, config)
    except (BenchError, TuningError, OSError) as exc:
        term.error(str(exc))
        raise typer.Exit(ExitStatus.FAILED) from None
    term.show(TuneReport(result))
    raise typer.Exit(INTERRUPTED if result.interrupted else (
        ExitStatus.OK if result.choice is not None else ExitStatus.FAILED))
