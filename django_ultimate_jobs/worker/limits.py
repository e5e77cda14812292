"""In-process limits: per queue, per tenant, global, and a per-tenant start rate.

Internal (may change in any release). Upstream §13.1: the limits count the
attempts THIS process holds, so a fleet of N processes runs up to N times
each number (and rate windows start afresh on every deploy). They are for
fairness inside a process; a cap across the fleet is ``job(concurrency=)``.

An attempt holds a :class:`Lease` from its claim until its body has run
(claimed ahead counts too: a flooding tenant must not fill the claim-ahead
buffer either). The worker asks the limiter two things before each claim:
which tenants are full (:meth:`Limiter.full_tenants`, passed to the claim
statement so it skips their rows in SQL and reaches other tenants' rows)
and how many rows one claim may take (:meth:`Limiter.claim_room`, the
smallest room any tenant or queue has, so a claim never takes more of a
tenant than it may run). A row that still arrives over a limit (a lapsed
lease re-taken: that scan is not filtered) is refused by
:meth:`Limiter.try_acquire` and shed: handed back without spending its
attempt.

Check order is global, per-queue, per-tenant, rate (the first that refuses
is the one :meth:`Limiter.blocked_by` names). Zero is a hard stop. A job
without a tenant is counted in a bucket of its own (``None``), never in a
tenant's.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ..limitconfig import LimitConfig, RateLimit, parse_limits

__all__ = [
    "MAX_LIMIT_TENANTS",
    "REFUSAL_TTL_S",
    "SWEEP_INTERVAL_S",
    "Lease",
    "LimitConfig",
    "Limiter",
    "RateLimit",
    "parse_limits",
]

MAX_LIMIT_TENANTS = 20_000
"""The most tenants whose rate windows (and refusals) are remembered; past
it the least-throttled are forgotten, down to 90%."""
REFUSAL_TTL_S = 60.0
"""How long :meth:`Limiter.blocked_by` remembers a refusal."""
SWEEP_INTERVAL_S = 60.0
"""How often expired rate stamps and refusals are swept."""

Tenant = str | None


class Lease:
    """One attempt's hold on the limits; release it once its body has run."""

    __slots__ = ("_limiter", "_stamp", "queue", "released", "tenant")

    def __init__(
        self, limiter: Limiter, queue: str, tenant: Tenant, stamp: float | None
    ) -> None:
        self._limiter = limiter
        self._stamp = stamp
        self.queue = queue
        self.tenant = tenant
        self.released = False

    def release(self) -> None:
        """Give the slots back (idempotent: a second call does nothing)."""
        self._limiter._release(self, take_back_stamp=False)

    def abandon(self) -> None:
        """Release, and take back the rate stamp: the run never started."""
        self._limiter._release(self, take_back_stamp=True)


class Limiter:
    """The limits of one worker process; safe to share between threads."""

    def __init__(
        self,
        config: LimitConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_tenants: int = MAX_LIMIT_TENANTS,
    ) -> None:
        self.config = config
        self._clock = clock
        self._max_tenants = max_tenants
        self._lock = threading.Lock()
        self._total = 0
        # Counters are deleted at zero: a tenant seen once costs nothing later.
        self._queues: dict[str, int] = {}
        self._tenants: dict[Tenant, int] = {}
        self._starts: dict[Tenant, deque[float]] = {}
        # Keyed ("queue", name) or ("tenant", tenant): a tenant may be
        # named like a queue.
        self._refusals: dict[tuple[str, Tenant], tuple[str, float]] = {}
        self._swept_at = clock()
        self.last_refusal: str | None = None
        """Why the latest :meth:`try_acquire` that was refused was refused."""

    # -- acquiring ---------------------------------------------------------------

    def try_acquire(self, queue: str, tenant: Tenant) -> Lease | None:
        """A lease for one attempt of ``queue`` / ``tenant``, or ``None`` (refused)."""
        config = self.config
        with self._lock:
            now = self._clock()
            self._maybe_sweep(now)
            refusal = self._refusal(queue, tenant, now)
            if refusal is not None:
                key = ("queue", queue) if refusal == "queue" else ("tenant", tenant)
                self._refusals[key] = (refusal, now)
                self.last_refusal = refusal
                self._cap_tenants()
                return None
            self._total += 1
            self._queues[queue] = self._queues.get(queue, 0) + 1
            self._tenants[tenant] = self._tenants.get(tenant, 0) + 1
            stamp = None
            if config.rate_per_tenant is not None:
                stamp = now
                self._starts.setdefault(tenant, deque()).append(now)
                self._cap_tenants()
            return Lease(self, queue, tenant, stamp)

    def _refusal(self, queue: str, tenant: Tenant, now: float) -> str | None:
        config = self.config
        if config.total is not None and self._total >= config.total:
            return "global"
        queue_limit = config.queue_limit(queue)
        if queue_limit is not None and self._queues.get(queue, 0) >= queue_limit:
            return "queue"
        if (
            config.per_tenant is not None
            and self._tenants.get(tenant, 0) >= config.per_tenant
        ):
            return "tenant"
        rate = config.rate_per_tenant
        if rate is not None and self._recent(tenant, now) >= rate.limit:
            return "rate"
        return None

    def _release(self, lease: Lease, *, take_back_stamp: bool) -> None:
        with self._lock:
            if take_back_stamp and lease._stamp is not None:
                starts = self._starts.get(lease.tenant)
                if starts is not None and lease._stamp in starts:
                    starts.remove(lease._stamp)
                lease._stamp = None
            if lease.released:
                return
            lease.released = True
            self._total -= 1
            _decrement(self._queues, lease.queue)
            _decrement(self._tenants, lease.tenant)

    # -- what the claim is told ----------------------------------------------------

    def open_queues(self, queues: Iterable[str]) -> tuple[str, ...]:
        """The queues of ``queues`` below their limit (the claim names only those)."""
        with self._lock:
            return tuple(
                q
                for q in queues
                if (limit := self.config.queue_limit(q)) is None
                or self._queues.get(q, 0) < limit
            )

    def full_tenants(self) -> frozenset[Tenant]:
        """Tenants (``None``: jobs without one) that may start nothing now."""
        config = self.config
        with self._lock:
            now = self._clock()
            full: set[Tenant] = set()
            if config.per_tenant is not None:
                full.update(
                    t for t, n in self._tenants.items() if n >= config.per_tenant
                )
            rate = config.rate_per_tenant
            if rate is not None:
                full.update(
                    t for t in list(self._starts) if self._recent(t, now) >= rate.limit
                )
            return frozenset(full)

    def partial_tenants(self) -> frozenset[Tenant]:
        """Tenants that run some jobs here and may start more (``per_tenant``)."""
        limit = self.config.per_tenant
        if limit is None:
            return frozenset()
        with self._lock:
            return frozenset(t for t, n in self._tenants.items() if 0 < n < limit)

    def claim_room(
        self, queues: Iterable[str] = (), *, without: frozenset[Tenant] = frozenset()
    ) -> int | None:
        """The most rows one claim may take so none is over a limit (``None``: any).

        The smallest room of: the global limit, each named queue, a fresh
        tenant, and every tenant that holds some but is not full (but those
        in ``without``: the claim skips them). Taking more could bring back
        rows of a tenant with room for one only, which would be shed one by
        one (a write each).
        """
        config = self.config
        rooms: list[int] = []
        with self._lock:
            now = self._clock()
            if config.total is not None:
                rooms.append(config.total - self._total)
            for queue in queues:
                limit = config.queue_limit(queue)
                if limit is not None:
                    rooms.append(limit - self._queues.get(queue, 0))
            if config.per_tenant is not None:
                rooms.append(config.per_tenant)
                rooms.extend(
                    room
                    for t, n in self._tenants.items()
                    if (room := config.per_tenant - n) > 0 and t not in without
                )
            rate = config.rate_per_tenant
            if rate is not None:
                rooms.append(rate.limit)
                rooms.extend(
                    room
                    for t in list(self._starts)
                    if (room := rate.limit - self._recent(t, now)) > 0
                )
        return max(0, min(rooms)) if rooms else None

    def next_window_in(self) -> float | None:
        """Seconds until a rate-full tenant's window lets it start again
        (``None``: no tenant waits on the rate). The claim loop waits no
        longer than this: a freed window sends no wake of its own."""
        rate = self.config.rate_per_tenant
        if rate is None:
            return None
        with self._lock:
            now = self._clock()
            soonest = [
                self._starts[t][0] + rate.window_ms / 1000 - now
                for t in list(self._starts)
                if self._recent(t, now) >= rate.limit
            ]
        return max(0.0, min(soonest)) if soonest else None

    # -- observability -------------------------------------------------------------

    def blocked_by(
        self, *, tenant: Tenant = None, queue: str | None = None
    ) -> str | None:
        """Why the last acquire for ``tenant`` (or ``queue``) was refused, if
        within :data:`REFUSAL_TTL_S`: ``"global"``, ``"queue"``, ``"tenant"``
        or ``"rate"``."""
        key = ("queue", queue) if queue is not None else ("tenant", tenant)
        with self._lock:
            found = self._refusals.get(key)
        if found is None or self._clock() - found[1] > REFUSAL_TTL_S:
            return None
        return found[0]

    def in_flight(self, *, tenant: Tenant = None, queue: str | None = None) -> int:
        """Leases held: in all (no argument), of ``queue``, or of ``tenant``."""
        with self._lock:
            if queue is not None:
                return self._queues.get(queue, 0)
            if tenant is not None:
                return self._tenants.get(tenant, 0)
            return self._total

    def snapshot(self) -> dict[str, Any]:
        """Counters for logs and diagnostics (only what is non-zero)."""
        with self._lock:
            return {
                "global": self._total,
                "queues": dict(self._queues),
                "tenants": len(self._tenants),
                "rate_windows": len(self._starts),
                "refusals": len(self._refusals),
            }

    # -- memory bounds -------------------------------------------------------------

    def _recent(self, tenant: Tenant, now: float) -> int:
        # Stamps older than the window are dropped as they are read.
        starts = self._starts.get(tenant)
        if starts is None:
            return 0
        rate = self.config.rate_per_tenant
        horizon = now - (rate.window_ms / 1000 if rate is not None else 0)
        while starts and starts[0] <= horizon:
            starts.popleft()
        if not starts:
            del self._starts[tenant]
            return 0
        return len(starts)

    def _maybe_sweep(self, now: float) -> None:
        if now - self._swept_at < SWEEP_INTERVAL_S:
            return
        self._swept_at = now
        for tenant in list(self._starts):
            self._recent(tenant, now)
        for key, (_, at) in list(self._refusals.items()):
            if now - at > REFUSAL_TTL_S:
                del self._refusals[key]

    def _cap_tenants(self) -> None:
        # A flood of distinct tenants must not grow memory without bound:
        # past the cap, forget down to 90%, the least-throttled first (the
        # fewest starts in their window: forgetting them frees the least
        # and loses the least).
        if len(self._starts) > self._max_tenants:
            keep = self._max_tenants * 9 // 10
            ranked = sorted(self._starts, key=lambda t: len(self._starts[t]))
            for tenant in ranked[: len(ranked) - keep]:
                del self._starts[tenant]
        if len(self._refusals) > self._max_tenants:
            keep = self._max_tenants * 9 // 10
            oldest = sorted(self._refusals, key=lambda k: self._refusals[k][1])
            for key in oldest[: len(oldest) - keep]:
                del self._refusals[key]


def _decrement(counts: dict[Any, int], key: Any) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
