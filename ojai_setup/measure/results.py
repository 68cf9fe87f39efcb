"""The result of ``ojai bench`` as data: what is saved as JSON and rendered for people."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ojai_setup.measure.servers import ServerInfo
from ojai_setup.measure.stats import Collapse, Summary, Verdict

SCHEMA = "ojai.bench/1"


class ArmRun(BaseModel):
    """One arm of one pair: a completion and what its timings say."""

    arm: str  # "mtp" (the drafted arm, whatever its kind) | "plain"
    tokens: int
    server_tps: float | None
    harness_tps: float | None
    predicted_ms: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None
    steps: int | None = None  # verification steps seen in the stream
    rejections: int | None = None  # steps that ended at a rejected draft token
    accepted_fraction: float | None = None  # draft_n_accepted / draft_n
    mean_accepted_length: float | None = None  # tokens per verification step
    acceptance: float | None = None  # per-token a (maximum likelihood over the steps)
    position_rates: list[float] = []
    #: where the drafted/accepted counts come from: "metrics" (the server's exact counters,
    #: ``/metrics``), "timings" (the completion's ``timings`` and its streamed counters)
    counters: str | None = None
    stop_type: str | None = None
    wall_s: float
    text: str = ""
    score: float | None = None
    score_error: str | None = None


class Pair(BaseModel):
    prompt_id: str
    seed: int
    order: str  # "mtp,plain" or "plain,mtp"
    mtp: ArmRun
    plain: ArmRun
    speedup: float | None  # mtp server tokens/s over plain server tokens/s
    identical: bool | None = None  # byte-identical outputs (temperature 0 only)
    first_divergence: int | None = None  # character index
    truncated: bool = False  # both arms stopped at the token budget
    draft_cost: float | None = None
    predicted_speedup: float | None = None


class LongArm(BaseModel):
    arm: str
    tokens: int
    window: int
    rates: list[float]
    server_tps: float | None
    harness_tps: float | None
    mean_accepted_length: float | None = None
    collapse: Collapse


class LongResult(BaseModel):
    prompt_id: str
    mtp: LongArm | None = None
    plain: LongArm | None = None


class ConcurrencyPoint(BaseModel):
    arm: str
    k: int
    slots: int | None
    tokens: int
    wall_s: float
    aggregate_tps: float
    per_stream_server_tps: float | None
    per_stream_end_to_end_tps: float


class ConcurrencyResult(BaseModel):
    points: list[ConcurrencyPoint] = []
    #: the smallest k at which the plain route's aggregate tokens/s matches or beats MTP's
    inversion_k: int | None = None
    note: str = ""


class ModelCheck(BaseModel):
    """The speculative-decoding model against the measurements."""

    #: "geometric" for draft heads and draft models (a per-token acceptance a); "none" for
    #: n-gram drafting, whose drafts come and go with the text (no prediction is made)
    kind: str = "geometric"
    note: str = ""
    counters: str | None = None  # "metrics", "timings" or "metrics and timings"
    draft_n_max: int | None
    acceptance: float | None  # pooled maximum-likelihood a
    accepted_fraction: float | None
    mean_accepted_length: float | None
    position_rates: list[float] = []
    implied_mean_length: float | None = None  # from --spec-synth-rates, when the server has them
    draft_cost: float | None  # median over the pairs
    predicted_speedup: float | None  # at the pooled a and c
    measured_speedup: float | None


class Temperature0(BaseModel):
    compared: int
    identical: int
    truncated_both: int
    divergences: list[int | None] = []


class Scoring(BaseModel):
    command: str
    scored_pairs: int
    differing_pairs: int
    mtp_mean: float | None
    plain_mean: float | None


class BenchResult(BaseModel):
    schema_: str = Field(SCHEMA, alias="schema")
    ojai_version: str
    started: str
    finished: str | None = None
    route: str | None = None
    settings: dict
    servers: list[ServerInfo] = []
    pairing: str = ""
    #: the drafted arm's kind (its ``--spec-type`` value: draft-mtp, draft-simple, ngram-simple,
    #: a chain like draft-simple,ngram-mod), None when it is not known
    kind: str | None = None
    #: how prompts were sent: "raw", "the model's chat template", or "llama-server's fallback
    #: template (chatml): the model file has none"
    template: str | None = None
    pairs: list[Pair] = []
    summary: Summary | None = None
    verdict: Verdict | None = None
    model: ModelCheck | None = None
    temperature0: Temperature0 | None = None
    scoring: Scoring | None = None
    long: LongResult | None = None
    concurrency: ConcurrencyResult | None = None
    interrupted: bool = False
    stopped: str | None = None  # why the run ended early (a cap, Ctrl-C)
    plot: str | None = None
    #: why there is no plot.png, and how to get one (matplotlib missing: ojai's plots extra)
    no_plot: str | None = None

    model_config = {"populate_by_name": True}

    def dump(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)
