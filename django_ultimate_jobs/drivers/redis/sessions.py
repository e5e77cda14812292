"""The Redis driver's sessions: one named connection per worker role.

``driver.sessions`` (:class:`RedisConnectivity`, the contract's
``Connectivity``). Each worker thread that talks to Redis (the claim
loop, the settler, the keeper, the scheduler, a lock keeper, an outbox
relay) opens a :class:`RedisSession`; :meth:`RedisSession.bind` gives the
thread a connection of its own, named ``uj:<role>:<pid>:<worker>`` (``CLIENT
SETNAME``, so ``CLIENT LIST`` tells which role is which, and a test can
``CLIENT KILL`` one), which every driver call from that thread uses. A
lost connection is reported to the process's outage tracker (logged once
per outage, retries paced on one schedule, as on PostgreSQL) and the next
call reconnects. On a Redis Cluster the sessions share the cluster
client (its connections are per node, not per role).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..outage import DatabaseOutage, StoreAddress, process_outage
from ..sessions import DjangoConnectivity
from .client import redis_module, session_client

if TYPE_CHECKING:
    from .store import RedisStore

__all__ = [
    "RedisConnectivity",
    "RedisSession",
    "is_unavailable",
    "redis_address",
    "role_name",
]

logger = logging.getLogger("django_ultimate_jobs")


def role_name(role: str, worker_id: str) -> str:
    """``uj:<role>:<pid>:<suffix>`` for a worker id ``host:pid:suffix`` (the
    name PostgreSQL's sessions give their connections too)."""
    tail = ":".join(worker_id.split(":")[-2:])
    return f"uj:{role}:{tail}"


_AWAY_TEXT = ("LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN")


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says Redis cannot serve now (gone, loading, a
    replica, a cluster without a slot's owner), not that a call is wrong."""
    try:
        exceptions = redis_module().exceptions
    except Exception:  # no client: nothing of it can have failed
        return False
    if isinstance(error, exceptions.ConnectionError | exceptions.TimeoutError):
        return True
    if isinstance(error, exceptions.ResponseError):
        return str(error).startswith(_AWAY_TEXT)
    return type(error).__name__ in {
        "ClusterDownError",
        "TryAgainError",
        "MasterDownError",
    }


def redis_address(url: str) -> StoreAddress:
    """Where ``REDIS_URL`` points (host, port; the password left out), and the fix."""
    parts = urlsplit(url)
    host = parts.hostname or parts.path or "localhost"
    port = str(parts.port or (6379 if parts.hostname else ""))
    return StoreAddress(
        store="the Redis server (ULTIMATE_JOBS['REDIS_URL'])",
        host=host,
        port=port,
        database=parts.path.lstrip("/") if parts.hostname else "",
        fix="check ULTIMATE_JOBS['REDIS_URL'], and that a Redis server is up "
        f"and accepts connections at {host}:{port}",
    )


class RedisSession:
    """One thread's connection to Redis, for one role (not thread-safe)."""

    def __init__(
        self, store: RedisStore, role: str, *, worker_id: str, outage: DatabaseOutage
    ) -> None:
        self.store = store
        self.role = role
        self.name = role_name(role, worker_id)
        self.outage = outage
        self.failing = False
        self._last_ok: float | None = None
        self._client: Any = None

    def bind(self) -> None:
        """Give this thread a connection of its own (none on a cluster)."""
        if self.store.cluster:
            return
        self._client = session_client(self.store.url, self.name)
        self.store.local.client = self._client

    def refresh(self) -> None:
        """Nothing to do: a connection the server closed reconnects on its next use."""

    def failed(self, error: BaseException) -> bool:
        """After a failed call: True if Redis is away (reported once per outage)."""
        if not is_unavailable(error):
            return False
        client = self._client
        if client is not None:
            try:
                client.connection.disconnect()
            except Exception:  # a dead socket may refuse to close: drop it
                logger.debug("jobs.db.close-failed", exc_info=True)
        self.failing = True
        address = None if self.outage.reached else redis_address(self.store.url)
        if self.outage.lost(
            self.role, error, last_ok=self._last_ok, using="redis", address=address
        ):
            self._last_ok = time.monotonic()
        return True

    def retry_in(self) -> float:
        """Seconds to wait before this role's next call (0: go)."""
        return self.outage.retry_in() if self.failing else 0.0

    def ok(self) -> None:
        """A call of this role landed: an outage, if any, is over."""
        self._last_ok = time.monotonic()
        if self.failing:
            self.failing = False
            self.outage.recovered(self.role, using="redis")
        elif self.outage.down:
            self.outage.recovered(self.role, using="redis", own=False)
        elif not self.outage.reached:
            self.outage.reach()

    def stand_down(self) -> None:
        """This role has nothing for Redis now: it stops waiting its turn."""
        self.failing = False


class RedisConnectivity(DjangoConnectivity):
    """``driver.sessions`` of the Redis driver; job bodies' Django
    connections are looked after as on every driver."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store

    def open(
        self,
        role: str,
        *,
        worker_id: str,
        outage: DatabaseOutage | None = None,
        claim_thread: bool = False,
    ) -> RedisSession:
        """A :class:`RedisSession` named for ``role`` (bind it in its thread)."""
        return RedisSession(
            self.store,
            role,
            worker_id=worker_id,
            outage=outage if outage is not None else process_outage(),
        )

    def is_unavailable(self, error: BaseException) -> bool:
        """:func:`is_unavailable`."""
        return is_unavailable(error)

    def recover(self, session: Any, error: BaseException) -> bool:
        """:meth:`RedisSession.failed`, or (no session) False after a Redis
        error (the shared client reconnects by itself)."""
        if session is not None:
            return bool(session.failed(error))
        if is_unavailable(error):
            return True
        return super().recover(None, error)
