"""The sender's HTTP client: one POST to a vetted address, every wait bounded.

Built on urllib3 (the ``webhooks`` extra, imported on first use): its
connection classes take the address to connect to and, separately, the
name TLS sends as SNI and checks the certificate against
(``server_hostname``), so a request goes to the address the screen approved
while the certificate is still checked for the endpoint's hostname, and
nothing resolves the name a second time. The exchange itself goes through
the ``http.client`` methods those classes inherit (:func:`_exchange`), not
urllib3's ``request()``/``getresponse()`` layer, which is made for its pools
and cost about a quarter of the POST.

Time is bounded three ways: the TCP connect (and TLS handshake) by
``connect_timeout_s``; every socket wait by what is left of ``timeout_s``;
and the whole exchange by ``timeout_s``, through a watchdog that shuts the
socket down at the deadline (a server dripping one header byte at a time
would otherwise reset the per-read timeout forever). Redirects are never
followed (this client does not know how); the response body is read, up to
64 KiB, only so the connection can be kept, and then dropped.
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import logging
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .addresses import IPAddress, Target
from .errors import WebhookClientMissing

__all__ = ["PinnedClient", "RequestFailed", "Response", "load_urllib3"]

logger = logging.getLogger("django_ultimate_jobs")

USER_AGENT = "django-ultimate-jobs-webhooks"
MAX_DRAIN_BYTES = 64 * 1024
"""Response bytes read to keep a connection; a longer body closes it."""
MAX_IDLE_CONNECTIONS = 64
"""Kept-alive connections per thread (least recently used dropped first)."""


def load_urllib3() -> Any:
    """The urllib3 module, or ``X_WEBHOOK_CLIENT_MISSING`` naming the extra."""
    try:
        import urllib3
    except ImportError:
        raise WebhookClientMissing(
            "sending webhooks needs urllib3, which is not installed"
        ) from None
    return urllib3


@dataclass(frozen=True, slots=True)
class Response:
    """What the sender keeps of an answer: never its body."""

    status: int
    retry_after: str | None
    duration_ms: int


class RequestFailed(Exception):
    """No response: ``kind`` is ``timeout``, ``connect``, ``tls`` or ``protocol``."""

    def __init__(self, kind: str, detail: str, duration_ms: int) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.duration_ms = duration_ms


class _Watchdog:
    """One daemon thread that runs callbacks at deadlines (cheap to arm)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._armed: set[int] = set()
        """Tokens still to fire: a disarmed entry stays in the heap until it
        reaches the top, then is dropped unfired."""
        self._ids = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, deadline: float, callback: Callable[[], None]) -> int:
        with self._wake:
            token = next(self._ids)
            heapq.heappush(self._heap, (deadline, token, callback))
            self._armed.add(token)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="uj-webhook-watchdog", daemon=True
                )
                self._thread.start()
            elif self._heap[0][1] == token:
                self._wake.notify()
            return token

    def disarm(self, token: int) -> None:
        with self._wake:
            self._armed.discard(token)

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._wake.wait(30.0)
                    continue
                deadline, token, callback = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._heap)
                self._armed.discard(token)
            try:
                callback()
            except Exception:  # a callback must not stop the watchdog
                logger.exception("jobs.webhook.watchdog-failed")


_WATCHDOG = _Watchdog()
_FIRED, _FINISHED = 0, 1
"""A request's flags: its abort shut the socket; it ended (an abort is late)."""


def _shutdown(sock: Any) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class PinnedClient:
    """POSTs to an address the screen approved, keeping connections per thread.

    Args:
        connect_timeout_s: the TCP connect and TLS handshake ceiling.
        timeout_s: the whole request's ceiling (connect included).
        ssl_context: the TLS context (default: urllib3's, verifying against
            the system's certificates); tests pass one trusting their CA.
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._urllib3 = load_urllib3()
        self.connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s
        self.ssl_context = ssl_context
        self._local = threading.local()

    def _pool(self) -> OrderedDict[tuple[str, str, int, str], Any]:
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = OrderedDict()
        return pool

    def close(self) -> None:
        """Close this thread's kept connections."""
        pool = self._pool()
        while pool:
            pool.popitem()[1].close()

    def _connection(self, target: Target, address: IPAddress, timeout: float) -> Any:
        connection_module = self._urllib3.connection
        if target.scheme == "https":
            return connection_module.HTTPSConnection(
                str(address),
                target.port,
                timeout=timeout,
                server_hostname=target.host,
                ssl_context=self.ssl_context,
            )
        return connection_module.HTTPConnection(
            str(address), target.port, timeout=timeout
        )

    def post(
        self,
        target: Target,
        address: IPAddress,
        headers: Mapping[str, str],
        body: bytes,
        *,
        on_abort: Callable[[Callable[[], None]], None] | None = None,
    ) -> Response:
        """POST ``body`` to ``target`` at ``address``; answer status and timing.

        ``on_abort`` receives a function that shuts the request down (the
        sender hands it to the attempt's cancellation token).

        Raises:
            RequestFailed: no response came (timeout, refused connection,
                TLS failure, a broken answer).
        """
        started = time.monotonic()
        deadline = started + self.timeout_s
        key = (target.scheme, str(address), target.port, target.host)
        pool = self._pool()
        conn = pool.pop(key, None)
        if conn is not None and not conn.is_connected:
            conn.close()
            conn = None
        # [fired, finished]: set under ``guard`` (two Events cost more than
        # the watchdog they guard, per request).
        flags = [False, False]
        guard = threading.Lock()
        token = None
        try:
            if conn is None:
                conn = self._connection(
                    target, address, min(self.connect_timeout_s, self.timeout_s)
                )
                conn.connect()
            sock = conn.sock

            def abort() -> None:
                # A late call (the attempt's token cancelled after this
                # request ended) must not cut a kept connection now serving
                # another request.
                with guard:
                    if flags[_FINISHED]:
                        return
                    flags[_FIRED] = True
                _shutdown(sock)

            token = _WATCHDOG.arm(deadline, abort)
            if on_abort is not None:
                on_abort(abort)
            conn.timeout = max(0.001, deadline - time.monotonic())
            sock.settimeout(conn.timeout)
            # At http.client's level, which urllib3's connections are built
            # on (see _exchange).
            response = _exchange(
                conn,
                target.path,
                {
                    **headers,
                    "Host": target.host_header,
                    "User-Agent": USER_AGENT,
                    "Content-Length": str(len(body)),
                },
                body,
            )
            status = response.status
            retry_after = response.getheader("retry-after")
            keep = self._drain(response)
        except Exception as error:
            if conn is not None:
                conn.close()
            elapsed = int((time.monotonic() - started) * 1000)
            raise _failure(error, flags[_FIRED], elapsed) from None
        finally:
            with guard:
                flags[_FINISHED] = True
            if token is not None:
                _WATCHDOG.disarm(token)
        if keep and not flags[_FIRED]:
            pool[key] = conn
            while len(pool) > MAX_IDLE_CONNECTIONS:
                pool.popitem(last=False)[1].close()
        else:
            conn.close()
        return Response(
            status=status,
            retry_after=retry_after,
            duration_ms=int((time.monotonic() - started) * 1000),
        )

    @staticmethod
    def _drain(response: http.client.HTTPResponse) -> bool:
        """Read and drop the body; True when the connection may be kept."""
        if response.will_close:
            return False
        read = 0
        while True:
            chunk = response.read(16384)
            if not chunk:
                return True
            read += len(chunk)
            if read > MAX_DRAIN_BYTES:
                return False


def _exchange(
    conn: Any, path: str, headers: Mapping[str, str], body: bytes
) -> http.client.HTTPResponse:
    """POST on a connected urllib3 connection; answer http.client's response.

    urllib3's connections are ``http.client.HTTPConnection`` subclasses, and
    urllib3 builds its ``request()`` and ``getresponse()`` on those methods;
    its own layer (framing choices, a header map and a response object
    around http.client's, kept for its pools) was about a quarter of a
    delivery's POST and is skipped. The request on the wire is the same:
    the request line, ``Accept-Encoding: identity``, the headers in order,
    the body; http.client still refuses a header name or value that would
    break the framing. ``Host`` is the caller's (the connection's host is
    the vetted address).
    """
    conn.putrequest("POST", path, skip_host=True)
    for name, value in headers.items():
        conn.putheader(name, value)
    conn.endheaders(body)
    # http.client's response, not urllib3's wrapper around it (its
    # getresponse() override): the wrapper is the part that costs.
    return http.client.HTTPConnection.getresponse(conn)


def _failure(error: BaseException, timed_out: bool, elapsed_ms: int) -> RequestFailed:
    text = type(error).__name__
    if timed_out or isinstance(error, TimeoutError | socket.timeout):
        return RequestFailed("timeout", "no complete answer in time", elapsed_ms)
    if isinstance(error, ssl.SSLError | ssl.CertificateError):
        return RequestFailed("tls", f"TLS failed ({text})", elapsed_ms)
    name = text.lower()
    if "timeout" in name:
        return RequestFailed("timeout", "no complete answer in time", elapsed_ms)
    if "ssl" in name or "certificate" in name:
        return RequestFailed("tls", f"TLS failed ({text})", elapsed_ms)
    if isinstance(error, http.client.HTTPException) or "protocol" in name:
        return RequestFailed(
            "protocol", f"the answer was not HTTP ({text})", elapsed_ms
        )
    return RequestFailed("connect", f"the connection failed ({text})", elapsed_ms)
