"""SGLang routes on Instinct GPUs: which checkpoint, how many GPUs, and the server's arguments.

A route is served by ``python -m sglang.launch_server`` with the checkpoint's own NextN / MTP
layer drafting (``--speculative-algorithm EAGLE`` or ``NEXTN``, ``--speculative-num-steps``,
``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``), tensor parallel over as many
GPUs as the weights need (:func:`choose_tp`). The arguments are rendered with SGLang's declared
names (``--tp-size``, not ``--tp``: argparse accepts ``--tp`` only as an abbreviation) and
checked against the argument table of the SGLang release they are for
(:func:`ojai_setup.formats.sglang_args.check_args`) before a launch script is written.

The built-in routes are ``sglang-routes.toml`` next to this module; the argument table of the
release ojai was made against is ``formats/reference-sglang-<version>.json``, read from that
release's own declarations.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ojai_setup.core.errors import InputError
from ojai_setup.core.paths import GIB
from ojai_setup.core.resources import TomlError, read_toml

if TYPE_CHECKING:  # imported where used: a plan without an SGLang route checks no arguments
    from ojai_setup.formats.sglang_args import SglangDialect

#: the SGLang release the reference argument table was read from
REFERENCE_VERSION = "0.5.23"
REFERENCE_TABLE = (Path(__file__).resolve().parent.parent / "formats"
                   / f"reference-sglang-{REFERENCE_VERSION}.json")
#: the share of each GPU's HBM the weights may take: SGLang keeps the rest for the KV cache
#: and activations (its ``--mem-fraction-static`` is sized from what is left)
WEIGHTS_SHARE = 0.8
#: tensor-parallel sizes tried, smallest first (the attention heads of these models divide by them)
TP_SIZES = (1, 2, 4, 8, 16)
#: where the route's Python lives (SGLang installed into it, per SGLang's AMD guide)
SGLANG_PYTHON = "/opt/ojai/sglang/bin/python"
#: the unit's state folder: the Hugging Face cache SGLang downloads the checkpoint into
SGLANG_STATE_DIR = "/var/lib/ojai-sglang"


class SglangCatalogError(InputError):
    pass


class SglangRoute(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    title: str
    repo: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
    weights_bytes: int = Field(gt=0)
    algorithm: Literal["EAGLE", "NEXTN"]
    num_steps: int = Field(ge=1)
    eagle_topk: int = Field(ge=1)
    num_draft_tokens: int = Field(ge=2)
    trust_remote_code: bool = False
    source: str


@cache
def sglang_routes() -> dict[str, SglangRoute]:
    path = Path(__file__).with_name("sglang-routes.toml")
    try:
        raw = read_toml(path).get("routes", {})
        return {n: SglangRoute(name=n, **entry) for n, entry in raw.items()}
    except TomlError as exc:
        raise SglangCatalogError(f"{path}: {exc}") from None
    except ValidationError as exc:
        from ojai_setup.core.problems import problems

        raise SglangCatalogError(f"{path}: {problems(exc.errors())}") from None


def reference_dialect() -> SglangDialect:
    """SGLang :data:`REFERENCE_VERSION`'s argument table, as read from its declarations."""
    from ojai_setup.formats.sglang_args import SglangDialect

    return SglangDialect.model_validate_json(REFERENCE_TABLE.read_text(encoding="utf-8"))


class TpChoice(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)  # built for an SGLang route

    tp: int | None
    sentence: str


def choose_tp(route: SglangRoute, gpus: int, hbm_bytes: int | None) -> TpChoice:
    """The smallest tensor-parallel size among :data:`TP_SIZES`, at most ``gpus``, whose GPUs
    hold the weights in :data:`WEIGHTS_SHARE` of their HBM; None (with why) when none does."""
    weights = route.weights_bytes / GIB
    if gpus < 1 or not hbm_bytes:
        return TpChoice(tp=None, sentence=f"{route.name} needs about {weights:.0f} GiB of GPU "
                        "memory, and no Instinct GPU with a known HBM size is seen here")
    per = hbm_bytes / GIB
    for tp in TP_SIZES:
        if tp <= gpus and route.weights_bytes <= WEIGHTS_SHARE * tp * hbm_bytes:
            return TpChoice(tp=tp, sentence=f"tensor parallel over {tp} of the {gpus} GPUs: the "
                            f"weights (about {weights:.0f} GiB) take {weights / tp / per:.0%} of "
                            f"each GPU's {per:.0f} GiB, the rest is SGLang's KV cache")
    most = max(t for t in TP_SIZES if t <= gpus)
    return TpChoice(tp=None, sentence=f"{route.name} needs about {weights:.0f} GiB for its weights; "
                    f"{most} GPU{'s' if most > 1 else ''} of {per:.0f} GiB hold{'' if most > 1 else 's'} "
                    f"{WEIGHTS_SHARE * most * per:.0f} GiB of weights (leaving room for the KV "
                    "cache): choose a smaller route or a node with more GPUs")


#: stands for the API key in the arguments checked against the table; the script passes the
#: key from the unit's root-only environment file instead
API_KEY_PLACEHOLDER = "KEY-FROM-THE-ENVIRONMENT"


def render_args(route: SglangRoute, *, tp: int, host: str, port: int,
                api_key: bool = False) -> list[str]:
    """The arguments after ``python -m sglang.launch_server`` for ``route``."""
    args = ["--model-path", route.repo, "--served-model-name", route.name,
            "--tp-size", str(tp),
            "--speculative-algorithm", route.algorithm,
            "--speculative-num-steps", str(route.num_steps),
            "--speculative-eagle-topk", str(route.eagle_topk),
            "--speculative-num-draft-tokens", str(route.num_draft_tokens)]
    if route.trust_remote_code:
        args.append("--trust-remote-code")
    args += ["--host", host, "--port", str(port), "--enable-metrics"]
    if api_key:
        args += ["--api-key", API_KEY_PLACEHOLDER]
    return args


def checked_args(route: SglangRoute, dialect: SglangDialect, **kw: Any) -> list[str]:
    """:func:`render_args`, refused (:class:`UnsupportedSglangArgs`) unless SGLang
    ``dialect.version`` takes every one of them."""
    from ojai_setup.formats.sglang_args import check_args

    args = render_args(route, **kw)
    check_args(route.name, args, dialect)
    return args
