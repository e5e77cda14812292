"""The Redis driver's connection side: clients, scripts, clock and indexes.

One :class:`RedisStore` per driver, shared by the driver and its roles. It
answers which client a call uses (the calling thread's session, else the
shared pool), what "now" a script is given (a test's frozen instant, or
``''``: the server's ``TIME`` decides, as PostgreSQL's ``now()`` does), in
which queue a job or a run lives, and it keeps the fleet's indexes (the
queue list, job-name pins, where each lease key's slots live), each
written once per process before the write that needs it.

With ``REDIS_WAIT_REPLICAS`` every script is followed by ``WAIT`` on the
same connection (one round trip: a pipeline): an enqueue or a claim that
fewer replicas confirmed in time is refused (``X_REDIS_NOT_REPLICATED``),
any other write is logged (``jobs.redis.unreplicated``) and stands, as an
unreplicated settle only risks a job running again after a failover.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import cached_property
from typing import Any
from uuid import UUID

from ...clock import Clock
from .client import Endpoint
from .errors import RedisNotReplicated, RedisQueuePinned
from .layout import Layout
from .rows import from_us, to_us
from .scripts import Scripts

__all__ = ["RedisStore"]

logger = logging.getLogger("django_ultimate_jobs")

_REMEMBERED = 100_000
"""Job ids (and run ids) whose queue a process remembers."""

MUST_REPLICATE = frozenset({"enqueue", "claim"})
"""Scripts refused when fewer replicas than asked confirm them: a job
``enqueue()`` returned for, and a job a worker runs, survive a failover."""


class _Where:
    """A bounded map id -> queue: a job never changes queue."""

    def __init__(self) -> None:
        self._map: OrderedDict[UUID, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: UUID) -> str | None:
        with self._lock:
            return self._map.get(key)

    def put(self, key: UUID, queue: str) -> None:
        with self._lock:
            self._map[key] = queue
            if len(self._map) > _REMEMBERED:
                self._map.popitem(last=False)


class RedisStore:
    """Clients, scripts, the clock argument and the fleet's indexes."""

    def __init__(
        self,
        connected: tuple[Any, bool] | Callable[[], tuple[Any, bool]],
        *,
        endpoint: Endpoint,
        prefix: str,
        clock: Clock,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1_000,
    ) -> None:
        """``connected``: the shared client and whether it is a Redis
        Cluster, or the call that answers them on first use (a driver built
        while Redis is away: an enqueue staged in the outbox then needs no
        server, issue 25 B2)."""
        self._connected = connected if isinstance(connected, tuple) else None
        self._connect = None if isinstance(connected, tuple) else connected
        self._connect_lock = threading.Lock()
        self.endpoint = endpoint
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.clock = clock
        self.layout = Layout(prefix)
        self.local = threading.local()
        self.jobs = _Where()
        self.runs = _Where()
        self._known: set[tuple[str, str]] = set()
        self._pins: dict[str, str] = {}
        self._homes: dict[str, str] = {}
        self._lock = threading.Lock()

    def _resolved(self) -> tuple[Any, bool]:
        if self._connected is None:
            with self._connect_lock:
                if self._connected is None:
                    assert self._connect is not None
                    self._connected = self._connect()
        return self._connected

    @property
    def client(self) -> Any:
        """The shared client (thread-safe), connected on first use."""
        return self._resolved()[0]

    @property
    def cluster(self) -> bool:
        """Whether the server is a Redis Cluster (asked on first use)."""
        return self._resolved()[1]

    @cached_property
    def scripts(self) -> Scripts:
        """The driver's scripts, registered on the shared client."""
        return Scripts(self.client)

    def close(self) -> None:
        """Close the shared client, if it was ever connected."""
        if self._connected is not None:
            self._connected[0].close()

    # -- calls -------------------------------------------------------------

    def conn(self) -> Any:
        """This thread's session client, else the shared one."""
        return getattr(self.local, "client", None) or self.client

    def run(self, name: str, prefix: str, args: list[Any]) -> Any:
        """Run script ``name`` in the slot of ``prefix`` (then ``WAIT``).

        Raises:
            RedisNotReplicated: an enqueue or a claim fewer replicas than
                ``REDIS_WAIT_REPLICAS`` confirmed in time, or any script the
                primary refused for too few replicas (``min-replicas-to-write``).
        """
        if not self.wait_replicas:
            with self._replicas_refusal():
                answer = self.scripts.run(name, prefix, args, self.conn())
            self.local.written_at = time.monotonic()
            return answer
        return self.run_many([(name, prefix, args)])[0]

    def run_many(self, calls: list[tuple[str, str, list[Any]]]) -> list[Any]:
        """Run ``(script, prefix, args)`` calls in one round trip where the
        server allows (a pipeline; a cluster pipeline refuses scripts, so
        there they run one after the other), then ``WAIT`` if asked.

        Raises:
            RedisNotReplicated: as :meth:`run`.
        """
        if self.cluster:
            return [self.run(name, prefix, args) for name, prefix, args in calls]
        pipe = self.conn().pipeline(transaction=False)
        for name, prefix, args in calls:
            self.scripts.run(name, prefix, args, pipe)
        if self.wait_replicas:
            # WAIT counts the replicas that have this connection's last
            # write: it follows the scripts on their connection.
            pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
        with self._replicas_refusal():
            answers = list(pipe.execute())
        if self.wait_replicas:
            confirmed = int(answers.pop())
            if confirmed < self.wait_replicas:
                self._unreplicated([name for name, _, _ in calls], confirmed)
                return answers
        self.local.written_at = time.monotonic()
        return answers

    def written_since(self, instant: float) -> bool:
        """Whether this thread's scripts were taken (and, with
        ``REDIS_WAIT_REPLICAS``, confirmed by enough replicas) after
        ``instant`` (``time.monotonic()``): what ends an outage of replicas."""
        written_at = getattr(self.local, "written_at", None)
        return written_at is not None and written_at > instant

    @contextmanager
    def _replicas_refusal(self) -> Iterator[None]:
        try:
            yield
        except Exception as error:
            if not str(error).startswith("NOREPLICAS"):
                raise
            raise RedisNotReplicated(
                "Redis refused the write: fewer replicas are connected than its "
                "min-replicas-to-write asks (nothing was written)",
                meta={"replicas": None, "written": False},
            ) from error

    def _unreplicated(self, names: list[str], confirmed: int) -> None:
        detail = {
            "scripts": ",".join(sorted(set(names))),
            "replicas": confirmed,
            "asked": self.wait_replicas,
            "timeout_ms": self.wait_timeout_ms,
            "written": True,
        }
        if MUST_REPLICATE.isdisjoint(names):
            logger.warning("jobs.redis.unreplicated", extra=detail)
            return
        raise RedisNotReplicated(
            f"Redis took the write but {confirmed} of the "
            f"{self.wait_replicas} replicas asked for (REDIS_WAIT_REPLICAS) "
            f"confirmed it within {self.wait_timeout_ms} ms: a failover now "
            "could lose it",
            meta=detail,
        )

    def fleet(self, verb: str, *args: Any) -> Any:
        """Run a verb of ``lua/fleet.lua``."""
        return self.run("fleet", self.layout.fleet, [verb, self.now_arg(), *args])

    def now_arg(self) -> str:
        """The time a script is given: a test clock's instant, or ``''``."""
        frozen = self.clock.sql_now()
        return "" if frozen is None else str(to_us(frozen))

    def now(self) -> datetime:
        """The store's time: the test clock's, else the server's ``TIME``."""
        frozen = self.clock.sql_now()
        if frozen is not None:
            return frozen
        seconds, micros = self.conn().time()
        return from_us(int(seconds) * 1_000_000 + int(micros))

    # -- the fleet's indexes -------------------------------------------------

    def queues(self) -> list[str]:
        """Every queue that ever held a row or a pause, in code-point order."""
        return sorted(self.conn().smembers(self.layout.fleet + "queues"))

    def register(self, queue: str) -> None:
        """List ``queue`` (once per process) before writing to it."""
        self._once(("queue", queue), "sadd", "queues", queue)

    def lease_home(self, key: str, queue: str | None = None) -> str:
        """Where lease ``key``'s slots live: ``q:<queue>`` or ``l`` (a slot of
        its own). The first writer records it; ``queue`` claims it for a
        capped job's queue."""
        known = self._homes.get(key)
        if known is not None:
            return known
        where = f"q:{queue}" if queue is not None else "l"
        conn = self.conn()
        conn.hsetnx(self.layout.fleet + "lk", key, where)
        stored: str = conn.hget(self.layout.fleet + "lk", key) or where
        self._homes[key] = stored
        return stored

    def lease_home_if_any(self, key: str) -> str | None:
        """Where lease ``key`` lives, or ``None`` if it never held a row."""
        known = self._homes.get(key)
        if known is not None:
            return known
        stored: str | None = self.conn().hget(self.layout.fleet + "lk", key)
        if stored is not None:
            self._homes[key] = stored
        return stored

    def lease_keys(self) -> list[str]:
        """Every lease key that ever held a row."""
        return list(self.conn().hkeys(self.layout.fleet + "lk"))

    def pin(self, name: str, queue: str) -> None:
        """Pin job ``name``'s keyed and capped rows to ``queue`` (see
        :class:`~.errors.RedisQueuePinned`).

        Raises:
            RedisQueuePinned: they already live in another queue.
        """
        pinned = self._pins.get(name)
        if pinned is None:
            conn = self.conn()
            conn.hsetnx(self.layout.fleet + "pin", name, queue)
            pinned = conn.hget(self.layout.fleet + "pin", name) or queue
            self._pins[name] = pinned
        if pinned != queue:
            raise RedisQueuePinned(
                f"the job {name!r} has idempotency keys or a concurrency cap in "
                f"the queue {pinned!r}; on the Redis driver they are enforced "
                "within one queue, so its keyed or capped runs cannot go to "
                f"{queue!r}",
                fix=f"enqueue {name} to the queue {pinned!r} (or without a key); "
                "to move it, drain that queue and run redis-cli HDEL "
                f"{self.layout.fleet}pin {name!r}",
                meta={"job": name, "queue": queue, "pinned": pinned},
            )

    def _once(
        self, marker: tuple[str, str], command: str, key: str, *args: Any
    ) -> None:
        if marker in self._known:
            return
        getattr(self.conn(), command)(self.layout.fleet + key, *args)
        with self._lock:
            self._known.add(marker)

    # -- where a job or a run lives ------------------------------------------

    def locate(self, job_id: UUID) -> str | None:
        """The queue of job ``job_id`` (remembered, else looked up)."""
        queue = self.jobs.get(job_id)
        if queue is not None:
            return queue
        found = self._probe(
            (q, self.layout.queue(q) + f"j:{job_id}") for q in self.queues()
        )
        if found is not None:
            self.jobs.put(job_id, found)
        return found

    def locate_run(self, run_id: UUID) -> str | None:
        """The queue holding run ``run_id`` (its job or its steps)."""
        queue = self.runs.get(run_id) or self.jobs.get(run_id)
        if queue is not None:
            return queue
        queues = self.queues()
        hits = self.run_many(
            [("steps", self.layout.queue(q), ["probe", str(run_id)]) for q in queues]
        )
        for queue, hit in zip(queues, hits, strict=True):
            if hit:
                self.runs.put(run_id, queue)
                return queue
        return None

    def _probe(self, candidates: Iterable[tuple[str, str]]) -> str | None:
        listed = list(candidates)
        if not listed:
            return None
        pipe = self.conn().pipeline(transaction=False)
        for _, key in listed:
            pipe.exists(key)
        for (queue, _), hit in zip(listed, pipe.execute(), strict=True):
            if hit:
                return queue
        return None
