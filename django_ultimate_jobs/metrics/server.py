"""``runjobs --metrics-port``: serve one worker process's metrics over HTTP.

Imports ``prometheus_client``: imported only when the flag is given.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry

from .collect import FleetCollector, ProcessMetrics
from .errors import MetricsServeFailed

if TYPE_CHECKING:
    from ..worker.runner import Worker

__all__ = ["MetricsServer", "check_ports"]


class MetricsServer:
    """A worker process's metrics endpoint (``http://addr:port/metrics``).

    Its own registry: the process's metrics and the fleet's queue gauges,
    nothing of ``prometheus_client``'s default registry (a project that
    uses it serves its own). :meth:`stop` closes the socket and stops
    counting.
    """

    def __init__(self, worker: Worker, *, addr: str, port: int) -> None:
        self.registry = CollectorRegistry()
        self.metrics = ProcessMetrics(worker, self.registry)
        outage = worker.outage
        self.registry.register(
            FleetCollector(close_connections=True, reachable=lambda: not outage.down)
        )
        self.metrics.connect()
        try:
            self._httpd, self._thread = start_http_server(
                port, addr=addr, registry=self.registry
            )
        except OSError as error:
            self.metrics.disconnect()
            raise _cannot_serve(addr, port, error) from error
        bound = self._httpd.server_address[1]
        self.url = f"http://{addr if ':' not in addr else f'[{addr}]'}:{bound}/metrics"

    def stop(self) -> None:
        """Stop serving and counting."""
        self.metrics.disconnect()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def check_ports(addr: str, ports: Iterable[int]) -> None:
    """Raise ``MetricsServeFailed`` for the first of ``ports`` that cannot be bound.

    ``runjobs --processes N`` checks its children's ports (port + k) this
    way before it starts any: one taken port stops the start, instead of a
    child that fails over and over beside the others that run.
    """
    for port in ports:
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(
                addr, port, type=socket.SOCK_STREAM
            )[0]
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                # As the server binds (http.server reuses the address).
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(sockaddr)
        except OSError as error:
            raise _cannot_serve(addr, port, error) from error


def _cannot_serve(addr: str, port: int, error: OSError) -> MetricsServeFailed:
    return MetricsServeFailed(
        f"runjobs could not serve metrics on {addr}:{port}: {error.strerror or error}",
        meta={"addr": addr, "port": port},
    )
