"""The ``redis`` client, imported lazily: the package works without it.

``redis`` is the optional extra ``django-ultimate-jobs[redis]``; choosing
the Redis driver without it is ``X_REDIS_CLIENT_MISSING``, naming the
extra. A standalone server and a Redis Cluster are told apart by asking
the server (``INFO cluster``), so one URL setting serves both. With
Sentinels (:class:`Endpoint`), every connection asks them where the
primary is when it connects, and drops itself when the server it talks
to turns out to be a replica (a failover): the next call goes to the new
primary.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .errors import RedisClientMissing

__all__ = ["Endpoint", "connect", "redis_module", "session_client"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the driver's primary is: ``url``, or the Sentinels' ``service``.

    With ``sentinels`` the URL's host and port are not used; its database,
    user, password and scheme (``rediss://`` for TLS) are.
    """

    url: str
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = ""


def redis_module() -> ModuleType:
    """``import redis``, or the coded refusal naming the extra.

    Raises:
        RedisClientMissing: the ``redis`` package is not installed.
    """
    try:
        import redis
    except ImportError as error:
        raise RedisClientMissing(
            'ULTIMATE_JOBS["DRIVER"] is "redis", but the redis package is not '
            "installed (it is the optional extra [redis])",
            meta={"extra": "redis"},
        ) from error
    return redis


def _options(module: ModuleType, *, retries: int, unix: bool) -> dict[str, Any]:
    retry = module.retry.Retry(module.backoff.NoBackoff(), retries)
    options = {
        "decode_responses": True,
        "health_check_interval": 30,
        "retry": retry,
    }
    if not unix:  # a unix socket's connection takes no TCP keepalive
        options["socket_keepalive"] = True
    return options


def _client(endpoint: Endpoint, *, retries: int, **extra: Any) -> Any:
    module = redis_module()
    unix = endpoint.url.startswith("unix://")
    options = {**_options(module, retries=retries, unix=unix), **extra}
    if not endpoint.sentinels:
        return module.Redis.from_url(endpoint.url, **options)
    from redis.connection import SSLConnection, parse_url
    from redis.sentinel import (
        Sentinel,
        SentinelConnectionPool,
        SentinelManagedSSLConnection,
    )

    single = options.pop("single_connection_client", False)
    parsed = parse_url(endpoint.url)
    for key in ("host", "port", "path"):
        parsed.pop(key, None)
    if parsed.pop("connection_class", None) is SSLConnection:
        parsed["connection_class"] = SentinelManagedSSLConnection
    sentinel = Sentinel(list(endpoint.sentinels), socket_timeout=2.0)
    pool = SentinelConnectionPool(
        endpoint.service, sentinel, is_master=True, **parsed, **options
    )
    client = module.Redis(connection_pool=pool, single_connection_client=single)
    client.auto_close_connection_pool = True
    return client


def connect(endpoint: Endpoint) -> tuple[Any, bool]:
    """The shared client of ``endpoint`` and whether it is a Redis Cluster.

    The shared client is thread-safe (a connection pool) and retries a
    command once on a fresh connection when a pooled one was closed under
    it (a restarted server, a failover): every script of the driver is safe
    to run twice (enqueues carry their ids, settles are fenced).
    """
    client = _client(endpoint, retries=1)
    if endpoint.sentinels:
        return client, False
    if int(client.info("cluster").get("cluster_enabled", 0)) != 1:
        return client, False
    client.close()
    cluster = redis_module().cluster.RedisCluster.from_url(
        endpoint.url, decode_responses=True, socket_keepalive=True
    )
    return cluster, True


def session_client(endpoint: Endpoint, name: str) -> Any:
    """One connection of its own, named ``name`` (``CLIENT SETNAME``), that
    never retries on its own: a worker role's session (:mod:`.sessions`)
    reports a loss and paces the retry with every other role."""
    return _client(endpoint, retries=0, client_name=name, single_connection_client=True)
