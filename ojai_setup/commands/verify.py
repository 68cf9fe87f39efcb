"""``ojai verify``: ask each route ojai wrote for health and one short completion.

From the completion's ``timings`` it reports tokens/s, the drafted and accepted token counts,
and the speedup the standard speculative-decoding model predicts (Leviathan et al., 2023):
with per-token acceptance ``a``, draft length ``g`` and draft cost ``c`` relative to one main
pass, a verification step yields ``E = (1 - a**(g+1)) / (1 - a)`` tokens and the speedup is
``S = E / (g*c + 1)``. ``draft_n_accepted / draft_n`` is not ``a`` (drafts after the first
rejection are thrown away), so ``a`` is solved from the mean tokens per verification step. This
is a prediction: a measured speedup needs a paired run without speculation.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel

from ojai_setup.commands.terminal import Terminal
from ojai_setup.core.commandline import ojai_command
from ojai_setup.core.paths import API_KEY_VARIABLE, ROUTES_DIR, UNITS_DIR
from ojai_setup.facts.routes import routes_of
from ojai_setup.measure.client import POLL_S
from ojai_setup.measure.stats import expected_tokens, solve_acceptance
from ojai_setup.core.root import Root
from ojai_setup.core.status import ExitStatus
from ojai_setup.domain.gate import MAX_MEAN_KL, MIN_AGREEMENT

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
#: assumed cost of one draft-head pass relative to a main-model pass (an MTP head is one layer)
DRAFT_COST = 0.05


class RouteCheck(BaseModel):
    route: str
    url: str
    healthy: bool
    error: str | None = None
    model_id: str | None = None  # the id Lemonade lists the route under
    #: an embedding route: the length of the vector ``/v1/embeddings`` returned
    embedding_dims: int | None = None
    predicted_n: int | None = None
    tokens_per_second: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None
    accepted_fraction: float | None = None  # draft_n_accepted / draft_n
    tokens_per_step: float | None = None  # mean tokens per verification step (E)
    acceptance_estimate: float | None = None  # a, solved from E and g
    draft_n_max: int | None = None
    predicted_speedup: float | None = None  # S = E / (g*c + 1), a prediction
    #: the route's kind of drafting (its ``--spec-type``), when its record says
    spec_type: str | None = None
    #: where drafted/accepted come from: "metrics" (``/metrics``) or "timings"
    counters: str | None = None
    steps: int | None = None  # verification steps (``/metrics``' num_drafts)
    #: why no speedup is predicted for a drafted route
    no_prediction: str | None = None
    #: the correctness gate against the same build's CPU backend
    #: (:class:`ojai_setup.measure.gate.GateRun` as a document); None when it did not run
    gate: dict | None = None
    #: why the gate did not run (no launch script, ``--no-gate``, ...)
    gate_note: str | None = None

    @property
    def gate_failed(self) -> bool:
        """The gate ran and the route does not compute what the CPU computes (or could not
        be read)."""
        return self.gate is not None and not (self.gate.get("figures") or {}).get("passed", False)


def predict(timings: dict, g: int | None, cost: float = DRAFT_COST) -> dict:
    """Acceptance and predicted speedup from a completion's ``timings``."""
    out: dict = {"predicted_n": timings.get("predicted_n"),
                 "tokens_per_second": timings.get("predicted_per_second")}
    drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
    n = timings.get("predicted_n") or 0
    if drafted is None or accepted is None or not g:
        return out
    out.update(draft_n=drafted, draft_n_accepted=accepted, draft_n_max=g,
               accepted_fraction=(accepted / drafted) if drafted else None)
    steps = n - accepted  # every verification step emits one token of its own
    if steps > 0:
        e = n / steps
        a = solve_acceptance(e, g)
        out.update(tokens_per_step=e, acceptance_estimate=a,
                   predicted_speedup=expected_tokens(a, g) / (g * cost + 1))
    return out


def _get(url: str, timeout: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def api_key_of(root: Root, record: dict) -> tuple[str | None, str | None]:
    """The API key a route asks for (from its root-only environment file), or why it cannot
    be read; (None, None) when the route has none."""
    path = record.get("api_key_env")
    if not path:
        return None, None
    try:
        text = root.resolve(path).read_text(encoding="utf-8")
    except PermissionError:
        return None, f"the route asks for the API key in {path}, readable by root only: run `sudo ojai verify`"
    except OSError as exc:
        return None, f"the route asks for an API key but {path} cannot be read ({exc.strerror})"
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == API_KEY_VARIABLE and value.strip():
            return value.strip(), None
    return None, f"{path} holds no {API_KEY_VARIABLE}"


def _spec_counters(base: str, headers: dict,
                   model: str | None = None) -> tuple[int, int, int] | None:
    """(verification steps, drafted, accepted) from ``/metrics`` when the server serves it
    (a router's: of the route ``model``)."""
    from urllib.parse import quote

    from ojai_setup.measure.client import parse_spec_metrics

    try:
        query = f"?model={quote(model, safe='')}" if model else ""
        req = urllib.request.Request(base + "/metrics" + query, headers=headers)
        with urllib.request.urlopen(req, timeout=10) as resp:
            c = parse_spec_metrics(resp.read().decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None
    return (c.drafts, c.draft_tokens, c.accepted) if c else None


def _kind_note(spec_type: str | None) -> str | None:
    """Why verify predicts nothing for a kind: only MTP heads have a known small draft cost."""
    from ojai_setup.measure import kinds

    if spec_type is None or not kinds.drafts(spec_type) or kinds.parts(spec_type) == ("draft-mtp",):
        return None
    if kinds.is_ngram(spec_type):
        return (f"{spec_type}: n-gram drafting; the acceptance model is not predictive for it "
                "(`ojai bench` measures it)")
    return (f"{spec_type}: a draft model's cost is not known without a paired run (`ojai bench` "
            "measures it)")


def _wait_healthy(name: str, base: str, timeout: float) -> RouteCheck | None:
    """Poll ``/health`` until it answers 200 (None) or ``timeout`` passes (the failed check)."""
    deadline = time.monotonic() + timeout
    status, body = 0, ""
    while True:
        try:
            status, body = _get(base + "/health", timeout=5)
        except OSError as exc:
            status, body = 0, str(exc)
        if status == 200:
            return None
        if time.monotonic() > deadline:
            return RouteCheck(route=name, url=base, healthy=False,
                              error=f"/health answered {status or 'nothing'}: {body.strip()[:200]}")
        time.sleep(POLL_S)


def check_route(name: str, host: str, port: int, draft_n_max: int | None, *, timeout: float,
                n_predict: int, api_key: str | None = None,
                spec_type: str | None = None, router: bool = False) -> RouteCheck:
    """``/health``, then one completion; ``router``: the route is one of several behind a
    llama-server in router mode, which the request's ``model`` field selects (and loads, when
    it is not loaded yet)."""
    base = f"http://{host}:{port}"
    unhealthy = _wait_healthy(name, base, timeout)
    if unhealthy is not None:
        return unhealthy
    request = {"prompt": PROMPT, "n_predict": n_predict, "ignore_eos": True,
               "temperature": 0.0, "cache_prompt": False}
    if router:
        request["model"] = name
    payload = json.dumps(request).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(base + "/completion", data=payload, headers=headers)
    model = name if router else None
    before = _spec_counters(base, headers, model) if not router else None
    try:
        with urllib.request.urlopen(req, timeout=max(timeout, 120)) as resp:
            data = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace").strip()[:300]
        return RouteCheck(route=name, url=base, healthy=True,
                          error=f"completion failed ({exc.code}): {detail}")
    except (OSError, ValueError) as exc:
        return RouteCheck(route=name, url=base, healthy=True, error=f"completion failed: {exc}")
    if router and data.get("model") not in (None, name):
        return RouteCheck(route=name, url=base, healthy=True,
                          error=f"the router answered as {data.get('model')!r}, not {name!r}")
    after = _spec_counters(base, headers, model) if before is not None else None
    timings = dict(data.get("timings", {}))
    note = _kind_note(spec_type)
    extra: dict = {"spec_type": spec_type, "no_prediction": note}
    if timings.get("draft_n") is not None:
        extra["counters"] = "timings"
    if before is not None and after is not None:
        steps, drafted, accepted = (a - b for a, b in zip(after, before, strict=True))
        # the counters are this completion's when they agree with its timings
        if steps > 0 and drafted == timings.get("draft_n") and accepted == timings.get("draft_n_accepted"):
            extra.update(counters="metrics", steps=steps)
    out = predict(timings, draft_n_max if note is None else None)
    if note is not None and timings.get("draft_n") is not None:
        drafted, accepted = timings["draft_n"], timings.get("draft_n_accepted") or 0
        out.update(draft_n=drafted, draft_n_accepted=accepted,
                   accepted_fraction=accepted / drafted if drafted else None)
    if extra.get("steps"):
        out["tokens_per_step"] = 1 + (out.get("draft_n_accepted") or 0) / extra["steps"]
    return RouteCheck(route=name, url=base, healthy=True, **out, **extra)


def check_embedding_route(name: str, host: str, port: int, *, timeout: float,
                          api_key: str | None = None) -> RouteCheck:
    """An embedding route (``--embeddings``, which serves no completions): ``/health``, then
    one ``POST /v1/embeddings`` whose first vector must be non-empty numbers."""
    base = f"http://{host}:{port}"
    unhealthy = _wait_healthy(name, base, timeout)
    if unhealthy is not None:
        return unhealthy
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(base + "/v1/embeddings", headers=headers,
                                 data=json.dumps({"input": PROMPT, "model": name}).encode())
    try:
        with urllib.request.urlopen(req, timeout=max(timeout, 120)) as resp:
            data = json.loads(resp.read())
        vector = data["data"][0]["embedding"]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        return RouteCheck(route=name, url=base, healthy=True,
                          error=f"/v1/embeddings failed: {exc}")
    if not vector or not all(isinstance(v, (int, float)) for v in vector):
        return RouteCheck(route=name, url=base, healthy=True,
                          error="/v1/embeddings returned no vector of numbers")
    return RouteCheck(route=name, url=base, healthy=True, embedding_dims=len(vector))


def check_sglang_route(name: str, host: str, port: int, draft_n_max: int | None, *,
                       timeout: float, n_predict: int, api_key: str | None = None) -> RouteCheck:
    """An SGLang route: ``/health``, then one completion through its OpenAI-compatible API,
    read with its own speculative details (see :mod:`ojai_setup.measure.client`)."""
    from ojai_setup.measure.client import ClientError, Endpoint

    endpoint = Endpoint(f"http://{host}:{port}", timeout=max(timeout, 120), api_key=api_key)
    try:
        endpoint.wait_healthy(timeout)
    except ClientError as exc:
        return RouteCheck(route=name, url=endpoint.url, healthy=False, error=str(exc))
    try:
        gen = endpoint.complete(PROMPT, n_predict=n_predict, seed=1, temperature=0.0,
                                ignore_eos=True)
    except ClientError as exc:
        return RouteCheck(route=name, url=endpoint.url, healthy=True, error=f"completion failed: {exc}")
    timings = dict(gen.timings, predicted_per_second=gen.harness_tps)
    return RouteCheck(route=name, url=endpoint.url, healthy=True, **predict(timings, draft_n_max))


def check_npu_route(tag: str, port: int, timeout: float) -> RouteCheck:
    """FastFlowLM has no health endpoint: it is ready when ``/api/tags`` lists its models."""
    from ojai_setup.commands.verify_flm import probe_tags

    deadline = time.monotonic() + timeout
    while True:
        probe = probe_tags("127.0.0.1", port, timeout=5)
        if probe.ready or time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    url = f"http://127.0.0.1:{port}"
    if not probe.ready:
        return RouteCheck(route=f"flm {tag}", url=url, healthy=False, error=probe.detail)
    missing = None if tag in probe.tags else f"{tag} is not among the served models: {probe.tags}"
    return RouteCheck(route=f"flm {tag}", url=url, healthy=True, error=missing)


def check_lemonade_route(root: Root, name: str, record: dict, *, timeout: float,
                         n_predict: int) -> RouteCheck:
    """The route through Lemonade: ``/api/v1/health`` on its port (``port`` in its config.json,
    13305 by default), the route among ``/api/v1/models`` (``NAME`` from the calendar versions
    on, ``user.NAME`` in 11.x: whichever the installed version lists), then one completion
    through ``/api/v1/completions``, whose ``timings`` Lemonade passes on from llama-server."""
    from ojai_setup.facts.lemonade import LEMONADE_PORT, merged_config
    from ojai_setup.formats.lemonade import config_value

    config, _ = merged_config(root, record.get("config_dir", "/var/lib/lemonade"))
    port = config_value(config, "port")
    base = f"http://127.0.0.1:{port if isinstance(port, int) else LEMONADE_PORT}"
    route = f"lemonade {name}"
    deadline = time.monotonic() + timeout
    status, body = 0, ""
    while True:
        try:
            status, body = _get(base + "/api/v1/health", timeout=5)
        except OSError as exc:
            status, body = 0, str(exc)
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    if status != 200:
        return RouteCheck(route=route, url=base, healthy=False,
                          error=f"/api/v1/health answered {status or 'nothing'}: {body.strip()[:200]}"
                                " (is lemond running? sudo systemctl status lemond)")
    try:
        status, body = _get(base + "/api/v1/models", timeout=10)
        ids = [m.get("id") for m in json.loads(body).get("data", [])]
    except (OSError, ValueError, AttributeError) as exc:
        return RouteCheck(route=route, url=base, healthy=True, error=f"/api/v1/models: {exc}")
    model_id = next((i for i in (name, f"user.{name}") if i in ids), None)
    if model_id is None:
        return RouteCheck(route=route, url=base, healthy=True,
                          error=f"Lemonade does not list {name} (nor user.{name}); restart lemond "
                                "after `ojai setup --apply` (sudo systemctl restart lemond)")
    payload = json.dumps({"model": model_id, "prompt": PROMPT, "max_tokens": n_predict,
                          "temperature": 0.0}).encode()
    req = urllib.request.Request(base + "/api/v1/completions", data=payload,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=max(timeout, 300)) as resp:
            data = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace").strip()[:300]
        return RouteCheck(route=route, url=base, healthy=True, model_id=model_id,
                          error=f"completion failed ({exc.code}): {detail}")
    except (OSError, ValueError) as exc:
        return RouteCheck(route=route, url=base, healthy=True, model_id=model_id,
                          error=f"completion failed: {exc}")
    timings = data.get("timings") or {}
    if not timings:  # no timings passed through: the answer itself is the check
        usage = data.get("usage") or {}
        return RouteCheck(route=route, url=base, healthy=True, model_id=model_id,
                          predicted_n=usage.get("completion_tokens"))
    return RouteCheck(route=route, url=base, healthy=True, model_id=model_id,
                      **predict(timings, record.get("draft_n_max")))


#: below this per-token acceptance the draft head likely does not match the model
LOW_ACCEPTANCE = 0.5


def how_to_start(root: Root, name: str, record: dict) -> str:
    """The command that starts a route ojai wrote: its systemd unit when there is one, else
    its launch script (Lemonade: its service)."""
    if "lemonade" in record:
        return "sudo systemctl restart lemond"
    unit_name = ("ojai-" + record["script"].rsplit("/", 1)[-1].removesuffix(".sh") + ".service"
                 if record.get("script") else f"ojai-{name}.service")
    others = ", ".join(str(o) for o in record.get("conflicts") or ())
    if root.exists(f"{UNITS_DIR}/{unit_name}"):
        if others:  # units that conflict: one at a time, and only one of them at boot
            return (f"sudo systemctl start {unit_name} (it stops {others}: they do not fit the "
                    f"GPU budget together; `enable` only one of them for boot)")
        return f"sudo systemctl enable --now {unit_name}"
    script = record.get("script") or f"{ROUTES_DIR}/{name}.sh"
    return script + (f" (stop {others} first: they do not fit the GPU budget together)"
                     if others else "")


def next_steps(root: Root, gates: Mapping[str, Any] | None = None, *,
               gated: bool = False) -> list[str]:
    """For every route ojai wrote: how to start it and how to check it. ``gates``: the
    correctness gate the apply ran, by route (:class:`~ojai_setup.commands.apply_gate.RouteGate`);
    ``gated``: the apply ran it (else ``--no-gate``). The gate compared one route of each
    model; its drafted route shares its verdict (drafting does not change what it computes)."""
    gates = gates or {}
    lines = []
    routes = routes_of(root)
    for name, record in sorted(routes.items()):
        gateable = ("flm_tag" not in record and "lemonade" not in record
                    and record.get("server") != "sglang" and not record.get("router"))
        gate = gates.get(name) or next(
            (g for g in gates.values() if record.get("model") and
             (routes.get(g.route) or {}).get("model") == record.get("model")), None)
        verify = ojai_command(root.path, 'verify', '--route', name)
        if gateable and gate is not None and gate.passed is False:
            lines.append(f"do not serve {name}: it failed the correctness gate at apply (above); "
                         f"after a fix, check it again with {verify}")
            continue
        if not gateable:
            check = "then check it: "
        elif gate is not None and gate.passed:
            check = "then check it as it serves: "
        else:
            why = ("--no-gate was given" if not gated else
                   "the apply could not start it here" if gate is not None else
                   "this apply did not change it")
            check = ("then check it before serving it (health, and its output against its own "
                     f"build's CPU backend: {why}, so this is the correctness gate): ")
        lines.append(f"start {name}: {how_to_start(root, name, record)}; {check}{verify}")
    return lines


class VerifyReport:
    """Each route's check (:class:`RouteCheck`); for people, a line each with how to start a
    route that does not answer and a warning when the draft head looks mismatched."""

    schema = "ojai.verify/1"

    def __init__(self, results: list[RouteCheck], root: Root, routes: dict[str, dict]) -> None:
        self.results, self.root, self.routes = results, root, routes

    def to_json(self) -> dict:
        return {"draft_cost_assumed": DRAFT_COST,
                "gate_thresholds": {"min_agreement": MIN_AGREEMENT, "max_mean_kl": MAX_MEAN_KL},
                "routes": [r.model_dump(mode="json") for r in self.results]}

    def render(self, term: Terminal) -> None:
        root, routes = self.root, self.routes
        for r in self.results:
            if not r.healthy or r.error:
                term.print(f"{term.styled('fail')} {r.route} ({r.url}): {r.error}")
                if not r.healthy and "API key" not in (r.error or ""):
                    term.print(f"{'':>5}is it running? start it with: "
                               f"{how_to_start(root, r.route, routes.get(r.route, {}))}")
                continue
            if r.embedding_dims is not None:
                term.print(f"{term.styled('pass')} {r.route} ({r.url}): embeddings of "
                           f"{r.embedding_dims} dimensions")
                continue
            if r.predicted_n is None:
                term.print(f"{term.styled('fail' if r.gate_failed else 'pass')} {r.route} ({r.url}): ready")
                for gate_line in self._gate_lines(term, r):
                    term.print(gate_line)
                continue
            status = "fail" if r.gate_failed else "pass"  # answers, but not what the CPU computes
            line = f"{term.styled(status)} {r.route} ({r.url}): {r.predicted_n} tokens at " \
                   f"{r.tokens_per_second or 0:.1f} tokens/s"
            if r.draft_n is not None:
                source = " (the server's /metrics)" if r.counters == "metrics" else ""
                line += (f"; {r.spec_type + ' ' if r.spec_type else ''}drafted {r.draft_n}, "
                         f"accepted {r.draft_n_accepted} "
                         f"({(r.accepted_fraction or 0) * 100:.0f}% of drafted tokens){source}")
                if r.steps:
                    line += f" in {r.steps} verification steps"
            if r.predicted_speedup is not None:
                line += (f"; {r.tokens_per_step:.2f} tokens per verification step -> per-token "
                         f"acceptance a = {r.acceptance_estimate:.2f} at g = {r.draft_n_max}; "
                         f"predicted speedup {r.predicted_speedup:.2f}x (model, assuming draft cost "
                         f"{DRAFT_COST}; not measured)")
            if r.no_prediction and r.draft_n is not None:
                line += f"; no speedup predicted: {r.no_prediction}"
            term.print(line)
            for gate_line in self._gate_lines(term, r):
                term.print(gate_line)
            if r.acceptance_estimate is not None and r.acceptance_estimate < LOW_ACCEPTANCE:
                term.print(f"{'':>5}{term.styled('warn')} per-token acceptance "
                           f"{r.acceptance_estimate:.2f} is below {LOW_ACCEPTANCE}: the draft "
                           "head may not match the model (check the pair with `ojai doctor`)")


    @staticmethod
    def _gate_lines(term: Terminal, r: RouteCheck) -> list[str]:
        """The lines that show a route's correctness gate (printed by :meth:`render`)."""
        g = r.gate
        if g is None:
            return [f"{'':>5}gate: not run: {r.gate_note}"] if r.gate_note else []
        fig = g.get("figures")
        if fig is None:
            return [f"{'':>5}{term.styled('fail')} gate: the comparison with the CPU could not "
                    f"be made: {g.get('error')}"]
        verdict = "pass" if fig["passed"] else "fail"
        lines = [f"{'':>5}{term.styled(verdict)} gate against the same build's CPU backend: "
                 f"top-1 agreement {fig['agreement'] * 100:.1f} % (needs "
                 f"{fig['min_agreement'] * 100:.0f} %), mean KL {fig['mean_kl']:.4f} nats (at "
                 f"most {fig['max_mean_kl']}) over {fig['positions']} positions; "
                 f"{g.get('test_seconds') or 0:.1f} s the route, "
                 + (f"the CPU's reading kept from {str(g.get('reference_date'))[:10]}"
                    if g.get("reference_from") == "kept" else
                    f"{g.get('reference_seconds') or 0:.1f} s the CPU")]
        if g.get("reference_note"):
            lines.append(f"{'':>5}{g['reference_note']}")
        if g.get("finding"):
            lines.append(f"{'':>5}{g['finding']}")
        return lines


def gate_route(root: Root, name: str, record: dict, check: RouteCheck, *, api_key: str | None,
               stride: int, cache: dict, ready_timeout: float) -> None:
    """Run the correctness gate on a route that answered: the route as it serves against its
    own binary's CPU backend on the same file, started from the route's launch script."""
    import tempfile

    from ojai_setup.measure.servers import BenchError, LaunchScript
    from ojai_setup.measure.gate import gate_script

    path = record.get("script")
    if not path:
        check.gate_note = "the route has no launch script to start its CPU reference from"
        return
    try:
        text = root.resolve(path).read_text(encoding="utf-8")
        script = LaunchScript.parse(text, path)
    except (OSError, BenchError) as exc:
        check.gate_note = f"cannot read {path}: {exc}"
        return
    binary = script.argv[0] if script.argv else ""
    if not Path(binary).is_file():
        check.gate_note = f"{binary} is not on this machine (a captured machine): nothing to run"
        return
    with tempfile.TemporaryDirectory(prefix="ojai-gate-") as tmp:
        run = gate_script(script, name, Path(tmp), stride=stride, root=root, url=check.url,
                          api_key=api_key, cache=cache, ready_timeout=ready_timeout)
    check.gate = run.document()


def run_verify(term: Terminal, root_dir: Path, *, only: str | None, timeout: float,
               n_predict: int, gate: bool = True, gate_stride: int = 4) -> ExitStatus:
    root = Root(root_dir)
    routes = routes_of(root)
    if only:
        routes = {k: v for k, v in routes.items() if k == only}
    if not routes:
        setup = ojai_command(root.path, "setup", "--model", "NAME", "--apply")
        term.error("no routes to verify" + (f" named {only!r}" if only else "")
                   + f": `{setup}` writes them")
        return ExitStatus.FAILED
    results = []
    reference_cache: dict = {}  # one CPU reading per model and build (routes share it)
    for name, r in sorted(routes.items()):
        if "flm_tag" in r:
            results.append(check_npu_route(r["flm_tag"], r["port"], timeout))
            continue
        if "lemonade" in r:
            results.append(check_lemonade_route(root, r["lemonade"]["model"], r["lemonade"],
                                                timeout=timeout, n_predict=n_predict))
            continue
        key, problem = api_key_of(root, r)
        if problem:
            results.append(RouteCheck(route=name, url=f"http://{r.get('host', '127.0.0.1')}:"
                                      f"{r['port']}", healthy=False, error=problem))
            continue
        if r.get("embedding"):
            check = check_embedding_route(name, r.get("host", "127.0.0.1"), r["port"],
                                          timeout=timeout, api_key=key)
            check.gate_note = "an embedding route generates no tokens to compare"
            results.append(check)
        elif r.get("server") == "sglang":
            results.append(check_sglang_route(name, r.get("host", "127.0.0.1"), r["port"],
                                              r.get("draft_n_max"), timeout=timeout,
                                              n_predict=n_predict, api_key=key))
        else:
            check = check_route(name, r.get("host", "127.0.0.1"), r["port"],
                                r.get("draft_n_max"), timeout=timeout, n_predict=n_predict,
                                api_key=key, spec_type=r.get("spec_type"),
                                router=bool(r.get("router")))
            if check.healthy and not check.error:
                if r.get("router"):
                    check.gate_note = ("a route of the router: the gate starts one route's own "
                                       "launch script, which a router's routes do not have")
                elif gate:
                    gate_route(root, name, r, check, api_key=key, stride=gate_stride,
                               cache=reference_cache, ready_timeout=max(timeout, 120))
                else:
                    check.gate_note = "--no-gate"
            results.append(check)
    term.show(VerifyReport(results, root, routes))
    return (ExitStatus.OK if all(r.healthy and not r.error and not r.gate_failed for r in results)
            else ExitStatus.FAILED)
