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

Three shapes, one per speculative route of upstream llama.cpp (build 11434):

- :func:`write_mtp_pair`: a ``gemma4`` main model and a ``gemma4-assistant`` MTP sidecar,
  served with ``-md mtp-tiny-gemma4.gguf --spec-type draft-mtp``. The sidecar reads the target's
  KV cache (its sliding-window layers read the target's second-to-last layer, its
  full-attention layers the last one) and the target's token embeddings.
- :func:`write_qwen35_mtp_pair`: a ``qwen35`` model (one gated-delta-net layer, one attention
  layer) with its MTP head inside the file, served with ``--spec-type draft-mtp`` alone.
- :func:`write_draft_pair`: a ``llama`` main model and a smaller ``llama`` draft, served with
  ``-md tiny-llama-draft.gguf --spec-type draft-simple``.

With greedy sampling every draft is accepted; ``miss_every`` makes a draft mispredict some
successors so that the server also rejects drafts.
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
    "write_qwen35_mtp",
    "write_qwen35_mtp_pair",
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
# gain of the blocks' outputs (post-norm weights, or output-projection scale): keeps
# attention, FFN and delta-net contributions to the residual stream small
_BLOCK_GAIN = 0.01
# scale of the output rows: the successor's logit leads the runner-up by tens of logits
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

    def draft_succ(self, miss_every: int = 0) -> np.ndarray:
        """The successors a draft predicts: ``succ``, except that for every ``miss_every``-th
        word piece it skips one ahead (0: never), so that some drafts get rejected.

        Choose ``miss_every`` coprime to ``n_max + 1`` (``--spec-draft-n-max``, default 3): a fully
        accepted round advances ``n_max + 1`` tokens and never drafts from its last one, so with
        ``miss_every = 4`` most misses fall on that position and go unseen.
        """
        drafted = self.succ.copy()
        if miss_every > 0:
            missed = self.pieces[::miss_every]
            drafted[missed] = self.succ[self.succ[missed]]
        return drafted


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


def _successor_rows(
    vocab: TinyVocab, source: np.ndarray, scale: float, successor: np.ndarray | None = None
) -> np.ndarray:
    """Output rows such that row ``successor[t]`` holds ``scale * source[t]`` for every word
    piece ``t`` (summed where two pieces share a successor); all other rows are zero."""
    successor = vocab.succ if successor is None else successor
    rows = np.zeros_like(source)
    pieces = vocab.pieces
    np.add.at(rows, successor[pieces], scale * source[pieces])
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


def write_gemma4_assistant(path: Path, vocab: TinyVocab | None = None, *, miss_every: int = 0) -> Path:
    """A 2-layer ``gemma4-assistant`` MTP sidecar for :func:`write_gemma4_main`.

    Its pre-projection maps the target's (scaled) embedding of the last token through a
    random matrix ``M``; its tied output rows are ``M @ E[t]`` at row ``succ[t]``, so it
    drafts the same successor the target will sample (see :meth:`TinyVocab.draft_succ`
    for ``miss_every``).
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
    writer.add_tensor("token_embd.weight", _successor_rows(vocab, target_embd @ mix.T, 1.0, vocab.draft_succ(miss_every)))
    writer.add_tensor("output_norm.weight", _f32(np.ones(_ASSISTANT_EMBD)))
    writer.add_tensor("nextn.pre_projection.weight", _f32(pre))
    writer.add_tensor(
        "nextn.post_projection.weight", _normal(rng, (_GEMMA_EMBD, _ASSISTANT_EMBD), _ASSISTANT_EMBD**-0.5)
    )
    writer.add_tensor("rope_freqs.weight", _f32(np.ones(_HEAD_DIM // 2)))
    for il in range(2):
        _gemma4_block(writer, rng, il, _ASSISTANT_EMBD, _ASSISTANT_FF, with_kv=False)
    return _finish(writer, partial)


def write_mtp_pair(directory: Path, *, miss_every: int = 0) -> TinyPair:
    """A Gemma 4 main model and its ``gemma4-assistant`` MTP sidecar (``mtp-tiny-gemma4.gguf``).

    With ``miss_every = 0`` every draft is accepted; with ``n > 0`` the sidecar mispredicts the
    successor of every n-th word piece.
    """
    directory.mkdir(parents=True, exist_ok=True)
    vocab = tiny_vocab()
    main = write_gemma4_main(directory / "tiny-gemma4.gguf", vocab)
    draft = write_gemma4_assistant(directory / "mtp-tiny-gemma4.gguf", vocab, miss_every=miss_every)
    return TinyPair(
        main=main,
        draft=draft,
        spec_type="draft-mtp",
        extra_args=["-md", str(draft), "--spec-type", "draft-mtp"],
    )


def write_llama_model(
    path: Path,
    n_embd: int,
    n_layer: int,
    seed: int,
    vocab: TinyVocab | None = None,
    successor: np.ndarray | None = None,
) -> Path:
    """A small ``llama`` model predicting ``successor`` (default ``succ``); attention and FFN
    outputs are scaled down."""
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
    writer.add_tensor("output.weight", _successor_rows(vocab, embd, _OUTPUT_SCALE, successor))
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


def write_draft_pair(directory: Path, *, miss_every: int = 0) -> TinyPair:
    """A 2-layer ``llama`` main model and a narrower 1-layer ``llama`` draft (``draft-simple``);
    ``miss_every`` as in :func:`write_mtp_pair`."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = tiny_vocab()
    main = write_llama_model(directory / "tiny-llama.gguf", _GEMMA_EMBD, 2, SEED + 3, vocab)
    draft = write_llama_model(
        directory / "tiny-llama-draft.gguf", _ASSISTANT_EMBD, 1, SEED + 4, vocab, vocab.draft_succ(miss_every)
    )
    return TinyPair(
        main=main,
        draft=draft,
        spec_type="draft-simple",
        extra_args=["-md", str(draft), "--spec-type", "draft-simple"],
    )


def write_qwen35_mtp(path: Path, vocab: TinyVocab | None = None) -> Path:
    """A ``qwen35`` model with its MTP head inside the file (``nextn_predict_layers = 1``).

    The trunk has one gated-delta-net (recurrent) layer and one full-attention layer; block 2
    is the MTP block. Its ``eh_proj`` passes the normalised embedding of the last token
    through, and it shares the trunk's LM head, so it drafts ``succ`` like the trunk.
    """
    vocab = vocab or tiny_vocab()
    rng = np.random.default_rng(SEED + 5)
    n_embd, n_ff, head_dim = _GEMMA_EMBD, _GEMMA_FF, _HEAD_DIM
    q_dim = _N_HEAD * head_dim
    kv_dim = _N_HEAD_KV * head_dim
    # gated delta net: 2 key heads and 4 value heads of width 32
    d_state, n_k_heads, n_v_heads, d_conv = 32, 2, 4, 4
    key_dim, value_dim = d_state * n_k_heads, d_state * n_v_heads
    arch = "qwen35"
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch)
    writer.add_name("ojai tiny qwen35 mtp")
    writer.add_uint32(f"{arch}.context_length", _CONTEXT_LENGTH)
    writer.add_uint32(f"{arch}.embedding_length", n_embd)
    writer.add_uint32(f"{arch}.block_count", 3)
    writer.add_uint32(f"{arch}.nextn_predict_layers", 1)
    writer.add_uint32(f"{arch}.feed_forward_length", n_ff)
    writer.add_uint32(f"{arch}.attention.head_count", _N_HEAD)
    writer.add_uint32(f"{arch}.attention.head_count_kv", _N_HEAD_KV)
    writer.add_uint32(f"{arch}.attention.key_length", head_dim)
    writer.add_uint32(f"{arch}.attention.value_length", head_dim)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", _RMS_EPS)
    writer.add_float32(f"{arch}.rope.freq_base", 10_000_000.0)
    writer.add_uint32(f"{arch}.rope.dimension_count", head_dim)
    writer.add_array(f"{arch}.rope.dimension_sections", [6, 5, 5, 0])
    writer.add_uint32(f"{arch}.full_attention_interval", 2)
    writer.add_uint32(f"{arch}.ssm.conv_kernel", d_conv)
    writer.add_uint32(f"{arch}.ssm.inner_size", value_dim)
    writer.add_uint32(f"{arch}.ssm.state_size", d_state)
    writer.add_uint32(f"{arch}.ssm.time_step_rank", n_v_heads)
    writer.add_uint32(f"{arch}.ssm.group_count", n_k_heads)
    writer.add_uint32("general.file_type", int(gguf.LlamaFileType.ALL_F32))
    _write_vocab(writer, vocab)

    def small(shape: tuple[int, int]) -> np.ndarray:
        """An output projection whose contribution to the residual stream stays small."""
        return _normal(rng, shape, _BLOCK_GAIN * shape[1] ** -0.5)

    def dense(shape: tuple[int, int]) -> np.ndarray:
        return _normal(rng, shape, shape[1] ** -0.5)

    def attention(p: str) -> None:
        writer.add_tensor(f"{p}.attn_q.weight", dense((2 * q_dim, n_embd)))  # query and gate
        writer.add_tensor(f"{p}.attn_k.weight", dense((kv_dim, n_embd)))
        writer.add_tensor(f"{p}.attn_v.weight", dense((kv_dim, n_embd)))
        writer.add_tensor(f"{p}.attn_output.weight", small((n_embd, q_dim)))
        writer.add_tensor(f"{p}.attn_q_norm.weight", _f32(np.ones(head_dim)))
        writer.add_tensor(f"{p}.attn_k_norm.weight", _f32(np.ones(head_dim)))

    def norms_and_ffn(p: str) -> None:
        writer.add_tensor(f"{p}.attn_norm.weight", _f32(np.ones(n_embd)))
        writer.add_tensor(f"{p}.post_attention_norm.weight", _f32(np.ones(n_embd)))
        writer.add_tensor(f"{p}.ffn_gate.weight", dense((n_ff, n_embd)))
        writer.add_tensor(f"{p}.ffn_up.weight", dense((n_ff, n_embd)))
        writer.add_tensor(f"{p}.ffn_down.weight", small((n_embd, n_ff)))

    embd = _normal(rng, (vocab.size, n_embd), 1.0)
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", _f32(np.ones(n_embd)))
    writer.add_tensor("output.weight", _successor_rows(vocab, embd, _OUTPUT_SCALE))

    # block 0: gated delta net
    norms_and_ffn("blk.0")
    writer.add_tensor("blk.0.attn_qkv.weight", dense((2 * key_dim + value_dim, n_embd)))
    writer.add_tensor("blk.0.attn_gate.weight", dense((value_dim, n_embd)))
    writer.add_tensor("blk.0.ssm_conv1d.weight", _normal(rng, (2 * key_dim + value_dim, d_conv), 0.5))
    writer.add_tensor("blk.0.ssm_dt.bias", _f32(np.ones(n_v_heads)))
    writer.add_tensor("blk.0.ssm_a", _f32(-np.exp(rng.uniform(0.0, 1.0, n_v_heads))))
    writer.add_tensor("blk.0.ssm_beta.weight", dense((n_v_heads, n_embd)))
    writer.add_tensor("blk.0.ssm_alpha.weight", dense((n_v_heads, n_embd)))
    writer.add_tensor("blk.0.ssm_norm.weight", _f32(np.ones(d_state)))
    writer.add_tensor("blk.0.ssm_out.weight", small((n_embd, value_dim)))

    # block 1: full attention
    norms_and_ffn("blk.1")
    attention("blk.1")

    # block 2: the MTP head
    norms_and_ffn("blk.2")
    attention("blk.2")
    eh_proj = np.concatenate([np.eye(n_embd), small((n_embd, n_embd))], axis=1)
    writer.add_tensor("blk.2.nextn.eh_proj.weight", _f32(eh_proj))
    writer.add_tensor("blk.2.nextn.enorm.weight", _f32(np.ones(n_embd)))
    writer.add_tensor("blk.2.nextn.hnorm.weight", _f32(np.ones(n_embd)))
    writer.add_tensor("blk.2.nextn.shared_head_norm.weight", _f32(np.ones(n_embd)))
    return _finish(writer, partial)


def write_qwen35_mtp_pair(directory: Path) -> TinyPair:
    """A ``qwen35`` model whose MTP head is inside the file: ``--spec-type draft-mtp``, no ``-md``."""
    directory.mkdir(parents=True, exist_ok=True)
    main = write_qwen35_mtp(directory / "tiny-qwen35-mtp.gguf")
    return TinyPair(main=main, draft=None, spec_type="draft-mtp", extra_args=["--spec-type", "draft-mtp"])
