"""Tiny, real GGUF models that upstream llama-server loads and speculates with.

Every model here is a few megabytes of structured weights written with ``gguf.GGUFWriter``.
All models of one pair share the same SentencePiece ("llama") vocabulary, token for token, so
llama-server accepts them as target and draft.

The weights are random but shaped so that the next token is a fixed function of the current
one: the target model walks a cycle over the ordinary word pieces (``succ``), and every draft
(the Gemma 4 MTP assistant, or a plain llama draft) predicts the same successor. Attention and
feed-forward blocks do real work on real random matrices, but their outputs are scaled down
(by their post-norm or output weights) so that the token-embedding path decides the argmax.
Drafts therefore agree with the target, and llama-server reports accepted draft tokens.

The preferred pair is the real MTP shape of upstream llama.cpp: a ``gemma4`` main model and a
``gemma4-assistant`` sidecar, served with ``-md mtp.gguf --spec-type draft-mtp``. The sidecar
reads the target's KV cache (its sliding-window layers read the target's second-to-last layer,
its full-attention layers the last one) and the target's token embeddings.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

__all__ = [
    "TinyPair",
    "TinyVocab",
    "tiny_vocab",
    "write_draft_pair",
    "write_gemma4_assistant",
    "write_gemma4_main",
    "write_llama_model",
    "write_mtp_pair",
]

SEED = 20260101

# token ids fixed by the "llama" tokenizer model: <unk>, <s>, </s>
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
N_BYTE_TOKENS = 256
SPACE = "\u2581"  # SentencePiece's visible space

_WORDS = (
    "the of and to in is that it for on was with as at by be this from or have an are not "
    "but had his they you she her one all were we when there can which their said if do will "
    "each about how up out them then many some so these would other into has more two like "
    "speculative decoding draft token model fast small tiny server llama gemma ojai"
).split()

# Shapes of the Gemma 4 pair. The assistant's width must differ from the target's
# (llama.cpp rejects an assistant whose embedding_length equals embedding_length_out).
_GEMMA_EMBD = 128
_GEMMA_FF = 256
_ASSISTANT_EMBD = 64
_ASSISTANT_FF = 128
_N_HEAD = 4
_N_HEAD_KV = 2
_HEAD_DIM = 32
_SLIDING_WINDOW = 128
_CONTEXT_LENGTH = 4096
_RMS_EPS = 1e-6
# weight of the post-attention and post-FFN norms: keeps those blocks' outputs small
_BLOCK_GAIN = 0.01
# scale of the output rows: logits of the successor are ~64 above the runner-up
_OUTPUT_SCALE = 0.5


@dataclass(frozen=True)
class TinyVocab:
    """A SentencePiece vocabulary: control tokens, 256 byte tokens, then word pieces.

    ``succ[t]`` is the token the tiny models predict after ``t``; it is defined for the word
    pieces only (a single cycle over them), and is -1 for control and byte tokens.
    """

    tokens: list[str]
    scores: list[float]
    types: list[int]
    succ: np.ndarray

    @property
    def size(self) -> int:
        return len(self.tokens)

    @property
    def pieces(self) -> np.ndarray:
        """Ids of the word pieces, in cycle order."""
        return np.flatnonzero(self.succ >= 0)


def tiny_vocab() -> TinyVocab:
    """The shared vocabulary of every tiny model (a few hundred tokens)."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [
        gguf.TokenType.UNKNOWN,
        gguf.TokenType.CONTROL,
        gguf.TokenType.CONTROL,
    ]
    tokens += [f"<0x{b:02X}>" for b in range(N_BYTE_TOKENS)]
    types += [gguf.TokenType.BYTE] * N_BYTE_TOKENS
    pieces = [SPACE]
    pieces += list("abcdefghijklmnopqrstuvwxyz")
    pieces += list("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    pieces += list("0123456789.,!?'-:")
    # SentencePiece builds a word by merging adjacent pieces, so every prefix must be a piece
    for word in _WORDS:
        for end in range(2, len(word) + 2):
            prefix = (SPACE + word)[:end]
            if prefix not in pieces:
                pieces.append(prefix)
    first_piece = len(tokens)
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    # SentencePiece merges by score: longer pieces first, all below the control tokens
    scores = [0.0] * first_piece + [-1000.0 + 10.0 * len(p) - 0.001 * i for i, p in enumerate(pieces)]

    succ = np.full(len(tokens), -1, dtype=np.int64)
    ids = np.arange(first_piece, len(tokens))
    succ[ids] = np.roll(ids, -1)
    return TinyVocab(tokens=tokens, scores=scores, types=[int(t) for t in types], succ=succ)


@dataclass(frozen=True)
class TinyPair:
    """A main model and how to speculate with it.

    ``draft`` is None when the MTP heads live inside ``main``. ``extra_args`` are the
    llama-server arguments that select the speculative route (without ``-m``).
    """

    main: Path
    draft: Path | None
    spec_type: str
    extra_args: list[str] = field(default_factory=list)

    def server_args(self) -> list[str]:
        """``-m MAIN`` followed by the speculative arguments."""
        return ["-m", str(self.main), *self.extra_args]


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> np.ndarray:
    return _f32(rng.normal(0.0, std, size=shape))


def _write_vocab(writer: gguf.GGUFWriter, vocab: TinyVocab) -> None:
    writer.add_tokenizer_model("llama")
    writer.add_token_list(vocab.tokens)
    writer.add_token_scores(vocab.scores)
    writer.add_token_types(vocab.types)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_unk_token_id(UNK_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)


def _finish(writer: gguf.GGUFWriter, partial: Path) -> Path:
    """Write header, metadata and tensors to ``NAME.partial``, then rename it to ``NAME``."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    final = partial.with_name(partial.name.removesuffix(".partial"))
    partial.replace(final)
    return final


def _successor_rows(vocab: TinyVocab, source: np.ndarray, scale: float) -> np.ndarray:
    """Output rows such that row ``succ[t]`` is ``scale * source[t]``; other rows are zero."""
    rows = np.zeros_like(source)
    pieces = vocab.pieces
    rows[vocab.succ[pieces]] = scale * source[pieces]
    return _f32(rows)


def _gemma4_common_kv(writer: gguf.GGUFWriter, arch: str, n_embd: int, n_ff: int) -> None:
    writer.add_uint32(f"{arch}.context_length", _CONTEXT_LENGTH)
    writer.add_uint32(f"{arch}.embedding_length", n_embd)
    writer.add_uint32(f"{arch}.block_count", 2)
    writer.add_uint32(f"{arch}.feed_forward_length", n_ff)
    writer.add_uint32(f"{arch}.attention.head_count", _N_HEAD)
    writer.add_uint32(f"{arch}.attention.head_count_kv", _N_HEAD_KV)
    writer.add_uint32(f"{arch}.attention.key_length", _HEAD_DIM)
    writer.add_uint32(f"{arch}.attention.value_length", _HEAD_DIM)
    writer.add_uint32(f"{arch}.attention.key_length_swa", _HEAD_DIM)
    writer.add_uint32(f"{arch}.attention.value_length_swa", _HEAD_DIM)
    writer.add_uint32(f"{arch}.attention.sliding_window", _SLIDING_WINDOW)
    # layer 0 slides, layer 1 attends fully (the assistant shares exactly these two)
    writer.add_array(f"{arch}.attention.sliding_window_pattern", [True, False])
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", _RMS_EPS)
    writer.add_float32(f"{arch}.rope.freq_base", 1_000_000.0)
    writer.add_float32(f"{arch}.rope.freq_base_swa", 10_000.0)
    writer.add_uint32(f"{arch}.rope.dimension_count", _HEAD_DIM)
    writer.add_uint32(f"{arch}.rope.dimension_count_swa", _HEAD_DIM)
    writer.add_uint32("general.file_type", int(gguf.LlamaFileType.ALL_F32))


def _gemma4_block(
    writer: gguf.GGUFWriter, rng: np.random.Generator, il: int, n_embd: int, n_ff: int, *, with_kv: bool
) -> None:
    """One Gemma 4 decoder block; the assistant's blocks have no K/V projections."""
    q_dim = _N_HEAD * _HEAD_DIM
    kv_dim = _N_HEAD_KV * _HEAD_DIM
    p = f"blk.{il}"
    writer.add_tensor(f"{p}.attn_norm.weight", _f32(np.ones(n_embd)))
    writer.add_tensor(f"{p}.attn_q.weight", _normal(rng, (q_dim, n_embd), n_embd**-0.5))
    if with_kv:
        writer.add_tensor(f"{p}.attn_k.weight", _normal(rng, (kv_dim, n_embd), n_embd**-0.5))
        writer.add_tensor(f"{p}.attn_v.weight", _normal(rng, (kv_dim, n_embd), n_embd**-0.5))
        writer.add_tensor(f"{p}.attn_k_norm.weight", _f32(np.ones(_HEAD_DIM)))
    writer.add_tensor(f"{p}.attn_q_norm.weight", _f32(np.ones(_HEAD_DIM)))
    writer.add_tensor(f"{p}.attn_output.weight", _normal(rng, (n_embd, q_dim), q_dim**-0.5))
    writer.add_tensor(f"{p}.post_attention_norm.weight", _f32(np.full(n_embd, _BLOCK_GAIN)))
    writer.add_tensor(f"{p}.ffn_norm.weight", _f32(np.ones(n_embd)))
    writer.add_tensor(f"{p}.ffn_gate.weight", _normal(rng, (n_ff, n_embd), n_embd**-0.5))
    writer.add_tensor(f"{p}.ffn_up.weight", _normal(rng, (n_ff, n_embd), n_embd**-0.5))
    writer.add_tensor(f"{p}.ffn_down.weight", _normal(rng, (n_embd, n_ff), n_ff**-0.5))
    writer.add_tensor(f"{p}.post_ffw_norm.weight", _f32(np.full(n_embd, _BLOCK_GAIN)))
    writer.add_tensor(f"{p}.layer_output_scale.weight", _f32(np.ones(1)))


def _gemma4_token_embd(vocab: TinyVocab) -> np.ndarray:
    """The Gemma 4 target's token embeddings (the assistant reads them too)."""
    return _normal(np.random.default_rng(SEED), (vocab.size, _GEMMA_EMBD), 1.0)


def write_gemma4_main(path: Path, vocab: TinyVocab | None = None) -> Path:
    """A 2-layer ``gemma4`` model (one sliding, one full-attention layer) predicting ``succ``."""
    vocab = vocab or tiny_vocab()
    rng = np.random.default_rng(SEED + 1)
    arch = "gemma4"
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch)
    writer.add_name("ojai tiny gemma4")
    _gemma4_common_kv(writer, arch, _GEMMA_EMBD, _GEMMA_FF)
    writer.add_uint32(f"{arch}.embedding_length_per_layer_input", 0)
    writer.add_uint32(f"{arch}.attention.shared_kv_layers", 0)
    _write_vocab(writer, vocab)

    embd = _gemma4_token_embd(vocab)
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output.weight", _successor_rows(vocab, embd, _OUTPUT_SCALE))
    writer.add_tensor("output_norm.weight", _f32(np.ones(_GEMMA_EMBD)))
    writer.add_tensor("rope_freqs.weight", _f32(np.ones(_HEAD_DIM // 2)))
    for il in range(2):
        _gemma4_block(writer, rng, il, _GEMMA_EMBD, _GEMMA_FF, with_kv=True)
    return _finish(writer, partial)


def write_gemma4_assistant(path: Path, vocab: TinyVocab | None = None) -> Path:
    """A 2-layer ``gemma4-assistant`` MTP sidecar for :func:`write_gemma4_main`.

    Its pre-projection maps the target's (scaled) embedding of the last token through a
    random matrix ``M``; its tied output rows are ``M @ E[t]`` at row ``succ[t]``, so it
    drafts the same successor the target will sample.
    """
    vocab = vocab or tiny_vocab()
    rng = np.random.default_rng(SEED + 2)
    arch = "gemma4-assistant"
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch)
    writer.add_name("ojai tiny gemma4 assistant")
    _gemma4_common_kv(writer, arch, _ASSISTANT_EMBD, _ASSISTANT_FF)
    writer.add_uint32(f"{arch}.embedding_length_out", _GEMMA_EMBD)
    writer.add_uint32(f"{arch}.nextn_predict_layers", 2)
    _write_vocab(writer, vocab)

    target_embd = _gemma4_token_embd(vocab)
    mix = _normal(rng, (_ASSISTANT_EMBD, _GEMMA_EMBD), _GEMMA_EMBD**-0.5)
    pre = np.concatenate(
        [mix, _normal(rng, (_ASSISTANT_EMBD, _GEMMA_EMBD), 0.01 * _GEMMA_EMBD**-0.5)], axis=1
    )
    writer.add_tensor("token_embd.weight", _successor_rows(vocab, target_embd @ mix.T, 1.0))
    writer.add_tensor("output_norm.weight", _f32(np.ones(_ASSISTANT_EMBD)))
    writer.add_tensor("nextn.pre_projection.weight", _f32(pre))
    writer.add_tensor(
        "nextn.post_projection.weight", _normal(rng, (_GEMMA_EMBD, _ASSISTANT_EMBD), _ASSISTANT_EMBD**-0.5)
    )
    writer.add_tensor("rope_freqs.weight", _f32(np.ones(_HEAD_DIM // 2)))
    for il in range(2):
        _gemma4_block(writer, rng, il, _ASSISTANT_EMBD, _ASSISTANT_FF, with_kv=False)
    return _finish(writer, partial)


def write_mtp_pair(directory: Path) -> TinyPair:
    """A Gemma 4 main model and its ``gemma4-assistant`` MTP sidecar (``mtp-tiny-gemma4.gguf``)."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = tiny_vocab()
    main = write_gemma4_main(directory / "tiny-gemma4.gguf", vocab)
    draft = write_gemma4_assistant(directory / "mtp-tiny-gemma4.gguf", vocab)
    return TinyPair(
        main=main,
        draft=draft,
        spec_type="draft-mtp",
        extra_args=["-md", str(draft), "--spec-type", "draft-mtp"],
    )


def write_llama_model(path: Path, n_embd: int, n_layer: int, seed: int, vocab: TinyVocab | None = None) -> Path:
    """A small ``llama`` model predicting ``succ``; attention and FFN outputs are scaled down."""
    vocab = vocab or tiny_vocab()
    rng = np.random.default_rng(seed)
    n_ff = 2 * n_embd
    head_dim = n_embd // _N_HEAD
    kv_dim = _N_HEAD_KV * head_dim
    arch = "llama"
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch)
    writer.add_name(f"ojai tiny llama {n_embd}x{n_layer}")
    writer.add_uint32(f"{arch}.context_length", _CONTEXT_LENGTH)
    writer.add_uint32(f"{arch}.embedding_length", n_embd)
    writer.add_uint32(f"{arch}.block_count", n_layer)
    writer.add_uint32(f"{arch}.feed_forward_length", n_ff)
    writer.add_uint32(f"{arch}.attention.head_count", _N_HEAD)
    writer.add_uint32(f"{arch}.attention.head_count_kv", _N_HEAD_KV)
    writer.add_uint32(f"{arch}.rope.dimension_count", head_dim)
    writer.add_float32(f"{arch}.rope.freq_base", 10_000.0)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", _RMS_EPS)
    writer.add_uint32("general.file_type", int(gguf.LlamaFileType.ALL_F32))
    _write_vocab(writer, vocab)

    embd = _normal(rng, (vocab.size, n_embd), 1.0)
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", _f32(np.ones(n_embd)))
    writer.add_tensor("output.weight", _successor_rows(vocab, embd, _OUTPUT_SCALE))
    for il in range(n_layer):
        p = f"blk.{il}"
        writer.add_tensor(f"{p}.attn_norm.weight", _f32(np.ones(n_embd)))
        writer.add_tensor(f"{p}.attn_q.weight", _normal(rng, (n_embd, n_embd), n_embd**-0.5))
        writer.add_tensor(f"{p}.attn_k.weight", _normal(rng, (kv_dim, n_embd), n_embd**-0.5))
        writer.add_tensor(f"{p}.attn_v.weight", _normal(rng, (kv_dim, n_embd), n_embd**-0.5))
        writer.add_tensor(f"{p}.attn_output.weight", _normal(rng, (n_embd, n_embd), _BLOCK_GAIN * n_embd**-0.5))
        writer.add_tensor(f"{p}.ffn_norm.weight", _f32(np.ones(n_embd)))
        writer.add_tensor(f"{p}.ffn_gate.weight", _normal(rng, (n_ff, n_embd), n_embd**-0.5))
        writer.add_tensor(f"{p}.ffn_up.weight", _normal(rng, (n_ff, n_embd), n_embd**-0.5))
        writer.add_tensor(f"{p}.ffn_down.weight", _normal(rng, (n_embd, n_ff), _BLOCK_GAIN * n_ff**-0.5))
    return _finish(writer, partial)


def write_draft_pair(directory: Path) -> TinyPair:
    """A 2-layer ``llama`` main model and a narrower 1-layer ``llama`` draft (``draft-simple``)."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = tiny_vocab()
    main = write_llama_model(directory / "tiny-llama.gguf", _GEMMA_EMBD, 2, SEED + 3, vocab)
    draft = write_llama_model(directory / "tiny-llama-draft.gguf", _ASSISTANT_EMBD, 1, SEED + 4, vocab)
    return TinyPair(
        main=main,
        draft=draft,
        spec_type="draft-simple",
        extra_args=["-md", str(draft), "--spec-type", "draft-simple"],
    )
