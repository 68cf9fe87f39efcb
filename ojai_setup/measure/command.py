"""``ojai bench``: find the two arms, start what is not running, run, save, clean up.

The arms are the routes ojai wrote for one model (a drafted route, one slot with MTP heads, a
draft model or n-gram drafting, and ``<model>``, the plain multi-slot route of the same binary
and model file), or two servers given by URL. A route whose draft and main model are not a
proven pair (:func:`check_files_pair`) is refused; n-gram drafting has no pair to prove. A
"plain" arm that drafts is refused too. Results go to the machine's state folder:
``/var/lib/ojai/bench/<run id>/results.json`` and ``plot.png`` beside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ojai_setup.core.atomic import write_text
from ojai_setup.core.root import Root
from ojai_setup.measure.campaign import BenchConfig, Observer, Runner
from ojai_setup.measure.client import Endpoint
from ojai_setup.measure.results import BenchResult
from ojai_setup.measure import kinds
from ojai_setup.measure.servers import (
    DRAFT_FLAGS,
    MODEL_FLAGS,
    BenchError,
    LaunchScript,
    ServerInfo,
    ServerPool,
    chat_template_of,
    describe_server,
    free_port,
    set_flag,
)

BENCH_DIR = "bench"


@dataclass
class RouteArm:
    name: str
    record: dict
    endpoint: Endpoint
    script: LaunchScript | None = None


@dataclass
class Arms:
    mtp: RouteArm
    plain: RouteArm
    model: str | None
    pairing: str = ""
    extra: dict = field(default_factory=dict)


def bench_dir(root: Root) -> Path:
    from ojai_setup.facts.state import state_dir

    return state_dir(root) / BENCH_DIR


def _url(record: dict) -> str:
    host = record.get("host") or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{host}:{record['port']}"


def find_routes(root: Root, route: str | None, *, command: str = "bench") -> Arms:
    """The MTP route and the plain route of one model from ojai's records; ``command`` (bench
    or tune) is the one asking, whose options the errors name."""
    from ojai_setup.facts.routes import routes_of
    from ojai_setup.core.commandline import closest, ojai_command

    routes = {k: v for k, v in routes_of(root).items() if "flm_tag" not in v}
    models = sorted({v.get("model") for v in routes.values() if v.get("model")})
    setup = ojai_command(root.path, "setup", "--model", "NAME", "--apply")
    urls = ", or give two servers with --mtp-url and --plain-url" if command == "bench" else ""
    if not routes:
        raise BenchError(f"no routes to {'benchmark' if command == 'bench' else 'tune'}: "
                         f"`{setup}` writes them{urls}")
    if route is None:
        if len(models) != 1:
            raise BenchError(f"several models have routes ({', '.join(models)}); choose one with --route")
        model = models[0]
    else:
        model = routes.get(route, {}).get("model") or (route if route in models else None)
        if model is None:
            near = closest(route, [*models, *routes])
            maybe = f"did you mean {' or '.join(near)}? " if near else ""
            raise BenchError(f"no route or model named {route!r}; {maybe}(known routes: "
                             f"{', '.join(sorted(routes))})")
    mine = {k: v for k, v in routes.items() if v.get("model") == model}
    if any(v.get("router") for v in mine.values()):
        if command == "tune":
            [name] = mine
            raise BenchError(f"{name} is served by the router beside other routes, and ojai tune "
                             "starts a route alone with other draft settings; tune it set up "
                             f"alone (`{ojai_command(root.path, 'setup', '--model', model)}`), "
                             "then set up the routes together again: they take the tuned "
                             "settings")
        return router_arms(root, model, mine)
    if any(v.get("server") == "sglang" for v in mine.values()):
        raise BenchError(f"{model} is an SGLang route: ojai writes no plain route beside it (one "
                         "copy of the weights takes the GPUs), so start it and a server of the same "
                         "model without speculation and give both: --mtp-url URL --plain-url URL")
    mtp = [k for k, v in mine.items() if kinds.drafts(v.get("spec_type"))]
    plain = [k for k, v in mine.items() if not kinds.drafts(v.get("spec_type"))]
    if route in mtp:  # one drafted route of several, named
        mtp = [route]
    if len(mtp) != 1 or len(plain) != 1:
        several = f"; choose the drafted one with --route ({', '.join(sorted(mtp))})" \
            if len(mtp) > 1 and len(plain) == 1 else ""
        raise BenchError(f"model {model}: expected one drafted route and one plain route, found "
                         f"{', '.join(sorted(mine)) or 'none'}{several}")

    def arm(name: str) -> RouteArm:
        rec = mine[name]
        script = None
        if rec.get("script") and root.exists(rec["script"]):
            script = LaunchScript.parse(root.read_text(rec["script"]), rec["script"])
        return RouteArm(name=name, record=rec, endpoint=Endpoint(_url(rec)), script=script)

    return Arms(mtp=arm(mtp[0]), plain=arm(plain[0]), model=model)


def router_arms(root: Root, model: str, mine: dict[str, dict]) -> Arms:
    """A route of the router (``--model A --model B``) against the same model without
    drafting: the route through the router, selected by the request's ``model`` field (the
    router started from its launch script when it does not answer), and a plain server bench
    starts on a free port from the arguments the routes step recorded for it (one slot, the
    route's context, drafting off, the router's binary and environment)."""
    [(name, rec)] = mine.items()
    script = rec.get("script")
    if not script or not root.exists(script):
        raise BenchError(f"route {name} is served by the router, whose launch script "
                         f"{script or '(none recorded)'} is missing; run ojai setup again")
    router = LaunchScript.parse(root.read_text(script), script)
    if not rec.get("plain_args"):
        raise BenchError(f"route {name}: no plain arguments recorded to compare it with (an "
                         "embedding route drafts nothing, or the routes were written by an "
                         "older ojai: run ojai setup again)")
    port = free_port()
    argv = set_flag(set_flag(rec["plain_args"], ("--host",), "127.0.0.1"), ("--port",), str(port))
    plain = RouteArm(name=f"{name}-plain", endpoint=Endpoint(f"http://127.0.0.1:{port}"),
                     record={**rec, "spec_type": "none", "draft": None, "draft_n_max": None,
                             "script": None},
                     script=LaunchScript(router.preamble, (router.argv[0], *argv)))
    drafted = RouteArm(name=name, record=rec, endpoint=Endpoint(_url(rec), model=name),
                       script=router)
    return Arms(mtp=drafted, plain=plain, model=model)


def check_route_pair(root: Root, record: dict) -> str:
    """Refuse a route whose draft and main model are not a proven pair; the sentence that
    says why it is one (or why there is no pair to prove: n-gram drafting)."""
    main, draft = record.get("main"), record.get("draft")
    return check_files_pair(root.resolve(main) if main else None,
                            root.resolve(draft) if draft else None,
                            record.get("spec_type"), record.get("pairing") or record.get("mtp"))


def pair_kind(spec_type: str | None, draft: Path | None, kind: str | None = None) -> str:
    """What a pairing proof checks for a drafted server: ``sidecar``/``in_file`` (MTP heads),
    ``draft_model`` (a separate draft model), ``ngram`` (nothing to pair)."""
    if kind in ("sidecar", "in_file", "draft_model", "ngram"):
        return kind
    if kinds.is_ngram(spec_type):
        return "ngram"
    if "draft-mtp" in kinds.parts(spec_type):
        return "sidecar" if draft else "in_file"
    return "draft_model"


def check_files_pair(main: Path | None, draft: Path | None, spec_type: str | None,
                     kind: str | None = None) -> str:
    """The pairing proof for a drafted server's files, by its kind of drafting
    (:func:`ojai_setup.formats.gguf.check_pair`): MTP heads (architecture, hidden size, token
    list), a separate draft model (tokenizer and token list), or none needed (n-gram drafting
    drafts from the text itself)."""
    from ojai_setup.facts.gguf import read_model_info
    from ojai_setup.formats.gguf import GGUFError, check_pair

    kind = pair_kind(spec_type, draft, kind)
    if kind == "ngram" and not draft:
        return (f"not applicable: {kinds.label(spec_type) if kinds.is_ngram(spec_type) else 'n-gram drafting'}"
                " drafts from the text itself (no draft model, nothing to pair)")
    if not main:
        raise BenchError("the drafted route's record names no main model; run `ojai setup "
                         "--model NAME --apply` again so that its pair can be checked")
    try:
        main_info = read_model_info(main)
        draft_info = read_model_info(draft) if draft else None
    except GGUFError as exc:
        raise BenchError(f"cannot check the route's pair: {exc}") from None
    verdict = check_pair(main_info, draft_info, kind)  # type: ignore[arg-type]
    if not verdict.ok:
        raise BenchError("refusing to benchmark a route whose draft and main model are not a "
                         "proven pair: " + "; ".join(verdict.reasons))
    if kind == "draft_model":
        same = draft is not None and Path(draft).resolve() == Path(main).resolve()
        what = f"{Path(main).name} drafts for itself" if same else \
            f"{Path(draft).name} drafts for {Path(main).name}"
        return f"proven pair: {what} (tokenizer and token list checked)"
    what = f"{Path(draft).name} drafts for {Path(main).name}" if draft else \
        f"{Path(main).name} carries its own MTP heads"
    return f"proven pair: {what} (architecture, hidden size and token list checked)"


def url_pairing(info: ServerInfo) -> str:
    """The pairing of a drafted server given by URL: checked when its command line could be
    read from its process on this host and its files can be read, else why not."""
    if not info.command:
        where = f" (its /props names {info.model_path})" if info.model_path else ""
        return ("not checked: the server given by URL runs where ojai cannot read its command "
                f"line{where}, and this build's /props does not name a draft file")
    script = LaunchScript("", tuple(info.command))
    main, draft = script.value(*MODEL_FLAGS), script.value(*DRAFT_FLAGS)
    try:
        return check_files_pair(Path(main) if main else None, Path(draft) if draft else None,
                                info.spec_type) + " (read from the running process's files)"
    except BenchError as exc:
        if "cannot check" in str(exc):
            return f"not checked: {exc}"
        raise


def template_note(config: BenchConfig, info: ServerInfo) -> str:
    """How the prompts reach the model: raw, in its own chat template, or in llama-server's
    fallback template when the file has none."""
    if not config.template:
        return "sent raw (--raw), without a chat template"
    main = next((m.path for m in info.models if m.role == "main"), None) or info.model_path
    has = chat_template_of(main) if main else None
    if has is True:
        return "wrapped in the model's own chat template"
    if has is False:
        return ("wrapped in llama-server's fallback chat template (ChatML): the model file has "
                "no chat template of its own; --raw sends the prompts as they are")
    return "wrapped in the server's chat template (/apply-template)"


def with_metrics(script: LaunchScript) -> LaunchScript:
    """The launch script with ``--metrics`` (the exact speculation counters) switched on."""
    if "--metrics" in script.argv:
        return script
    return LaunchScript(script.preamble, (*script.argv, "--metrics"))


def _bring_up(pool: ServerPool, arm: RouteArm, label: str, ready_timeout: float) -> tuple[ServerInfo, Endpoint]:
    status, _ = arm.endpoint.health()
    argv = arm.script.argv if arm.script else None
    if arm.record.get("router") and arm.script and arm.record.get("args"):
        argv = (arm.script.argv[0], *arm.record["args"])  # the route's own, not the router's
    if status == 200:
        return describe_server(label, arm.endpoint, route=arm.name, argv=argv,
                               script=arm.record.get("script"),
                               draft_n_max=arm.record.get("draft_n_max")), arm.endpoint
    if arm.script is None:
        raise BenchError(f"route {arm.name} does not answer at {arm.endpoint.url} and has no "
                         "launch script to start it")
    pool.ready_timeout = ready_timeout
    endpoint, pid = pool.start(with_metrics(arm.script), arm.endpoint.url, arm.name)
    if arm.endpoint.model:  # the router: the route's own arguments describe it, not its own
        endpoint = arm.endpoint
        return describe_server(label, endpoint, route=arm.name, argv=argv,
                               script=arm.record.get("script"), started_by_bench=True,
                               draft_n_max=arm.record.get("draft_n_max")), endpoint
    return describe_server(label, endpoint, route=arm.name, argv=argv, script=arm.record.get("script"),
                           started_by_bench=True, pid=pid,
                           draft_n_max=arm.record.get("draft_n_max")), endpoint


def new_result(route: str | None, config: BenchConfig) -> BenchResult:
    from ojai_setup.planning.plan import ojai_version

    return BenchResult(ojai_version=ojai_version(), route=route,
                       started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       settings=config.as_dict())


def save_result(root: Root, result: BenchResult, *, plot: bool = True) -> Path:
    """Write ``results.json`` (and ``plot.png``) into a new run folder; returns the folder."""
    base = bench_dir(root)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = f"{stamp}-{result.route or 'urls'}"
    folder = base / name
    n = 1
    while folder.exists():
        n += 1
        folder = base / f"{name}-{n}"
    folder.mkdir(parents=True)
    if plot:
        from ojai_setup.measure.plot import PlotsMissing, render_plot

        try:
            render_plot(result, folder / "plot.png")
            result.plot = str(folder / "plot.png")
        except PlotsMissing as exc:
            result.plot, result.no_plot = None, str(exc)
        except Exception as exc:  # a plot is a convenience; never lose the measurements to it
            result.plot, result.no_plot = None, f"plot.png could not be drawn: {exc}"
    write_text(folder / "results.json", json.dumps(result.dump(), indent=2) + "\n", mode=0o644)
    return folder


def run_bench(root: Root, config: BenchConfig, *, route: str | None = None,
              mtp_url: str | None = None, plain_url: str | None = None,
              observer: Observer | None = None, ready_timeout: float = 600.0,
              save: bool = True) -> tuple[BenchResult, Path | None]:
    """Run a campaign; returns the result and the folder it was saved in."""
    if (mtp_url is None) != (plain_url is None):
        raise BenchError("give both --mtp-url and --plain-url, or neither (then ojai's routes are used)")
    with ServerPool(log_dir=bench_dir(root) / "logs") as pool:
        if mtp_url and plain_url:
            mtp_ep, plain_ep = Endpoint(mtp_url), Endpoint(plain_url)
            for ep in (mtp_ep, plain_ep):
                status, body = ep.health()
                if status != 200:
                    raise BenchError(f"{ep.url} does not answer /health with 200 ({status or 'no answer'} {body[:100]})")
            mtp_info = describe_server("mtp", mtp_ep)
            plain_info = describe_server("plain", plain_ep)
            result = new_result(None, config)
            result.pairing = url_pairing(mtp_info)
        else:
            arms = find_routes(root, route)
            pairing = check_route_pair(root, arms.mtp.record)
            mtp_info, mtp_ep = _bring_up(pool, arms.mtp, "mtp", ready_timeout)
            plain_info, plain_ep = _bring_up(pool, arms.plain, "plain", ready_timeout)
            result = new_result(arms.model, config)
            result.pairing = pairing
        result.servers = [mtp_info, plain_info]
        result.template = template_note(config, mtp_info)
        runner = Runner(mtp_ep, plain_ep, config, observer=observer, mtp_info=mtp_info,
                        plain_info=plain_info)
        runner.run(result)
    folder = save_result(root, result) if save else None
    return result, folder


def load_result(path: Path) -> BenchResult:
    """A saved result: a ``results.json`` file or the run folder holding one."""
    file = path / "results.json" if path.is_dir() else path
    try:
        return BenchResult.model_validate_json(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BenchError(f"{file}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise BenchError(f"{file}: not an ojai bench result: {str(exc).splitlines()[0]}") from None


def resolve_run(root: Root, ref: str) -> Path:
    """A run given as a path, or as a run folder name under the state folder."""
    p = Path(ref)
    if p.exists():
        return p
    q = bench_dir(root) / ref
    if q.exists():
        return q
    raise BenchError(f"{ref}: no such file or run (runs are under {bench_dir(root)})")
