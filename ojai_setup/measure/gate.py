"""The correctness gate, run: a backend under test against the same build's CPU backend.

The backend under test is any llama-server: one already answering at a URL (a route as it
serves), or one started here from a launch script (a binary, its environment and its
arguments: any build, any backend). The reference is the same script with nothing offloaded
(:func:`ojai_setup.domain.gate.reference_args`), started here on a free port of 127.0.0.1 and
stopped at the end. Both are read teacher-forced over the fixed text
(:mod:`ojai_setup.facts.distributions`) and compared (:func:`ojai_setup.domain.gate.compare`).

``ojai verify`` runs it for every llama-server route it checks, ``ojai tune`` for every binary
before it measures it (a binary that fails is not adopted), and ``benchmarks/gate.py`` prints
its figures and times.

The CPU reference's reading is kept in ojai's state folder, one file per model digest and
build (:func:`kept_reference_path`: ``/var/lib/ojai/gate/<model sha256[:16]>-<key>.json``), so
that verify, tune and an upgrade read it once per model and build, not at every run. Its key
is the model file's sha256, the binary's sha256 and version line, the reference's arguments
(ports and the model's path left out), the stride, the text and K; a file that cannot be read
or does not match is said (``GateRun.reference_note``) and the reference is computed anew.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from ojai_setup.measure.servers import BenchError, LaunchScript, ServerPool, free_port
from ojai_setup.core.root import Root
from ojai_setup.domain.gate import GateFigures, Where, compare, finding, gate_args, reference_args
from ojai_setup.facts.distributions import DistributionError, Reading, teacher_forced, tokenize


class GateRun(BaseModel):
    """One gate: the figures, or why there are none."""

    route: str
    figures: GateFigures | None = None
    tokens: int = 0  # tokens of the fixed text
    test_seconds: float | None = None
    reference_seconds: float | None = None
    #: prompt tokens each server evaluated (about one per position with its prompt cache)
    test_evaluated: int | None = None
    reference_evaluated: int | None = None
    test: str = ""  # the URL or command line under test
    reference: list[str] = []  # the reference's command line
    error: str | None = None
    where: Where | None = None
    finding: str | None = None
    #: where the CPU reference came from: "kept" (read from ``reference_file``, computed at
    #: ``reference_date``) or "computed" (and kept in ``reference_file`` when it could be)
    reference_from: str | None = None
    reference_file: str | None = None
    reference_date: str | None = None
    #: what went wrong keeping or reading the kept reference (the gate still ran)
    reference_note: str | None = None

    @property
    def passed(self) -> bool | None:
        return None if self.figures is None else self.figures.passed

    def document(self) -> dict:
        """The run as ``--json`` gives it, its figures with their verdict (``passed``)."""
        out = self.model_dump(mode="json")
        out["figures"] = (dict(self.figures.model_dump(mode="json"), passed=self.figures.passed)
                          if self.figures else None)
        return out


@dataclass
class Backend:
    """A llama-server to gate: at ``url`` when it already serves, else started from ``script``."""

    script: LaunchScript | None = None
    url: str | None = None
    api_key: str | None = None


def _dialect(binary: str):
    from ojai_setup.facts.probe import ProbeError, probe

    found = probe(Root(Path("/")), binary)
    if isinstance(found, ProbeError):
        raise BenchError(found.describe())
    return found


def scripts(script: LaunchScript) -> tuple[LaunchScript, LaunchScript]:
    """(the script as the gate runs it, the CPU reference of the same build) from a route's
    launch script; both listen on a free port of 127.0.0.1."""
    binary, args = script.argv[0], list(script.argv[1:])
    dialect = _dialect(binary)
    out = []
    for argv in (gate_args(args, dialect), reference_args(args, dialect)):
        s = LaunchScript(script.preamble, (binary, *argv)).with_flag(("--host",), "127.0.0.1")
        out.append(s.with_flag(("--port",), str(free_port())))
    return out[0], out[1]


def _url_of(script: LaunchScript) -> str:
    return f"http://127.0.0.1:{script.value('--port')}"


def install_record(binary: str) -> dict:
    """``ojai-install.json`` beside an ojai-installed binary (backend, GPU target), or {}."""
    try:
        return json.loads((Path(binary).parent / "ojai-install.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def where_of(root: Root, binary: str | None) -> Where:
    """What a backend ran on, from its install record and the machine's facts (each part
    that cannot be read stays unknown)."""
    from ojai_setup.measure.servers import binary_version

    record = install_record(binary) if binary else {}
    where = Where(binary=binary, backend=record.get("backend"),
                  build=binary_version(binary) if binary else None)
    try:
        from ojai_setup.facts.collect import read_kernel

        where.kernel = read_kernel(root).release
    except Exception:  # noqa: BLE001 - a fact that cannot be read stays unknown
        pass
    try:
        from ojai_setup.facts.collect import read_gpu

        targets = read_gpu(root).targets
        where.gpu_target = ", ".join(targets) if targets else record.get("gpu_target") or record.get("family")
    except Exception:  # noqa: BLE001
        where.gpu_target = record.get("gpu_target") or record.get("family")
    try:
        from ojai_setup.facts.packages import read_packages

        packages = read_packages(root)
        fw = [f"{name} {p.version}" for name, p in sorted(packages.items())
              if "firmware" in name and getattr(p, "version", None)]
        where.firmware = ", ".join(fw) or None
    except Exception:  # noqa: BLE001
        pass
    return where


def _reference_key(reference: LaunchScript, stride: int) -> tuple:
    from ojai_setup.measure.servers import set_flag

    return (reference.preamble, set_flag(reference.argv, ("--port",), None), stride)


#: ojai's state folder's subfolder of kept CPU references
KEPT_DIR = "gate"
#: the kept reference's format; another value is computed anew
KEPT_SCHEMA = "ojai.gate-reference/1"


def kept_reference_key(reference: LaunchScript, stride: int) -> tuple[dict | None, str | None]:
    """What a kept CPU reference is valid for, or why none can be kept: the model's and the
    binary's sha256, the binary's version line, the reference's arguments without ports, host
    and model path, the stride, the text and K."""
    import hashlib

    from ojai_setup.measure.servers import MODEL_FLAGS, binary_version, file_sha256, set_flag
    from ojai_setup.domain.gate import TEXT, TOP_K

    model = reference.value(*MODEL_FLAGS)
    if not model:
        return None, "the reference's command line names no model file"
    try:
        model_sha = file_sha256(Path(model))
        binary_sha = file_sha256(Path(reference.argv[0]))
    except OSError as exc:
        return None, f"cannot read {exc.filename}: {exc.strerror or exc}"
    argv = set_flag(set_flag(set_flag(reference.argv[1:], ("--port",), None), ("--host",), None),
                    MODEL_FLAGS, None)
    return {"model_sha256": model_sha, "binary_sha256": binary_sha,
            "version": binary_version(reference.argv[0]), "args": list(argv),
            "preamble": reference.preamble, "stride": stride, "top_k": TOP_K,
            "text_sha256": hashlib.sha256(TEXT.encode()).hexdigest()}, None


def kept_reference_path(root: Root, key: dict) -> Path:
    import hashlib

    from ojai_setup.facts.state import state_dir

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return state_dir(root) / KEPT_DIR / f"{key['model_sha256'][:16]}-{digest[:16]}.json"


def read_kept_reference(path: Path, key: dict) -> tuple[tuple[list[int], Reading, str] | None, str | None]:
    """The kept reading at ``path`` for ``key`` (tokens, reading, date), or None and why it
    cannot be used (None when there is simply none)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"cannot read it: {getattr(exc, 'strerror', None) or exc}"
    try:
        if data.get("schema") != KEPT_SCHEMA:
            return None, f"it is not a kept reference of this ojai ({data.get('schema')!r})"
        if data.get("key") != key:
            return None, "it was kept for another model, build or setting"
        tokens = [int(t) for t in data["tokens"]]
        dists = [tuple((int(t), float(p)) for t, p in d) for d in data["distributions"]]
        reading = Reading(distributions=dists, seconds=float(data["seconds"]),
                          requests=int(data["requests"]), evaluated=int(data["evaluated"]))
        return (tokens, reading, str(data["date"])), None
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        return None, f"it is damaged ({type(exc).__name__}: {exc})"


def keep_reference(path: Path, key: dict, tokens: list[int], reading: Reading) -> str:
    """Write the reading for ``key``; returns its date."""
    from datetime import datetime, timezone

    from ojai_setup.core.atomic import write_text

    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    data = {"schema": KEPT_SCHEMA, "key": key, "date": date, "tokens": tokens,
            "seconds": reading.seconds, "requests": reading.requests,
            "evaluated": reading.evaluated,
            "distributions": [[list(tp) for tp in d] for d in reading.distributions]}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(data) + "\n", mode=0o644)
    return date


def run_gate(pool: ServerPool, route: str, test: Backend, reference: LaunchScript, *,
             stride: int = 1, root: Root | None = None, cache: dict | None = None,
             keep: bool = True) -> GateRun:
    """Start the reference (and the backend under test when it does not serve yet), read both
    over the fixed text, stop what was started here, and compare. ``cache`` keeps the
    reference's reading per command line (a model's drafted and plain routes share one);
    with a ``root`` (and ``keep``), the reading is also kept in its state folder per model
    digest and build, and read back from there by later runs."""
    from ojai_setup.domain.gate import TEXT

    run = GateRun(route=route, reference=list(reference.argv),
                  test=test.url or " ".join(test.script.argv if test.script else ()))
    key = _reference_key(reference, stride)
    cached = cache.get(key) if cache is not None else None
    kept_key, kept_path = None, None
    if cached is None and root is not None and keep:
        kept_key, why = kept_reference_key(reference, stride)
        if kept_key is None:
            run.reference_note = f"the CPU reference cannot be kept: {why}"
        else:
            kept_path = kept_reference_path(root, kept_key)
            run.reference_file = str(kept_path)
            found, why = read_kept_reference(kept_path, kept_key)
            if found is not None:
                tokens, ref, run.reference_date = found
                cached = (tokens, ref)
                run.reference_from = "kept"
                if cache is not None:
                    cache[key] = cached
            elif why:
                run.reference_note = f"the kept CPU reference {kept_path} was not used: {why}; computed anew"
    started = []
    try:
        if cached is None:
            ref_ep, pid = pool.start(reference, _url_of(reference), f"gate-{route}-cpu")
            started.append(pid)
            tokens = tokenize(ref_ep.url, TEXT)
            ref: Reading = teacher_forced(ref_ep.url, tokens, stride=stride)
            if cache is not None:
                cache[key] = (tokens, ref)
            pool.stop(next(s.process for s in pool.started if s.process.pid == pid))
            run.reference_from = "computed"
            if kept_path is not None and kept_key is not None:
                try:
                    run.reference_date = keep_reference(kept_path, kept_key, tokens, ref)
                except OSError as exc:
                    run.reference_file = None
                    note = f"could not keep the CPU reference in {kept_path}: {exc.strerror or exc}"
                    run.reference_note = f"{run.reference_note}; {note}" if run.reference_note else note
        else:
            tokens, ref = cached
            run.reference_from = run.reference_from or "computed"
        run.tokens = len(tokens)
        url = test.url
        if url is None:
            if test.script is None:
                raise BenchError("nothing to gate: neither a URL nor a launch script")
            url = _url_of(test.script)
            _, pid = pool.start(test.script, url, f"gate-{route}-test")
            started.append(pid)
            run.test = url
        got: Reading = teacher_forced(url, tokens, stride=stride, api_key=test.api_key)
    except (BenchError, DistributionError) as exc:
        run.error = str(exc)
        return run
    finally:
        for s in [s for s in pool.started if s.process.pid in started]:
            pool.stop(s.process)
    run.reference_seconds, run.test_seconds = ref.seconds, got.seconds
    run.reference_evaluated, run.test_evaluated = ref.evaluated, got.evaluated
    run.figures = compare(ref.distributions, got.distributions)
    if not run.figures.passed:
        run.where = where_of(root or Root(Path("/")), (test.script.argv[0] if test.script
                                                      else reference.argv[0]))
        run.finding = finding(route, run.figures, run.where)
    return run


def gate_script(script: LaunchScript, route: str, log_dir: Path, *, stride: int = 1,
                root: Root | None = None, url: str | None = None, api_key: str | None = None,
                ready_timeout: float = 600.0, cache: dict | None = None) -> GateRun:
    """The gate for one route's launch script: the backend under test is the route at ``url``
    when given (it serves), else the script itself started here."""
    try:
        test, reference = scripts(script)
    except BenchError as exc:
        return GateRun(route=route, error=str(exc))
    with ServerPool(log_dir=log_dir, ready_timeout=ready_timeout) as pool:
        run = run_gate(pool, route, Backend(script=None if url else test, url=url, api_key=api_key),
                       reference, stride=stride, root=root, cache=cache)
    return run
