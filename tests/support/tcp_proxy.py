"""A TCP proxy in front of PostgreSQL, to take the database away and bring it back.

A worker pointed at ``proxy.url_for(database)`` reaches the real server
through this process, so a test can simulate an outage without touching
the server (the shared one on 5432 included):

- ``cut()`` resets every proxied connection at once (both sockets closed
  with SO_LINGER 0: the client reads a reset, as after a network cut or a
  killed server) and, until ``restore()``, resets every new connection right
  after accepting it, so a client's ``connect()`` fails fast with
  "server closed the connection unexpectedly". ``cut()`` returns once every
  connection is closed.
- Every accepted connection counts as an attempt, refused ones included:
  ``connection_attempts`` (the total), ``attempt_times`` (``time.monotonic()``
  stamps), ``attempts_between(t0, t1)`` and ``peak_attempt_rate(t0, t1)``
  (the most attempts in any 1 s window) for "at most 5 connection attempts
  a second during a 10 s outage".

A libpq connect is one TCP connection here, also a refused one with the
default ``sslmode=prefer`` (tests/test_support_pg.py pins it), so attempts
count the client's connects. While the server itself is down, connections
are accepted and reset the same way (and counted).

One accept thread, one thread per live connection (at most
``max_connections``; more are reset at once, and counted in ``overflowed``),
all polling their stop flags every 50 ms. ``stop()`` (or leaving the ``with``
block, or the ``tcp_proxy`` fixture's teardown) closes everything and joins
every thread. The target may be a TCP host or a Unix socket folder (a path:
the embedded server of scripts/devdb.py).
"""

from __future__ import annotations

import bisect
import selectors
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from urllib.parse import quote

import pytest

__all__ = ["ProxyFactory", "TcpProxy", "tcp_proxy"]

# How often blocked threads look at their stop flags: bounds how long cut()
# and stop() take.
POLL_S = 0.05
CHUNK = 64 * 1024
THREAD_PREFIX = "tcp-proxy"


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a reset (RST) instead of an orderly FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class _Pipe:
    """One proxied connection: a client socket, its upstream socket, a thread."""

    def __init__(self, client: socket.socket, upstream: socket.socket, name: str):
        self.client = client
        self.upstream = upstream
        self.abort = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        peer = {self.client: self.upstream, self.upstream: self.client}
        with selectors.DefaultSelector() as selector:
            for sock in peer:
                selector.register(sock, selectors.EVENT_READ)
            try:
                while not self.abort.is_set():
                    for key, _ in selector.select(POLL_S):
                        source: socket.socket = key.fileobj  # type: ignore[assignment]
                        data = source.recv(CHUNK)
                        if not data:
                            return  # one side hung up: close both
                        peer[source].sendall(data)
            except OSError:
                return  # a reset, or the other thread shut a socket down
            finally:
                close = _reset if self.abort.is_set() else socket.socket.close
                for sock in peer:
                    close(sock)

    def unblock(self) -> None:
        """Wake a thread stuck in ``sendall`` (its peer stopped reading)."""
        for sock in (self.client, self.upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class TcpProxy:
    """A proxy on 127.0.0.1:<free port> to a PostgreSQL server (module docstring)."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        user: str = "postgres",
        max_connections: int = 128,
        connect_timeout: float = 2.0,
    ):
        self.target_host = target_host
        self.target_port = target_port
        self.user = user
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.host = "127.0.0.1"
        self.port = 0
        self.overflowed = 0
        self._times: list[float] = []
        self._pipes: list[_Pipe] = []
        self._lock = threading.Lock()
        self._cut = False
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None

    @classmethod
    def for_settings(
        cls, settings: Mapping[str, object], **options: object
    ) -> TcpProxy:
        """A proxy to the server of a Django ``DATABASES`` entry."""
        return cls(
            str(settings.get("HOST") or "127.0.0.1"),
            int(str(settings.get("PORT") or 5432)),
            user=str(settings.get("USER") or "postgres"),
            **options,  # type: ignore[arg-type]
        )

    def __repr__(self) -> str:
        state = "cut" if self._cut else "open"
        return (
            f"<TcpProxy {self.host}:{self.port} -> {self.target_host}:"
            f"{self.target_port} {state}, {self.open_connections} open>"
        )

    def url_for(self, database: str) -> str:
        """A DATABASE_URL for ``database`` through this proxy."""
        return (
            f"postgresql://{quote(self.user)}@{self.host}:{self.port}/{quote(database)}"
        )

    # ------------------------------------------------------------------
    # life cycle
    # ------------------------------------------------------------------

    def start(self) -> TcpProxy:
        """Listen on a free port and start forwarding."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._acceptor = threading.Thread(
            target=self._accept_loop,
            name=f"{THREAD_PREFIX}-{self.port}-accept",
            daemon=True,
        )
        self._acceptor.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Close every connection and the listener; join every thread."""
        self._stopping.set()
        if self._acceptor is not None:
            self._acceptor.join(timeout)
        if self._listener is not None:
            self._listener.close()
        self._close_all(timeout)

    def threads(self) -> list[threading.Thread]:
        """This proxy's threads still alive (empty after ``stop()``)."""
        prefix = f"{THREAD_PREFIX}-{self.port}-"
        return [t for t in threading.enumerate() if t.name.startswith(prefix)]

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------
    # faults
    # ------------------------------------------------------------------

    def cut(self, timeout: float = 5.0) -> None:
        """Reset every connection and refuse new ones until ``restore()``."""
        with self._lock:
            self._cut = True
        self._close_all(timeout)

    def restore(self) -> None:
        """Forward new connections again."""
        with self._lock:
            self._cut = False

    @property
    def is_cut(self) -> bool:
        return self._cut

    # ------------------------------------------------------------------
    # counters
    # ------------------------------------------------------------------

    @property
    def connection_attempts(self) -> int:
        """Connections accepted so far, forwarded or refused."""
        return len(self._times)

    @property
    def attempt_times(self) -> list[float]:
        """When each connection was accepted (``time.monotonic()``)."""
        with self._lock:
            return list(self._times)

    @property
    def open_connections(self) -> int:
        """Connections being forwarded right now."""
        with self._lock:
            return sum(p.thread.is_alive() for p in self._pipes)

    def attempts_between(self, start: float, end: float) -> int:
        """Attempts accepted in ``[start, end)`` (monotonic times)."""
        times = self.attempt_times
        return bisect.bisect_left(times, end) - bisect.bisect_left(times, start)

    def peak_attempt_rate(self, start: float, end: float, window: float = 1.0) -> int:
        """The most attempts in any ``window`` seconds within ``[start, end)``."""
        times = [t for t in self.attempt_times if start <= t < end]
        peak, first = 0, 0
        for last, stamp in enumerate(times):
            while stamp - times[first] >= window:
                first += 1
            peak = max(peak, last - first + 1)
        return peak

    # ------------------------------------------------------------------
    # internals
    # ------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            while not self._stopping.is_set():
                if not selector.select(POLL_S):
                    continue
                try:
                    client, _ = self._listener.accept()
                except OSError:
                    continue
                self._admit(client)

    def _admit(self, client: socket.socket) -> None:
        with self._lock:
            self._times.append(time.monotonic())
            self._pipes = [p for p in self._pipes if p.thread.is_alive()]
            refuse = self._cut or len(self._pipes) >= self.max_connections
            if not self._cut and refuse:
                self.overflowed += 1
        if refuse:
            _reset(client)
            return
        try:
            upstream = self._connect_upstream()
        except OSError:
            _reset(client)  # the server is down: the client sees a reset too
            return
        name = f"{THREAD_PREFIX}-{self.port}-pipe-{len(self._times)}"
        pipe = _Pipe(client, upstream, name)
        with self._lock:
            if self._cut:  # cut() ran while we connected upstream
                _reset(client)
                _reset(upstream)
                return
            self._pipes.append(pipe)
            pipe.thread.start()

    def _connect_upstream(self) -> socket.socket:
        if self.target_host.startswith("/"):  # a Unix socket folder
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.settimeout(self.connect_timeout)
            try:
                upstream.connect(f"{self.target_host}/.s.PGSQL.{self.target_port}")
            except OSError:
                upstream.close()
                raise
        else:
            upstream = socket.create_connection(
                (self.target_host, self.target_port), self.connect_timeout
            )
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.settimeout(None)
        return upstream

    def _close_all(self, timeout: float) -> None:
        """Abort every pipe and wait (with a deadline) for its thread to end."""
        with self._lock:
            pipes, self._pipes = self._pipes, []
        for pipe in pipes:
            pipe.abort.set()
        deadline = time.monotonic() + timeout
        for pipe in pipes:
            pipe.thread.join(max(0.0, deadline - time.monotonic()))
            if pipe.thread.is_alive():
                pipe.unblock()
                pipe.thread.join(1.0)
        stuck = [p.thread.name for p in pipes if p.thread.is_alive()]
        if stuck:
            raise RuntimeError(f"proxy threads did not end: {stuck}")


class ProxyFactory:
    """Starts proxies for one test and stops them all (the ``tcp_proxy`` fixture)."""

    def __init__(self) -> None:
        self.started: list[TcpProxy] = []

    def __call__(self, host: str, port: int, **options: object) -> TcpProxy:
        """A started proxy to ``host:port`` (options: ``TcpProxy``'s)."""
        return self._start(TcpProxy(host, port, **options))  # type: ignore[arg-type]

    def for_settings(self, settings: Mapping[str, object]) -> TcpProxy:
        """A started proxy to the server of a Django ``DATABASES`` entry."""
        return self._start(TcpProxy.for_settings(settings))

    def _start(self, proxy: TcpProxy) -> TcpProxy:
        self.started.append(proxy)
        return proxy.start()

    def stop_all(self) -> None:
        """Stop every proxy; fail if one of their threads is still alive."""
        for proxy in self.started:
            proxy.stop()
        leaked = [t.name for proxy in self.started for t in proxy.threads()]
        assert not leaked, f"proxy threads outlived the test: {leaked}"


@pytest.fixture
def tcp_proxy() -> Iterator[ProxyFactory]:
    """Start proxies; every one stops (threads joined) when the test ends.

    ``tcp_proxy(host, port)``, or ``tcp_proxy.for_settings(settings_dict)``
    for the server of a Django connection (the test database's).
    """
    factory = ProxyFactory()
    try:
        yield factory
    finally:
        factory.stop_all()
