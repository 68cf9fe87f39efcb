"""A client for llama-server's own completion API (``POST /completion``), streaming.

Every streamed event is timestamped on arrival. With ``timings_per_token`` each event also
carries the server's running counters (``draft_n``, ``draft_n_accepted``), so the tokens of
one verification step can be grouped: a step's draft is counted when it is made, before the
step's tokens are sent, so every rise of ``draft_n`` opens a new step. That gives the tokens
drafted and accepted per step, which ``timings`` alone (totals only) cannot.

SGLang (an SGLang route) is spoken to through its OpenAI-compatible ``POST /v1/completions``,
streamed, with SGLang's own ``return_spec_tokens_details``: after the last text chunk it sends
``sglext.spec_tokens_details`` (``spec_verify_ct`` verification steps, ``spec_num_proposed_drafts``
and ``spec_num_correct_drafts``, ``spec_accept_length`` = completion tokens per step, the bonus
token included) and, with ``stream_options.include_usage``, the ``usage`` chunk
(sglang ``srt/entrypoints/openai/serving_completions.py``, ``protocol.py``: ``SpecTokensDetails``).
Those are totals per request, so a generation from SGLang has no per-step list: its
``timings`` carry ``draft_n`` / ``draft_n_accepted`` (proposed / correct drafts) and
``spec_verify_ct``. A server is told to be SGLang by its ``GET /model_info`` (``model_path``),
which llama-server does not serve. ``return_token_ids`` gives each chunk's token ids, so the
tokens a verification step accepted together arrive together in the timing.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from ojai_setup.core.errors import RemoteError

#: how often a server on this machine is asked whether it is ready while it loads: a request
#: to 127.0.0.1 costs well under a millisecond, and a server that is ready waits half the
#: interval on average before it is seen
POLL_S = 0.1

__all__ = ["ClientError", "Endpoint", "Generation", "SpecCounters", "parse_spec_metrics"]


class ClientError(RemoteError):
    """The server did not answer, or answered with an error."""


@dataclass
class Generation:
    """One completion as the harness saw it."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    #: arrival time (seconds after the request was sent) of every generated token
    token_times: list[float] = field(default_factory=list)
    #: (tokens drafted, tokens accepted) per verification step, from the streamed counters
    steps: list[tuple[int, int]] = field(default_factory=list)
    timings: dict[str, Any] = field(default_factory=dict)
    stop_type: str | None = None
    wall_s: float = 0.0
    started: float = 0.0  # time.monotonic() when the request was sent

    @property
    def n(self) -> int:
        return int(self.timings.get("predicted_n") or len(self.token_times))

    @property
    def server_tps(self) -> float | None:
        """Decode tokens/s as the server measured it (``timings.predicted_per_second``)."""
        v = self.timings.get("predicted_per_second")
        return float(v) if v else None

    @property
    def harness_tps(self) -> float | None:
        """Decode tokens/s from arrival times: the tokens after the first over the time from
        the first token's arrival to the last's."""
        if len(self.token_times) < 2:
            return None
        dt = self.token_times[-1] - self.token_times[0]
        return (len(self.token_times) - 1) / dt if dt > 0 else None

    @property
    def draft_n(self) -> int | None:
        return self.timings.get("draft_n")

    @property
    def draft_n_accepted(self) -> int | None:
        return self.timings.get("draft_n_accepted")


METRIC_PREFIX = "llamacpp:spec_decode_"


@dataclass(frozen=True)
class SpecCounters:
    """llama-server's speculation counters (``/metrics``, build 11434 and later):
    verification steps (``num_drafts``), drafted and accepted tokens, and the accepted tokens
    per draft position (``position`` 0 is the first drafted token)."""

    drafts: int
    draft_tokens: int
    accepted: int
    per_position: tuple[int, ...] = ()

    def minus(self, before: SpecCounters | None) -> SpecCounters:
        if before is None:
            return self
        width = max(len(self.per_position), len(before.per_position))
        mine = self.per_position + (0,) * (width - len(self.per_position))
        theirs = before.per_position + (0,) * (width - len(before.per_position))
        return SpecCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                            self.accepted - before.accepted,
                            tuple(a - b for a, b in zip(mine, theirs, strict=True)))


_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)')


def parse_spec_metrics(text: str) -> SpecCounters | None:
    """The speculation counters in a Prometheus text exposition; None when it has none."""
    totals: dict[str, float] = {}
    positions: dict[int, float] = {}
    for line in text.splitlines():
        if not line.startswith(METRIC_PREFIX):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m["value"])
        except ValueError:
            continue
        name = m["name"][len(METRIC_PREFIX):]
        if name == "num_accepted_tokens_per_pos_total":
            pos = re.search(r'position="(\d+)"', m["labels"] or "")
            if pos:
                positions[int(pos[1])] = value
        else:
            totals[name] = value
    need = ("num_drafts_total", "num_draft_tokens_total", "num_accepted_tokens_total")
    if not all(k in totals for k in need):
        return None
    width = max(positions) + 1 if positions else 0
    return SpecCounters(drafts=int(totals["num_drafts_total"]),
                        draft_tokens=int(totals["num_draft_tokens_total"]),
                        accepted=int(totals["num_accepted_tokens_total"]),
                        per_position=tuple(int(positions.get(i, 0)) for i in range(width)))


class Endpoint:
    """One llama-server, by its base URL (``http://127.0.0.1:8080``)."""

    def __init__(self, url: str, *, timeout: float = 600.0, api_key: str | None = None,
                 model: str | None = None) -> None:
        parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        if parsed.scheme != "http" or not parsed.hostname:
            raise ClientError(f"{url}: expected an http://HOST:PORT address")
        self.url = f"http://{parsed.hostname}:{parsed.port or 80}"
        self.host = parsed.hostname
        self.port = parsed.port or 80
        self.timeout = timeout

        self._kind: str | None = None
        #: sent as ``Authorization: Bearer`` (llama-server's --api-key, SGLang's --api-key)
        self.api_key = api_key
        #: a route of a llama-server in router mode: named in every request (the ``model``
        #: field of a POST body, ``?model=`` on a GET), which selects (and loads) it
        self.model = model

    def _routed(self, path: str) -> str:
        """``path`` with the route's ``?model=`` for a router (unchanged otherwise)."""
        if not self.model:
            return path
        return f"{path}?model={urllib.parse.quote(self.model, safe='')}"

    def _headers(self, **extra: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **extra}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def __repr__(self) -> str:
        return f"Endpoint({self.url}{' ' + self.model if self.model else ''})"

    @property
    def kind(self) -> str:
        """``sglang`` or ``llama-server``: asked once (``GET /model_info``)."""
        if self._kind is None:
            try:
                status, body = self._json("GET", "/model_info", timeout=10)
            except ClientError:
                status, body = 0, None
            self._kind = ("sglang" if status == 200 and isinstance(body, dict)
                          and "model_path" in body else "llama-server")
            if self._kind == "sglang":
                self._model_info = body
        return self._kind

    def _conn(self, timeout: float | None = None) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)

    def _json(self, method: str, path: str, payload: dict | None = None,
              timeout: float | None = None) -> tuple[int, Any]:
        conn = self._conn(timeout)
        try:
            if payload is not None and self.model and method == "POST":
                payload = {"model": self.model, **payload}
            body = json.dumps(payload).encode() if payload is not None else None
            conn.request(method, path, body=body, headers=self._headers())
            resp = conn.getresponse()
            raw = resp.read()
        except OSError as exc:
            raise ClientError(f"{self.url}{path}: {exc}") from None
        finally:
            conn.close()
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, raw.decode("utf-8", "replace")

    def health(self, timeout: float = 5.0) -> tuple[int, str]:
        """``GET /health``: the status (0 when nothing answers) and the body."""
        try:
            status, body = self._json("GET", "/health", timeout=timeout)
        except ClientError as exc:
            return 0, str(exc)
        return status, json.dumps(body) if not isinstance(body, str) else body

    def wait_healthy(self, timeout: float, *, alive=lambda: True) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            status, last = self.health()
            if status == 200:
                return
            if not alive():
                raise ClientError(f"{self.url}: the server exited before it was healthy ({last})")
            if time.monotonic() > deadline:
                raise ClientError(f"{self.url}: /health not 200 after {timeout:.0f} s (last: {status or 'no answer'} {last})")
            time.sleep(POLL_S)

    def props(self) -> dict[str, Any]:
        """``GET /props`` (build, model path, slots); empty when the server has none. From
        SGLang: its ``/model_info`` model path."""
        if self.kind == "sglang":
            info = getattr(self, "_model_info", {}) or {}
            return {"model_path": info.get("model_path"), "build_info": "SGLang"}
        try:
            status, body = self._json("GET", self._routed("/props"), timeout=10)
        except ClientError:
            return {}
        return body if status == 200 and isinstance(body, dict) else {}

    def metrics(self) -> SpecCounters | None:
        """The speculation counters of ``GET /metrics`` (Prometheus text; llama-server serves it
        only with ``--metrics``); None when the server has no such endpoint or no counters."""
        conn = self._conn(10)
        try:
            conn.request("GET", self._routed("/metrics"))
            resp = conn.getresponse()
            raw = resp.read().decode("utf-8", "replace")
        except OSError:
            return None
        finally:
            conn.close()
        if resp.status != 200:
            return None
        return parse_spec_metrics(raw)

    def speculative_slots(self) -> bool | None:
        """Whether the server's slots draft (``GET /slots``: ``"speculative"``); None when it
        does not say."""
        try:
            status, body = self._json("GET", self._routed("/slots"), timeout=10)
        except ClientError:
            return None
        if status != 200 or not isinstance(body, list) or not body:
            return None
        flags = [s.get("speculative") for s in body if isinstance(s, dict)]
        if not flags or any(not isinstance(f, bool) for f in flags):
            return None
        return any(flags)

    def apply_template(self, prompt: str) -> str | None:
        """The prompt as one user turn in the model's chat template (``POST /apply-template``);
        None when the server cannot do it (SGLang has no such endpoint)."""
        if self.kind == "sglang":
            return None
        try:
            status, body = self._json("POST", "/apply-template",
                                      {"messages": [{"role": "user", "content": prompt}]}, timeout=30)
        except ClientError:
            return None
        if status == 200 and isinstance(body, dict) and isinstance(body.get("prompt"), str):
            return body["prompt"]
        return None

    def complete(self, prompt: str, *, n_predict: int, seed: int, temperature: float | None,
                 ignore_eos: bool, extra: dict | None = None, on_token=None) -> Generation:
        """Stream one completion; ``on_token(generation)`` is called after every event."""
        if self.kind == "sglang":
            return self._complete_sglang(prompt, n_predict=n_predict, seed=seed,
                                         temperature=temperature, ignore_eos=ignore_eos,
                                         on_token=on_token)
        payload = {"prompt": prompt, "n_predict": n_predict, "seed": seed,
                   **({} if temperature is None else {"temperature": temperature}),
                   "ignore_eos": ignore_eos, "stream": True,
                   "timings_per_token": True, "return_tokens": True, "cache_prompt": False,
                   **({"model": self.model} if self.model else {}), **(extra or {})}
        gen = Generation()
        conn = self._conn()
        prev_dn = prev_acc = 0
        try:
            gen.started = t0 = time.monotonic()
            conn.request("POST", "/completion", body=json.dumps(payload).encode(),
                         headers=self._headers(Accept="text/event-stream"))
            resp = conn.getresponse()
            if resp.status != 200:
                raise ClientError(f"{self.url}/completion answered {resp.status}: "
                                  f"{resp.read().decode('utf-8', 'replace')[:300]}")
            parts: list[str] = []
            while True:
                line = resp.readline()
                if not line:
                    break
                now = time.monotonic() - t0
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    raise ClientError(f"{self.url}/completion: {event['error']}")
                parts.append(event.get("content") or "")
                toks = event.get("tokens") or []
                gen.tokens.extend(toks)
                if not event.get("stop"):
                    # one partial is one token (several when a token's text was held back)
                    gen.token_times.extend([now] * max(1, len(toks)))
                timings = event.get("timings") or {}
                dn, acc = timings.get("draft_n") or 0, timings.get("draft_n_accepted") or 0
                if dn > prev_dn and not event.get("stop"):
                    gen.steps.append((dn - prev_dn, acc - prev_acc))
                    prev_dn, prev_acc = dn, acc
                elif acc > prev_acc and gen.steps and not event.get("stop"):
                    d, k = gen.steps[-1]
                    gen.steps[-1] = (d, k + acc - prev_acc)
                    prev_acc = acc
                if event.get("stop"):
                    gen.timings = timings
                    gen.stop_type = event.get("stop_type")
                    break
                if on_token is not None:
                    on_token(gen)
            gen.text = "".join(parts)
            gen.wall_s = time.monotonic() - t0
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise ClientError(f"{self.url}/completion: {exc}") from None
        finally:
            conn.close()
        if not gen.timings:
            raise ClientError(f"{self.url}/completion: the stream ended without a final event")
        return gen

    def _complete_sglang(self, prompt: str, *, n_predict: int, seed: int, temperature: float,
                         ignore_eos: bool, on_token=None) -> Generation:
        model = (getattr(self, "_model_info", {}) or {}).get("served_model_name") or "default"
        payload = {"model": model, "prompt": prompt, "max_tokens": n_predict, "seed": seed,
                   "temperature": temperature, "ignore_eos": ignore_eos, "stream": True,
                   "stream_options": {"include_usage": True}, "return_spec_tokens_details": True,
                   "return_token_ids": True}
        gen = Generation()
        conn = self._conn()
        usage: dict = {}
        spec: dict = {}
        try:
            gen.started = t0 = time.monotonic()
            conn.request("POST", "/v1/completions", body=json.dumps(payload).encode(),
                         headers=self._headers(Accept="text/event-stream"))
            resp = conn.getresponse()
            if resp.status != 200:
                raise ClientError(f"{self.url}/v1/completions answered {resp.status}: "
                                  f"{resp.read().decode('utf-8', 'replace')[:300]}")
            parts: list[str] = []
            while True:
                line = resp.readline()
                if not line:
                    break
                now = time.monotonic() - t0
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                event = json.loads(data)
                if "error" in event or event.get("object") == "error":
                    raise ClientError(f"{self.url}/v1/completions: "
                                      f"{event.get('error') or event.get('message')}")
                for choice in event.get("choices") or []:
                    text = choice.get("text") or ""
                    ids = choice.get("token_ids") or []
                    parts.append(text)
                    gen.tokens.extend(ids)
                    if ids or text:  # a verification step's accepted tokens come in one chunk
                        gen.token_times.extend([now] * max(1, len(ids)))
                    if choice.get("finish_reason"):
                        gen.stop_type = choice["finish_reason"]
                details = (event.get("sglext") or {}).get("spec_tokens_details")
                if isinstance(details, list):
                    details = details[0] if details else None
                if isinstance(details, dict):
                    spec = details
                if event.get("usage"):
                    usage = event["usage"]
                if on_token is not None and event.get("choices"):
                    on_token(gen)
            gen.text = "".join(parts)
            gen.wall_s = time.monotonic() - t0
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise ClientError(f"{self.url}/v1/completions: {exc}") from None
        finally:
            conn.close()
        if not usage:
            raise ClientError(f"{self.url}/v1/completions: the stream ended without its usage chunk")
        gen.timings = {"predicted_n": usage.get("completion_tokens"),
                       "prompt_n": usage.get("prompt_tokens")}
        if spec.get("spec_verify_ct"):
            gen.timings.update(draft_n=spec.get("spec_num_proposed_drafts"),
                               draft_n_accepted=spec.get("spec_num_correct_drafts"),
                               spec_verify_ct=spec.get("spec_verify_ct"),
                               spec_accept_length=spec.get("spec_accept_length"))
        return gen
