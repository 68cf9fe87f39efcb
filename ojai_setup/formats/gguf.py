"""Proof that an MTP draft head belongs to its main model, from the GGUF metadata alone.

A draft head trained against another main model still loads and runs, but nearly every drafted
token is rejected: speculative decoding silently becomes slower than none. The metadata tells a
matched pair from a mismatched one:

- a sidecar must have the architecture ``gemma4-assistant`` (llama.cpp's name, with a hyphen;
  the underscore spelling ``gemma4_assistant`` is the Hugging Face model type and upstream
  llama.cpp refuses it as an unknown architecture);
- the converter writes the main model's hidden size into the sidecar's
  ``gemma4-assistant.embedding_length_out`` (llama.cpp: "Gemma 4 assistant requires
  embedding_length_out to carry the target hidden size"); it must equal the main model's
  ``gemma4.embedding_length``;
- both files must carry the identical token list (``tokenizer.ggml.tokens``), compared by a
  sha256 digest;
- heads inside the main file (qwen35, qwen35moe, deepseek2, glm4-moe, ...) are declared by
  ``<arch>.nextn_predict_layers`` > 0.

This module only interprets the metadata (it opens no file): :mod:`ojai_setup.facts.gguf` reads
it with :class:`gguf.GGUFReader` and keeps what it read in ojai's state folder.
"""

from __future__ import annotations

import hashlib
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import gguf

from ojai_setup.core.errors import InputError

ASSISTANT_ARCH = "gemma4-assistant"
ASSISTANT_TARGET_ARCH = "gemma4"
#: the four bytes every GGUF file starts with
GGUF_MAGIC = b"GGUF"


class GGUFError(InputError):
    """A file could not be read as GGUF; the text names the file."""


class HeaderIncomplete(Exception):
    """The bytes given end before the GGUF header does: ``need`` bytes (at least) hold it."""

    def __init__(self, need: int) -> None:
        super().__init__(f"the header needs at least {need} bytes")
        self.need = need


# The models here are built (defer_build) when a GGUF file is first read: most runs read none.
class ModelInfo(BaseModel):
    """What pairing needs to know about one GGUF file."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    path: str
    file_size: int
    architecture: str
    embedding_length: int | None = None
    #: for ``gemma4-assistant``: the hidden size of the main model it drafts for
    embedding_length_out: int | None = None
    nextn_predict_layers: int = 0
    block_count: int | None = None
    #: the context the model was trained for (``<arch>.context_length``)
    context_length: int | None = None
    head_count_kv: tuple[int, ...] = ()
    tokenizer_model: str | None = None
    # -- what the KV cache of a context costs (llama.cpp's hparams, read as its loader does) --
    head_count: int | None = None
    #: per-head K and V sizes of full-attention layers, and of sliding-window ones
    key_length: int | None = None
    value_length: int | None = None
    key_length_swa: int | None = None
    value_length_swa: int | None = None
    #: tokens a sliding-window layer keeps, and which layers slide (one flag per layer)
    sliding_window: int | None = None
    sliding_window_pattern: tuple[bool, ...] = ()
    #: the last layers that reuse an earlier layer's KV cache (Gemma 4 E2B/E4B)
    shared_kv_layers: int = 0
    #: hybrid models (qwen35): every n-th layer is full attention, the others recurrent
    full_attention_interval: int | None = None
    ssm_conv_kernel: int | None = None
    ssm_inner_size: int | None = None
    ssm_state_size: int | None = None
    ssm_group_count: int | None = None
    token_count: int = 0
    #: sha256 over the token list (each token as 8-byte little-endian length + bytes)
    tokens_sha256: str | None = None


class PairVerdict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    ok: bool
    reasons: tuple[str, ...] = ()
    #: False where there is no pair to prove (n-gram drafting reads no draft model)
    applicable: bool = True


def _scalar(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.get_field(key)
    return None if field is None else field.contents()


def _tokens_digest(reader: gguf.GGUFReader) -> tuple[int, str | None]:
    field = reader.get_field("tokenizer.ggml.tokens")
    if field is None:
        return 0, None
    digest = hashlib.sha256()
    for idx in field.data:
        token = field.parts[idx].tobytes()
        digest.update(len(token).to_bytes(8, "little"))
        digest.update(token)
    return len(field.data), digest.hexdigest()


def info_from_reader(reader: gguf.GGUFReader, path: str, file_size: int) -> ModelInfo:
    """The pairing metadata from an open reader; ``path`` is what messages call the file."""
    arch = _scalar(reader, "general.architecture")
    if not isinstance(arch, str):
        raise GGUFError(f"{path}: GGUF file has no general.architecture")
    kv_heads = _scalar(reader, f"{arch}.attention.head_count_kv")
    count, digest = _tokens_digest(reader)
    pattern = _scalar(reader, f"{arch}.attention.sliding_window_pattern")

    def number(key: str) -> int | None:
        value = _scalar(reader, f"{arch}.{key}")
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return ModelInfo(
        path=path,
        file_size=file_size,
        architecture=arch,
        embedding_length=_scalar(reader, f"{arch}.embedding_length"),
        embedding_length_out=_scalar(reader, f"{arch}.embedding_length_out"),
        nextn_predict_layers=_scalar(reader, f"{arch}.nextn_predict_layers") or 0,
        block_count=_scalar(reader, f"{arch}.block_count"),
        context_length=number("context_length"),
        head_count_kv=tuple(kv_heads) if isinstance(kv_heads, list) else ((kv_heads,) if kv_heads else ()),
        tokenizer_model=_scalar(reader, "tokenizer.ggml.model"),
        head_count=number("attention.head_count"),
        key_length=number("attention.key_length"),
        value_length=number("attention.value_length"),
        key_length_swa=number("attention.key_length_swa"),
        value_length_swa=number("attention.value_length_swa"),
        sliding_window=number("attention.sliding_window"),
        sliding_window_pattern=tuple(bool(v) for v in pattern) if isinstance(pattern, list) else (),
        shared_kv_layers=number("attention.shared_kv_layers") or 0,
        full_attention_interval=number("full_attention_interval"),
        ssm_conv_kernel=number("ssm.conv_kernel"),
        ssm_inner_size=number("ssm.inner_size"),
        ssm_state_size=number("ssm.state_size"),
        ssm_group_count=number("ssm.group_count"),
        token_count=count,
        tokens_sha256=digest,
    )


NOT_APPLICABLE = ("not applicable: n-gram drafting drafts from the tokens already seen and reads "
                  "no draft model")


def check_pair(main: ModelInfo, draft: ModelInfo | None, kind: PairKind) -> PairVerdict:
    """Whether ``draft`` (or the heads inside ``main``) can draft for ``main``, with reasons.

    ``kind``: ``in_file``/``sidecar`` (MTP heads), ``draft_model`` (a separate draft model,
    possibly ``main`` itself: the same tokenizer and token list), or ``ngram`` (no pair: the
    verdict is ok and not :attr:`~PairVerdict.applicable`)."""
    reasons: list[str] = []
    if kind == "ngram":
        if draft is not None:
            return PairVerdict(ok=False, reasons=(f"{PurePath(draft.path).name}: n-gram drafting takes "
                                                  "no draft file",))
        return PairVerdict(ok=True, applicable=False, reasons=(NOT_APPLICABLE,))
    if kind == "draft_model":
        return _check_draft_model(main, draft)
    if kind == "in_file":
        if draft is not None:
            reasons.append(f"{PurePath(draft.path).name}: this route keeps its MTP heads inside the main "
                           "file and takes no draft file")
        if main.nextn_predict_layers <= 0:
            reasons.append(f"{PurePath(main.path).name}: no MTP heads inside the file "
                           f"({main.architecture}.nextn_predict_layers is 0 or missing); "
                           "use the repository's MTP build of this model")
        return PairVerdict(ok=not reasons, reasons=tuple(reasons))

    main_name = PurePath(main.path).name
    if main.architecture == ASSISTANT_ARCH:
        reasons.append(f"{main_name}: is itself a {ASSISTANT_ARCH} draft head, not a main model")
    elif main.architecture != ASSISTANT_TARGET_ARCH:
        reasons.append(f"{main_name}: architecture {main.architecture!r}; a {ASSISTANT_ARCH} head "
                       f"drafts only for a {ASSISTANT_TARGET_ARCH!r} main model")
    if draft is None:
        reasons.append("this route needs an MTP sidecar (mtp-*.gguf) and none was given")
        return PairVerdict(ok=False, reasons=tuple(reasons))

    draft_name = PurePath(draft.path).name
    if draft.architecture == ASSISTANT_ARCH.replace("-", "_"):
        reasons.append(f"{draft_name}: architecture 'gemma4_assistant' (underscore) does not load in "
                       f"upstream llama.cpp, which knows only '{ASSISTANT_ARCH}' (hyphen); "
                       "re-convert it with upstream convert_hf_to_gguf.py or use the repository's mtp-*.gguf")
    elif draft.architecture != ASSISTANT_ARCH:
        reasons.append(f"{draft_name}: architecture {draft.architecture!r} is not an MTP sidecar "
                       f"(expected {ASSISTANT_ARCH!r})")
    else:
        if draft.embedding_length_out is None:
            reasons.append(f"{draft_name}: {ASSISTANT_ARCH}.embedding_length_out is missing; llama.cpp "
                           "needs it to carry the main model's hidden size")
        elif draft.embedding_length_out != main.embedding_length:
            reasons.append(f"{draft_name}: drafts for hidden size {draft.embedding_length_out}, but "
                           f"{main_name} has hidden size {main.embedding_length}: it was trained for "
                           "another main model")
        if draft.nextn_predict_layers <= 0:
            reasons.append(f"{draft_name}: declares no draft layers ({ASSISTANT_ARCH}.nextn_predict_layers)")

    if main.tokens_sha256 is None or draft.tokens_sha256 is None:
        missing = main_name if main.tokens_sha256 is None else draft_name
        reasons.append(f"{missing}: has no token list (tokenizer.ggml.tokens) to compare")
    elif main.tokens_sha256 != draft.tokens_sha256:
        reasons.append(f"tokenizers differ: {main_name} has {main.token_count} tokens "
                       f"(sha256 {main.tokens_sha256[:12]}), {draft_name} has {draft.token_count} "
                       f"(sha256 {draft.tokens_sha256[:12]}); drafted tokens would mean other words")
    return PairVerdict(ok=not reasons, reasons=tuple(reasons))


def _check_draft_model(main: ModelInfo, draft: ModelInfo | None) -> PairVerdict:
    """A separate draft model (``--spec-type draft-simple``): llama.cpp drafts with any model
    whose vocabulary is the target's (``common_speculative_are_compatible``: the same
    tokenizer type and tokens); a draft head of another kind is not a draft model."""
    main_name = PurePath(main.path).name
    if draft is None:
        return PairVerdict(ok=False, reasons=("this route drafts with a separate draft model and "
                                              "none was given",))
    draft_name = PurePath(draft.path).name
    reasons: list[str] = []
    for info, name in ((main, main_name), (draft, draft_name)):
        if info.architecture in (ASSISTANT_ARCH, ASSISTANT_ARCH.replace("-", "_")):
            reasons.append(f"{name}: is an MTP draft head ({info.architecture}), not a model that "
                           "drafts or serves on its own")
    if main.tokenizer_model != draft.tokenizer_model:
        reasons.append(f"tokenizers differ: {main_name} uses {main.tokenizer_model!r}, {draft_name} "
                       f"uses {draft.tokenizer_model!r}")
    if main.tokens_sha256 is None or draft.tokens_sha256 is None:
        missing = main_name if main.tokens_sha256 is None else draft_name
        reasons.append(f"{missing}: has no token list (tokenizer.ggml.tokens) to compare")
    elif main.tokens_sha256 != draft.tokens_sha256:
        reasons.append(f"vocabularies differ: {main_name} has {main.token_count} tokens "
                       f"(sha256 {main.tokens_sha256[:12]}), {draft_name} has {draft.token_count} "
                       f"(sha256 {draft.tokens_sha256[:12]}); drafted tokens would mean other words")
    return PairVerdict(ok=not reasons, reasons=tuple(reasons))


#: the two shapes MTP comes in (llama.cpp common/speculative.cpp)
MtpKind = Literal["sidecar", "in_file"]
#: what a pairing proof checks: MTP heads, a separate draft model, or nothing (n-gram drafting)
PairKind = Literal["sidecar", "in_file", "draft_model", "ngram"]


def weights_read_per_token(reader: Any) -> int:
    """The bytes of weights one plain decoding step reads, from a GGUF reader's tensor list:
    every tensor but the token embedding (one row of it is read; it counts when the output head
    is tied to it, with no ``output.weight``), and of a mixture of experts' ``*_exps`` tensors
    the share ``expert_used_count / expert_count``. The KV cache's reads at depth come on top."""
    arch = _scalar(reader, "general.architecture")
    used = _scalar(reader, f"{arch}.expert_used_count") if arch else None
    count = _scalar(reader, f"{arch}.expert_count") if arch else None
    share = (used / count) if used and count else 1.0
    names = {t.name for t in reader.tensors}
    total = 0.0
    for t in reader.tensors:
        if t.name.startswith("token_embd.") and "output.weight" in names:
            continue
        total += int(t.n_bytes) * (share if "_exps." in t.name else 1.0)
    return int(total)
