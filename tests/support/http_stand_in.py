"""The one way the tests stand in for a service on the network: an HTTP server on 127.0.0.1
(a port of its own, or one the test chooses) answered by a handler the stand-in defines.

Every stand-in (the Hugging Face Hub and its CDN and CAS, GitHub's release API, Lemonade 11.x,
SGLang, a paced llama-server stream, the small ones inside tests) is built on it:

    class Handler(StandInHandler):
        def do_GET(self):
            self.reply_json(200, {"ok": True})

    with serving(Handler) as served:
        urllib.request.urlopen(served.url + "/")

or, for a stand-in that starts and stops with an object of its own, ``served = start(Handler)``
and ``served.stop()``. Requests are answered on threads (daemon threads: a client that goes
away never holds up the end of a test); the server's own log lines are not printed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StandInHandler(BaseHTTPRequestHandler):
    """A handler that speaks HTTP/1.1 (keep-alive, as the real services do) and is quiet."""

    protocol_version = "HTTP/1.1"
    # a reply's headers and body go out in two writes: without this a small body waits for the
    # client's delayed ACK (40 ms) on a kept-alive connection
    disable_nagle_algorithm = True

    def log_message(self, *args: object) -> None:
        pass

    def body(self) -> bytes:
        """The request's body (empty without ``Content-Length``)."""
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def json_body(self) -> Any:
        raw = self.body()
        return json.loads(raw) if raw else None

    def reply(self, code: int, body: bytes | str = b"", headers: dict[str, str] | None = None,
              *, content_type: str = "text/plain") -> None:
        """Answer ``code`` with ``body`` and its length (``headers`` added, or overriding the
        content type)."""
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        fields = {"Content-Type": content_type, **(headers or {})}
        for key, value in fields.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def reply_json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self.reply(code, json.dumps(payload), headers, content_type="application/json")


class Served:
    """A running stand-in: its address, and :meth:`stop`."""

    def __init__(self, server: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self.server, self._thread = server, thread
        self.host, self.port = server.server_address[0], server.server_address[1]
        self.url = f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


def start(handler: type[BaseHTTPRequestHandler], *, port: int = 0, host: str = "127.0.0.1",
          name: str = "stand-in") -> Served:
    """Serve ``handler`` on ``host:port`` (0: a free port) until :meth:`Served.stop`."""
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name=name, daemon=True)
    thread.start()
    return Served(server, thread)


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], *, port: int = 0, host: str = "127.0.0.1",
            name: str = "stand-in") -> Iterator[Served]:
    """Serve ``handler`` for the ``with`` block."""
    served = start(handler, port=port, host=host, name=name)
    try:
        yield served
    finally:
        served.stop()
