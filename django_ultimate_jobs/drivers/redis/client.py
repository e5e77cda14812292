"""The ``redis`` client, imported lazily: the package works without it.

``redis`` is the optional extra ``django-ultimate-jobs[redis]``; choosing
the Redis driver without it is ``X_REDIS_CLIENT_MISSING``, naming the
extra. A standalone server and a Redis Cluster are told apart by asking
the server (``INFO cluster``), so one URL setting serves both.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .errors import RedisClientMissing

__all__ = ["connect", "redis_module", "session_client"]


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


def _options(module: ModuleType, *, retries: int) -> dict[str, Any]:
    retry = module.retry.Retry(module.backoff.NoBackoff(), retries)
    return {
        "decode_responses": True,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "retry": retry,
    }


def connect(url: str) -> tuple[Any, bool]:
    """The shared client of ``url`` and whether it talks to a Redis Cluster.

    The shared client is thread-safe (a connection pool) and retries a
    command once on a fresh connection when a pooled one was closed under
    it (a restarted server): every script of the driver is safe to run
    twice (enqueues carry their ids, settles are fenced).
    """
    module = redis_module()
    client = module.Redis.from_url(url, **_options(module, retries=1))
    if int(client.info("cluster").get("cluster_enabled", 0)) != 1:
        return client, False
    client.close()
    cluster = module.cluster.RedisCluster.from_url(
        url, decode_responses=True, socket_keepalive=True
    )
    return cluster, True


def session_client(url: str, name: str) -> Any:
    """One connection of its own, named ``name`` (``CLIENT SETNAME``), that
    never retries on its own: a worker role's session (:mod:`.sessions`)
    reports a loss and paces the retry with every other role."""
    module = redis_module()
    return module.Redis.from_url(
        url,
        client_name=name,
        single_connection_client=True,
        **_options(module, retries=0),
    )
