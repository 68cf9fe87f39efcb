"""Next-token distributions read from a running llama-server, teacher-forced over a text.

llama-server (b11434, ``tools/server``) returns probabilities only for the tokens it
generates, never for the prompt's own tokens, so each position is one ``/completion`` request
whose prompt is the text's tokens up to that position, with ``n_predict: 1`` and ``n_probs:
K``: the one generated token's top-K list is the model's distribution at that position
(``post_sampling_probs`` off: the full softmax of the logits, before any sampler;
``get_token_probabilities`` in ``server-common.cpp``). With ``cache_prompt`` the server keeps
the previous request's prefix in its KV cache and evaluates only the new tokens, so a text of
N tokens costs about N one-token decodes (``timings.prompt_n`` says how many it evaluated).
``stride`` > 1 asks every ``stride``-th position only: the server then evaluates ``stride``
tokens per request as a batch (the prompt path's kernels rather than the one-token path's).

The prompt is sent as token ids (from the reference server's ``/tokenize``) so both servers
read exactly the same tokens.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from ojai_setup.core.errors import OjaiError
from ojai_setup.domain.gate import TOP_K, TopK


class DistributionError(OjaiError, RuntimeError):
    """A server did not answer a request of the gate; the text says which and why."""


@dataclass
class Reading:
    """What one server answered over the text."""

    distributions: list[TopK]
    seconds: float
    requests: int
    evaluated: int  # prompt tokens the server says it evaluated (timings.prompt_n), summed
    notes: list[str] = field(default_factory=list)


def _post(base: str, path: str, payload: dict, *, api_key: str | None, timeout: float) -> dict:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(base.rstrip("/") + path, data=json.dumps(payload).encode(),
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace").strip()[:300]
        raise DistributionError(f"{base}{path} answered {exc.code}: {detail}") from None
    except (OSError, ValueError) as exc:
        raise DistributionError(f"{base}{path}: {exc}") from None


def tokenize(base: str, text: str, *, api_key: str | None = None, timeout: float = 60.0) -> list[int]:
    """The text's token ids as the server's model reads it, with its special tokens (BOS)."""
    data = _post(base, "/tokenize", {"content": text, "add_special": True},
                 api_key=api_key, timeout=timeout)
    tokens = data.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise DistributionError(f"{base}/tokenize gave no token ids: {str(data)[:200]}")
    return tokens


def parse_top(entry: dict) -> TopK:
    """One position's (token id, probability) pairs from a ``completion_probabilities`` entry
    (``top_logprobs`` with ``logprob``, or ``top_probs`` with ``prob``); a pair whose number is
    missing, null or not finite makes the whole position unusable (empty)."""
    items = entry.get("top_logprobs")
    log = items is not None
    if items is None:
        items = entry.get("top_probs") or []
    out = []
    for item in items:
        value = item.get("logprob" if log else "prob")
        if not isinstance(value, (int, float)) or not math.isfinite(value) or not isinstance(item.get("id"), int):
            if log and value is None:  # log(0): a token with probability 0
                out.append((item.get("id", -1), 0.0))
                continue
            return ()
        out.append((item["id"], math.exp(value) if log else float(value)))
    return tuple(out)


def teacher_forced(base: str, tokens: list[int], *, start: int = 1, stride: int = 1,
                   k: int = TOP_K, api_key: str | None = None, timeout: float = 120.0) -> Reading:
    """The distribution of the next token at positions ``start``, ``start + stride``, ... of
    ``tokens`` (position ``i``: given ``tokens[:i]``, what comes next)."""
    if start < 1 or stride < 1:
        raise ValueError("start and stride must be at least 1")
    began = time.monotonic()
    out: list[TopK] = []
    evaluated = requests = 0
    for i in range(start, len(tokens), stride):
        data = _post(base, "/completion",
                     {"prompt": tokens[:i], "n_predict": 1, "n_probs": k, "cache_prompt": True,
                      "temperature": 0.0, "post_sampling_probs": False, "samplers": ["top_k"],
                      "top_k": 1},
                     api_key=api_key, timeout=timeout)
        requests += 1
        probs = data.get("completion_probabilities") or []
        out.append(parse_top(probs[0]) if probs and isinstance(probs[0], dict) else ())
        evaluated += int((data.get("timings") or {}).get("prompt_n") or 0)
    return Reading(distributions=out, seconds=time.monotonic() - began, requests=requests,
                   evaluated=evaluated)
