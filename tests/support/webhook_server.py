"""A scripted HTTP endpoint on loopback, for the webhook sender's tests.

Runs in a thread of the test process. Each request is recorded (method,
path, headers, body) and answered by the next step of its script (default
200): a status with headers, or a delay first (a slow endpoint). HTTP/1.1
with keep-alive, as a real receiver answers.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["HookServer", "Received", "Reply"]


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    delay_s: float = 0.0


@dataclass(frozen=True)
class Received:
    """One request the endpoint got."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are two writes: without TCP_NODELAY the body waits
    # for the client's delayed ACK of the headers (tens of ms a request).
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.owner._record(
            Received("POST", self.path, headers, body, time.monotonic())
        )
        reply = self.server.owner._next()
        if reply.delay_s:
            self.server.owner.release.wait(reply.delay_s)
        try:
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
        except OSError:
            pass  # the client gave up (a timeout test)

    do_GET = do_POST


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: HookServer


class HookServer:
    """``with HookServer() as server:`` -> ``server.url``, ``server.received``."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._server = _Server((host, 0), _Handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self.received: list[Received] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.release = threading.Event()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, then 200."""
        with self._lock:
            self._script.extend(replies)

    def _next(self) -> Reply:
        with self._lock:
            return self._script.popleft() if self._script else Reply()

    def _record(self, received: Received) -> None:
        with self._lock:
            self.received.append(received)

    def __enter__(self) -> HookServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
