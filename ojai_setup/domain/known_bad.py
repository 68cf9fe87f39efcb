"""Known-bad combinations: rows of ``checks/tables/known-bad.toml``, each with its public source
and the versions it covers, matched against the facts of this machine.

A row matches when every condition under its ``when`` holds (the table's head lists them). A
condition on a fact that was not read does not hold, so a row never matches on a guess; the
finding of the check says which facts were unknown.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ojai_setup.core.errors import UsageError
from ojai_setup.formats.machine import version_tuple
from ojai_setup.formats.packages import upstream_version
from ojai_setup.model.facts import Facts

TABLE = "known-bad.toml"


class When(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu_targets: list[str] | None = None
    npu: bool | None = None
    package: list[str] | None = None
    versions: list[str] | None = None
    kernel_min: str | None = None
    kernel_below: str | None = None
    rocm_below: str | None = None
    cmdline_any: list[str] | None = None
    cmdline_none: list[str] | None = None
    kernel_log: str | None = None
    dkms_amdgpu: list[str] | None = None
    llama_backend: str | None = None
    llama_build_min: int | None = None
    llama_build_below: int | None = None
    rocm_versions: list[str] | None = None
    nightly_tags: list[str] | None = None
    flm_above: str | None = None
    lemonade_mtp_backend: str | None = None


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    severity: str = "warn"
    source: str
    #: the date of the newest public record the row rests on (YYYY-MM-DD): the report, or the
    #: comment or release that set its bounds; ``ojai doctor`` gives the newest as the date of
    #: what it knows
    date: str
    covers: str
    fix: str
    when: When

    def model_post_init(self, context: Any) -> None:
        if self.severity not in ("info", "warn", "fail"):
            raise ValueError("severity must be info, warn or fail")
        if not self.source.startswith("https://"):
            raise ValueError("source must be the https:// address of the public report")
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", self.date):
            raise ValueError("date must be YYYY-MM-DD")


class Match(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built when a row first matches

    row: Row
    evidence: str


class KnownBadError(UsageError):
    pass


@cache
def load_rows(path: Path) -> tuple[Row, ...]:
    from ojai_setup.core.resources import TomlError, read_toml

    try:
        data = read_toml(path)
    except (OSError, TomlError) as exc:
        raise KnownBadError(f"{path}: {exc}") from exc
    rows = []
    for i, raw in enumerate(data.get("row", []), 1):
        try:
            rows.append(Row.model_validate(raw))
        except ValidationError as exc:
            from ojai_setup.core.problems import problems

            raise KnownBadError(f"{path}: row {i} ({raw.get('id', '?')}): "
                                f"{problems(exc.errors())}") from exc
    ids = [r.id for r in rows]
    if len(set(ids)) != len(ids):
        raise KnownBadError(f"{path}: two rows have the same id")
    return tuple(rows)


def _kernel(facts: Facts) -> tuple[int, ...] | None:
    return facts.kernel.version if facts.kernel else None


def _held(row: Row, facts: Facts, target: str | None, npu: bool,  # noqa: C901
          llama: tuple[str | None, int | None]) -> tuple[bool, list[str], list[str]]:
    """(all conditions hold, what was seen, what could not be read)."""
    w = row.when
    seen: list[str] = []
    unknown: list[str] = []

    def fail(what: str | None = None) -> tuple[bool, list[str], list[str]]:
        if what:
            unknown.append(what)
        return False, seen, unknown

    if w.gpu_targets is not None:
        if target not in w.gpu_targets:
            return fail()
        seen.append(f"GPU {target}")
    if w.npu and not npu:
        return fail()
    if w.package is not None:
        if facts.packages is None:
            return fail("the package database")
        hits = [p for name in w.package if (p := facts.packages.get(name))
                and (w.versions is None or any(upstream_version(p.version).startswith(v)
                                               for v in w.versions))]
        if not hits:
            return fail()
        seen += [f"{p.name} {p.version} ({p.manager})" for p in hits]
    kernel = _kernel(facts)
    for bound, below in ((w.kernel_min, False), (w.kernel_below, True)):
        if bound is None:
            continue
        if kernel is None:
            return fail("the kernel release")
        want = version_tuple(bound.replace("-", "."))
        if (kernel[:len(want)] < want) != below:
            return fail()
        seen.append(f"kernel {facts.kernel.release if facts.kernel else ''}")
    if w.rocm_below is not None:
        if facts.rocm_version is None:
            return fail()
        if version_tuple(facts.rocm_version) >= version_tuple(w.rocm_below):
            return fail()
        seen.append(f"ROCm {facts.rocm_version}")
    if w.rocm_versions is not None:
        if facts.rocm_version is None or not any(facts.rocm_version.startswith(v)
                                                 for v in w.rocm_versions):
            return fail()
        seen.append(f"ROCm {facts.rocm_version}")
    if w.nightly_tags is not None:
        tool = facts.tools.get("llama-server")
        tag = (tool.detail or {}).get("nightly_tag") if tool else None
        if tag not in w.nightly_tags:
            return fail()
        seen.append(f"llama.cpp nightly {tag} installed")
    if w.flm_above is not None:
        tool = facts.tools.get("flm")
        version = version_tuple(tool.version or "") if tool else ()
        if not version:
            return fail("FastFlowLM's version" if tool else None)
        if version <= version_tuple(w.flm_above):
            return fail()
        seen.append(f"FastFlowLM {tool.version if tool else ''}")
    if w.cmdline_any is not None or w.cmdline_none is not None:
        if facts.cmdline is None:
            return fail("the kernel command line")
        if w.cmdline_any is not None:
            on = [t for t in w.cmdline_any if t in facts.cmdline]
            if not on:
                return fail()
            seen.append(" ".join(on) + " on the kernel command line")
        if w.cmdline_none is not None:
            if any(t in facts.cmdline for t in w.cmdline_none):
                return fail()
            seen.append("no " + ", ".join(w.cmdline_none) + " on the kernel command line")
    if w.kernel_log is not None:
        if facts.kernel_log is None:
            return fail("the kernel log")
        lines = [line for line in facts.kernel_log if re.search(w.kernel_log, line)]
        if not lines:
            return fail()
        seen.append(f"kernel log: {len(lines)} line(s) like {lines[-1].strip()!r}")
    if w.dkms_amdgpu is not None:
        dkms = [v for v in facts.dkms_amdgpu if any(v.startswith(p) for p in w.dkms_amdgpu)]
        if not dkms:
            return fail()
        seen.append("amdgpu-dkms " + ", ".join(dkms))
    if (w.llama_backend is not None or w.llama_build_min is not None
            or w.llama_build_below is not None):
        backend, build = llama
        if w.llama_backend is not None and backend != w.llama_backend:
            return fail()
        if w.llama_build_min is not None and (build is None or build < w.llama_build_min):
            return fail()
        if w.llama_build_below is not None and (build is None or build >= w.llama_build_below):
            return fail()
        seen.append(f"llama-server {backend} build {build}")
    if w.lemonade_mtp_backend is not None:
        tool = facts.tools.get("lemonade") or facts.tools.get("lemond")
        routes = ((tool.detail or {}).get("mtp_backends") or {}) if tool else {}
        on = [name for name, b in routes.items() if b == w.lemonade_mtp_backend]
        if not on:
            return fail()
        seen.append(f"Lemonade runs MTP route(s) {', '.join(on)} on {w.lemonade_mtp_backend}")
    return True, seen, unknown


def knowledge_date(path: Path) -> str:
    """The newest ``date`` of the table's rows: how current what ojai knows is."""
    return max(r.date for r in load_rows(path))


def withdrawn(tag: str, path: Path) -> Row | None:
    """The row saying why nightly ``tag`` was withdrawn, if one names it."""
    return next((r for r in load_rows(path)
                 if r.when.nightly_tags and tag in r.when.nightly_tags), None)


def llama_in_use(facts: Facts) -> tuple[str | None, int | None]:
    """(ggml backend, llama.cpp build) of the llama-server the routes use: ojai's (its install
    record: a nightly is a ROCm build, a source build names its backend), else the
    distribution's."""
    tool = facts.tools.get("llama-server")
    if tool is not None and tool.path and tool.path.startswith("/opt/ojai/"):
        detail = tool.detail or {}
        build = None
        m = re.search(r"build (\d+)", tool.version or "")
        if m:
            build = int(m.group(1))
        backend = detail.get("backend")
        return (str(backend) if backend else None), build
    d = facts.distro_llama
    if d is not None:
        backend = "hip" if "hip" in d.backends else ("vulkan" if "vulkan" in d.backends else "cpu")
        return backend, d.build
    return None, None


def matches(facts: Facts, target: str | None, npu: bool, path: Path) -> tuple[list[Match], int, set[str]]:
    """The rows of the table at ``path`` that match, how many rows it has, and the facts that
    could not be read for the rows that needed them."""
    rows = load_rows(path)
    llama = llama_in_use(facts)
    found, unknown = [], set()
    for row in rows:
        ok, seen, missing = _held(row, facts, target, npu, llama)
        unknown.update(missing)
        if ok:
            found.append(Match(row=row, evidence="; ".join(seen)))
    return found, len(rows), unknown
