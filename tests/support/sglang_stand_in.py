"""An SGLang server stand-in on 127.0.0.1, in the shape SGLang 0.5.23 answers in.

``GET /health`` (200, empty), ``GET /model_info`` (``model_path``, ``served_model_name``, ...:
``srt/entrypoints/http_server.py``), and a streamed ``POST /v1/completions`` as
``srt/entrypoints/openai/serving_completions.py`` writes it: one ``data:`` chunk per
verification step (``CompletionStreamResponse``: ``id``, ``object: "text_completion"``,
``created``, ``model``, ``choices`` with ``index``, ``text`` (the delta), ``logprobs``,
``finish_reason``, ``matched_stop``, ``token_ids`` with ``return_token_ids``; ``usage: null``),
then, with ``return_spec_tokens_details``, a chunk with empty ``choices`` and
``sglext.spec_tokens_details`` (``SpecTokensDetails``: ``spec_accept_rate``,
``spec_accept_length`` = completion tokens / ``spec_verify_ct``, ``spec_num_correct_drafts``,
``spec_num_proposed_drafts`` = steps x (draft tokens - 1), ``spec_verify_ct``, the histograms),
then the usage chunk (``exclude_none``), then ``data: [DONE]``. With ``accepted`` (drafts
accepted per step, cycled) it speculates with ``draft_tokens``; without, it decodes one token a
step and sends no speculative details, as SGLang does without ``--speculative-algorithm``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

from support.http_stand_in import StandInHandler, serving
from support.server import free_port


def _handler(accepted: tuple[int, ...] | None, draft_tokens: int, delay: float, seen: list):
    class Handler(StandInHandler):
        def _json(self, code: int, payload) -> None:
            self.reply(code, json.dumps(payload) if payload is not None else b"",
                       content_type="application/json")

        def do_GET(self):  # noqa: N802
            if self.path == "/health":
                self._json(200, None)
            elif self.path == "/model_info":
                self._json(200, {"model_path": "deepseek-ai/DeepSeek-V3", "served_model_name":
                                 "deepseek-v3-nextn", "tokenizer_path": "deepseek-ai/DeepSeek-V3",
                                 "is_generation": True, "model_type": "deepseek_v3",
                                 "architectures": ["DeepseekV3ForCausalLM"]})
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self):  # noqa: N802
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request["_authorization"] = self.headers.get("Authorization")  # for the test to read
            seen.append(request)
            if self.path != "/v1/completions":
                self._json(404, {"detail": "Not Found"})
                return
            n = int(request["max_tokens"])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def send(data: str) -> None:
                raw = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                self.wfile.flush()

            done = steps = correct = 0
            hist = [0] * draft_tokens
            while done < n:
                k = accepted[steps % len(accepted)] if accepted else 0
                step = min(n - done, k + 1)  # the accepted drafts and the target's own token
                ids = list(range(100 + done, 100 + done + step))
                done += step
                steps += 1
                correct += step - 1
                hist[min(step - 1, draft_tokens - 1)] += 1
                time.sleep(delay)
                choice = {"index": 0, "text": "".join(f" t{i}" for i in ids), "logprobs": None,
                          "finish_reason": "length" if done >= n else None, "matched_stop": None}
                if request.get("return_token_ids"):
                    choice["token_ids"] = ids
                send(json.dumps({"id": "req-1", "object": "text_completion", "created": 1,
                                 "model": request.get("model"), "choices": [choice],
                                 "usage": None}))
            if accepted and request.get("return_spec_tokens_details"):
                proposed = steps * (draft_tokens - 1)
                send(json.dumps({"id": "req-1", "object": "text_completion", "created": 1,
                                 "model": request.get("model"), "choices": [], "usage": None,
                                 "sglext": {"spec_tokens_details": {
                                     "spec_accept_rate": correct / proposed,
                                     "spec_accept_length": done / steps,
                                     "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
                                     "spec_num_correct_drafts": correct,
                                     "spec_num_proposed_drafts": proposed,
                                     "spec_verify_ct": steps,
                                     "spec_correct_drafts_histogram": hist,
                                     "spec_cap_lens_histogram": []}}}))
            if (request.get("stream_options") or {}).get("include_usage"):
                send(json.dumps({"id": "req-1", "object": "text_completion", "created": 1,
                                 "model": request.get("model"), "choices": [],
                                 "usage": {"prompt_tokens": 7, "total_tokens": 7 + done,
                                           "completion_tokens": done}}))
            send("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


@contextmanager
def sglang_stand_in(accepted: tuple[int, ...] | None = (3, 1, 2, 0), draft_tokens: int = 4,
                    delay: float = 0.0005, seen: list | None = None) -> Iterator[str]:
    """Serve on a free 127.0.0.1 port; yields its base URL. ``seen`` collects the requests."""
    handler = _handler(accepted, draft_tokens, delay, seen if seen is not None else [])
    with serving(handler, port=free_port(), name="sglang-stand-in") as served:
        yield served.url
