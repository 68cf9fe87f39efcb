"""Tiny real GGUF files, written with ``gguf.GGUFWriter``, for pairing and download tests.

The metadata keys are the ones llama.cpp's converter writes (conversion/gemma.py,
gguf-py/gguf/constants.py): a Gemma 4 main model is ``gemma4`` with ``gemma4.embedding_length``;
its MTP sidecar is ``gemma4-assistant`` with the main model's hidden size in
``gemma4-assistant.embedding_length_out`` and ``gemma4-assistant.nextn_predict_layers``;
Qwen3.6 MTP builds are ``qwen35`` with ``qwen35.nextn_predict_layers`` in the main file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import gguf
import numpy as np

#: the shared vocabulary of a matched pair (special tokens first, like a real SentencePiece list)
TOKENS: tuple[str, ...] = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>") + tuple(f"tok{i}" for i in range(59))
#: the same length, one token different: a tokenizer from another model family
OTHER_TOKENS: tuple[str, ...] = TOKENS[:10] + ("<start_of_turn>",) + TOKENS[11:]

MAIN_HIDDEN = 64
DRAFT_HIDDEN = 32


def write_gguf(
    path: Path,
    *,
    arch: str,
    embedding_length: int,
    block_count: int,
    tokens: Sequence[str] = TOKENS,
    embedding_length_out: int | None = None,
    nextn_predict_layers: int | None = None,
    head_count_kv: int | Sequence[int] = 2,
    payload_bytes: int = 4096,
) -> Path:
    """Write one GGUF file with the given metadata and a token-embedding tensor.

    ``payload_bytes`` sizes a second tensor, so downloads can be cut part way.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(block_count)
    writer.add_embedding_length(embedding_length)
    writer.add_head_count_kv(list(head_count_kv) if not isinstance(head_count_kv, int) else head_count_kv)
    if embedding_length_out is not None:
        writer.add_embedding_length_out(embedding_length_out)
    if nextn_predict_layers is not None:
        writer.add_nextn_predict_layers(nextn_predict_layers)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(list(tokens))
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 4), dtype=np.float32))
    rng = np.random.default_rng(len(path.name) + block_count)
    writer.add_tensor("output_norm.weight", rng.random(max(1, payload_bytes // 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def gemma4_main(path: Path, *, hidden: int = MAIN_HIDDEN, tokens: Sequence[str] = TOKENS,
                payload_bytes: int = 4096) -> Path:
    """A Gemma 4 main model: 6 layers, 5 sliding-window (4 KV heads) and 1 global (1 KV head)."""
    return write_gguf(path, arch="gemma4", embedding_length=hidden, block_count=6, tokens=tokens,
                      head_count_kv=[4, 4, 4, 4, 4, 1], payload_bytes=payload_bytes)


def gemma4_assistant(path: Path, *, arch: str = "gemma4-assistant", target_hidden: int = MAIN_HIDDEN,
                     tokens: Sequence[str] = TOKENS, payload_bytes: int = 4096) -> Path:
    """A Gemma 4 MTP sidecar drafting for a main model of hidden size ``target_hidden``."""
    return write_gguf(path, arch=arch, embedding_length=DRAFT_HIDDEN, block_count=2, tokens=tokens,
                      embedding_length_out=target_hidden, nextn_predict_layers=2,
                      payload_bytes=payload_bytes)


def qwen35(path: Path, *, nextn_predict_layers: int | None = 1, payload_bytes: int = 4096) -> Path:
    """A Qwen3.6 dense model; with MTP heads inside when ``nextn_predict_layers`` is set."""
    return write_gguf(path, arch="qwen35", embedding_length=MAIN_HIDDEN, block_count=5,
                      nextn_predict_layers=nextn_predict_layers, payload_bytes=payload_bytes)


def good_pair(folder: Path) -> tuple[Path, Path]:
    """A matched Gemma 4 main + ``mtp-`` sidecar, named the way the converter names them."""
    return (gemma4_main(folder / "gemma-4-tiny-it-Q4_K_M.gguf"),
            gemma4_assistant(folder / "mtp-gemma-4-tiny-it.gguf"))


def attention_model(path: Path, *, arch: str = "llama", block_count: int = 4, head_count: int = 8,
                    head_count_kv: int = 2, embedding_length: int = 256,
                    context_length: int = 65536, nextn_predict_layers: int | None = None,
                    tokens: Sequence[str] = TOKENS, payload_bytes: int = 4096,
                    split_max_tensors: int = 0) -> list[Path]:
    """A model whose header says all a KV cache size needs (``llama.cpp``'s loader reads
    ``head_count``, ``head_count_kv`` and ``embedding_length / head_count`` per head): one file,
    or with ``split_max_tensors`` the shards ``<stem>-0000i-of-0000n.gguf`` gguf's writer makes
    (its ``split.*`` keys in each), returned in order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    writer.add_block_count(block_count)
    writer.add_context_length(context_length)
    writer.add_embedding_length(embedding_length)
    writer.add_head_count(head_count)
    writer.add_head_count_kv(head_count_kv)
    if nextn_predict_layers is not None:
        writer.add_nextn_predict_layers(nextn_predict_layers)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(list(tokens))
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 4), dtype=np.float32))
    rng = np.random.default_rng(block_count)
    for i in range(2):
        writer.add_tensor(f"blk.{i}.ffn_up.weight",
                          rng.random(max(1, payload_bytes // 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if not split_max_tensors:
        return [path]
    return sorted(path.parent.glob(f"{path.stem}-*-of-*.gguf"))
