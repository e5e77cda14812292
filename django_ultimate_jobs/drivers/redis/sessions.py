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
from .errors import RedisNotReplicated

if TYPE_CHECKING:
    from .client import Endpoint
    from .store import RedisStore

__all__ = [
    "RedisConnectivity",
    "RedisSession",
    "drop_if_closed",
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


def drop_if_closed(client: Any) -> bool:
    """Drop ``client``'s own connection if the server closed it (or sent
    something unasked) while it was idle; the next call dials again.

    What a connection pool does to a connection it hands out, done to a
    role's connection, which is never handed out: without it the first call
    after a ``CLIENT KILL`` (an idle-connection reaper, a failover) would
    fail and count as an outage. No round trip: a poll of the socket.
    Returns whether it dropped it.
    """
    connection = getattr(client, "connection", None)
    if connection is None or getattr(connection, "_sock", None) is None:
        return False
    try:
        if not connection.can_read(timeout=0):
            return False
    except Exception as error:  # closed by the server: can_read raises
        logger.debug(
            "jobs.db.stale-connection",
            extra={"alias": "redis", "error": f"{type(error).__name__}: {error}"},
        )
    connection.disconnect()
    return True


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says Redis cannot serve now (gone, loading, a
    replica, a cluster without a slot's owner, replicas too far behind for
    ``REDIS_WAIT_REPLICAS``), not that a call is wrong."""
    if isinstance(error, RedisNotReplicated):
        return True
    try:
        exceptions = redis_module().exceptions
    except Exception:  # no client: nothing of it can have failed
        return False
    if isinstance(error, exceptions.ConnectionError | exceptions.TimeoutError):
        return True
    if isinstance(error, exceptions.ResponseError) and str(error).startswith(
        _AWAY_TEXT
    ):
        return True
    # redis-py strips the code off the errors it has a class for (READONLY
    # reads "You can't write against a read only replica."): by class.
    return type(error).__name__ in {
        "ClusterDownError",
        "TryAgainError",
        "MasterDownError",
        "ReadOnlyError",
    }


def redis_address(endpoint: Endpoint) -> StoreAddress:
    """Where the driver looks for Redis (host, port; the password left out), and the fix."""
    parts = urlsplit(endpoint.url)
    database = parts.path.lstrip("/") if parts.hostname else ""
    if endpoint.sentinels:
        where = ", ".join(f"{host}:{port}" for host, port in endpoint.sentinels)
        return StoreAddress(
            store=f"the Redis primary {endpoint.service!r} of the Sentinels "
            "(ULTIMATE_JOBS['REDIS_SENTINELS'])",
            host=where,
            port="",
            database=database,
            fix="check ULTIMATE_JOBS['REDIS_SENTINELS'] and "
            "['REDIS_SENTINEL_SERVICE'], and that the Sentinels are up and "
            f"know a primary named {endpoint.service!r}",
        )
    host = parts.hostname or parts.path or "localhost"
    port = str(parts.port or (6379 if parts.hostname else ""))
    return StoreAddress(
        store="the Redis server (ULTIMATE_JOBS['REDIS_URL'])",
        host=host,
        port=port,
        database=database,
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
        """Give this thread a connection of its own (none on a cluster).

        The client connects at once: with Redis away (a worker started
        during an outage or a failover) the loss is reported and the
        thread's calls go through the shared pool until :meth:`refresh`
        binds it, so the role waits its turn instead of dying.
        """
        try:
            if self.store.cluster:
                return
            self._client = session_client(self.store.endpoint, self.name)
        except Exception as error:
            if not self.failed(error):
                raise
            return
        self.store.local.client = self._client
        self.store.local.session = self

    def refresh(self) -> None:
        """Before a unit of work: replace a connection the server closed
        (or dial the one :meth:`bind` could not)."""
        if self._client is not None and drop_if_closed(self._client):
            self._discard()
        if self._client is None:
            self.bind()

    def _discard(self) -> None:
        """Close this role's client and forget it; :meth:`refresh` builds a
        new one. Not its connection alone: a redis-py connection that is
        dialled again after a drop dials the address it had (with Sentinels,
        the old primary, dead or demoted after a failover), where a new
        client asks the Sentinels (issue 25, B1). Until then the thread's
        calls go through the shared pool, which asks them too."""
        client, self._client = self._client, None
        if getattr(self.store.local, "client", None) is client:
            self.store.local.client = None
        if client is None:
            return
        try:
            client.close()
        except Exception:  # a dead socket may refuse to close: drop it
            logger.debug("jobs.db.close-failed", exc_info=True)

    def failed(self, error: BaseException) -> bool:
        """After a failed call: True if Redis is away (reported once per outage)."""
        if not is_unavailable(error):
            return False
        self._discard()
        self.failing = True
        address = None if self.outage.reached else redis_address(self.store.endpoint)
        if self.outage.lost(
            self.role,
            error,
            last_ok=self._last_ok,
            using="redis",
            address=address,
            # Too few replicas: Redis answers, and every read (and a write
            # the docs let through unconfirmed) lands; only a confirmed write
            # ends it (ok()), or the outage would be logged over and over.
            partial=isinstance(error, RedisNotReplicated),
        ):
            self._last_ok = time.monotonic()
        return True

    def retry_in(self) -> float:
        """Seconds to wait before this role's next call (0: go)."""
        return self.outage.retry_in() if self.failing else 0.0

    def ok(self) -> None:
        """A call of this role landed: an outage, if any, is over (one of
        too few replicas only once a write of this thread was confirmed)."""
        self._last_ok = time.monotonic()
        since = self.outage.partial_since
        if since is not None and not self.store.written_since(since):
            return
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

    def drop_dead(self) -> None:
        """Before a body: this thread's Django connections and its Redis
        connection (a body's enqueue uses it), each dropped if closed."""
        super().drop_dead()
        session = getattr(self.store.local, "session", None)
        if session is not None:
            session.refresh()
        else:
            drop_if_closed(getattr(self.store.local, "client", None))

    def recover(self, session: Any, error: BaseException) -> bool:
        """:meth:`RedisSession.failed`, or (no session) False after a Redis
        error (the shared client reconnects by itself)."""
        if session is not None:
            return bool(session.failed(error))
        if is_unavailable(error):
            return True
        return super().recover(None, error)
