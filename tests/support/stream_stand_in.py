"""A llama-server stand-in for the streaming completion API, whose pace a test sets.

It answers ``GET /health``, ``GET /props``, ``POST /apply-template`` and a streamed
``POST /completion`` in llama-server's own event shape (``data: {...}`` lines; partials with
``content``, ``tokens``, ``tokens_predicted`` and, with ``timings_per_token``, running
``timings``; a final event with ``stop: true``, ``stop_type`` and ``timings``). A token takes
``delay`` seconds until ``slow_after`` tokens were sent, then ``slow_delay`` seconds: a
server whose throughput collapses mid-stream. Only the internet-free part of the real server
is stood in for; the real server's behaviour is tested against the real binary elsewhere.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from support.http_stand_in import StandInHandler, serving
from support.server import free_port


@dataclass
class Pace:
    delay: float = 0.001
    slow_after: int | None = None
    slow_delay: float = 0.005


def _handler(pace: Pace):
    class Handler(StandInHandler):
        def _json(self, code: int, payload) -> None:
            self.reply_json(code, payload)

        def do_GET(self):  # noqa: N802
            if self.path == "/health":
                self._json(200, {"status": "ok"})
            elif self.path == "/props":
                self._json(200, {"total_slots": 1, "build_info": "stand-in", "model_path": "/nonexistent.gguf"})
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self):  # noqa: N802
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/apply-template":
                self._json(200, {"prompt": "<user>" + request["messages"][0]["content"] + "<model>"})
                return
            if self.path != "/completion":
                self._json(404, {"error": "not found"})
                return
            n = int(request["n_predict"])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            start = time.monotonic()
            first = None

            def send(event: dict) -> None:
                data = b"data: " + json.dumps(event).encode() + b"\n\n"
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            # each token is due at a fixed time from the start, so that a late wake-up on a
            # busy host is caught up by the next tokens rather than slowing the whole stream
            due = start
            for i in range(n):
                slow = pace.slow_after is not None and i >= pace.slow_after
                due += pace.slow_delay if slow else pace.delay
                time.sleep(max(0.0, due - time.monotonic()))
                first = first or time.monotonic()
                elapsed = (time.monotonic() - first) * 1000
                send({"content": " w", "tokens": [100 + i % 7], "stop": False, "tokens_predicted": i + 1,
                      "timings": {"predicted_n": i + 1, "predicted_ms": elapsed}})
            ms = (time.monotonic() - (first or start)) * 1000
            send({"content": "", "tokens": [], "stop": True, "stop_type": "limit",
                  "timings": {"predicted_n": n, "predicted_ms": ms,
                              "predicted_per_second": n / ms * 1000 if ms else 0.0}})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


@contextmanager
def stream_stand_in(pace: Pace) -> Iterator[str]:
    """Serve on 127.0.0.1:<free port> until the block ends; yields the base URL."""
    with serve_on(free_port(), pace) as url:
        yield url


@contextmanager
def serve_on(port: int, pace: Pace) -> Iterator[str]:
    """Serve on 127.0.0.1:``port`` until the block ends; yields the base URL."""
    with serving(_handler(pace), port=port, name="stream-stand-in") as served:
        yield served.url
