"""The Redis driver: the Postgres driver's semantics in Redis, one Lua script
per state change, one hash tag per queue (:mod:`.layout`).

Internal, like the rest of ``drivers``. ``ULTIMATE_JOBS = {"DRIVER":
"redis", "REDIS_URL": "redis://..."}`` builds it (:meth:`RedisDriver.from_settings`);
docs/howto/redis.md says what it guarantees with each persistence setting
and what it refuses. Claims are fenced on the claim ordinal, leases lapse
and are re-taken by the next claim (the final attempt's lapse buried),
all as the conformance suite (``django_ultimate_jobs.testing.conformance``)
holds every driver to.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar
from uuid import UUID

from ...clock import Clock, system_clock
from ...errors import ClaimQueuesEmpty, JobDuplicate, SettingsInvalid
from ...ids import ids_or_new
from ...validation import json_text, storable_text
from ...wake import wake_hub
from ..base import (
    LEASE_LAPSED_FINAL_ATTEMPT,
    LEASE_LAPSED_RECLAIMED,
    LEASE_LAPSED_UNSTARTED,
    MAX_ERROR_STACK_LENGTH,
    AckRequest,
    ClaimedJob,
    ClaimIdentity,
    ClaimOptions,
    ClaimResult,
    Enqueued,
    EnqueueRequest,
    JobRecord,
    NackRequest,
    Renewed,
    WakeCallback,
    nack_state,
)
from ..basedriver import BaseDriver
from ..features import DriverFeatures
from .client import Endpoint, connect
from .cron import RedisCron
from .leases import RedisLeases
from .listener import RedisWakeListener
from .maintenance import RedisMaintenance
from .operator import OperatorVerbs
from .options import (
    DEFAULT_PREFIX,
    DEFAULT_URL,
    DEFAULT_WAIT_TIMEOUT_MS,
)
from .options import settings_keys as option_keys
from .rows import claimed, from_us, opt, pairs, record, to_us
from .sessions import RedisConnectivity, is_unavailable
from .steps import RedisEvents, RedisSteps
from .store import RedisStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...conf import JobsSettings, Kind
    from ..sessions import WakeListener

__all__ = ["RedisDriver"]


@dataclass(frozen=True, slots=True)
class _Ask:
    """One request on its way into the enqueue script."""

    request: EnqueueRequest
    id: UUID
    run: UUID
    text: str


class RedisDriver(OperatorVerbs, BaseDriver):
    """Jobs in Redis (or Redis Cluster), one Lua script per state change."""

    name = "redis"
    features = DriverFeatures(
        wake_listener=True,
        shared_across_processes=True,
    )
    """Pub/sub wake-ups and many processes; no Django transaction to join
    (an enqueue inside ``transaction.atomic()`` goes through the outbox), no
    atomic steps, no slot hand-over, no model tables."""
    settings_keys: ClassVar[Mapping[str, Kind]] = option_keys()

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Clock = system_clock,
        sentinels: Sequence[tuple[str, int]] = (),
        service: str = "",
        wait_replicas: int = 0,
        wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS,
    ) -> None:
        """``url`` (or, with ``sentinels``, the primary the Sentinels name
        ``service``: the URL gives its database, password and scheme);
        ``wait_replicas``: ``WAIT`` after every script (docs/howto/redis.md).

        Raises:
            SettingsInvalid: Sentinels without a service name, or
                ``wait_replicas`` on a Redis Cluster.
        """
        if sentinels and not service:
            raise SettingsInvalid(
                'ULTIMATE_JOBS["REDIS_SENTINELS"] needs REDIS_SENTINEL_SERVICE, '
                "the name the Sentinels monitor the primary under",
                fix='ULTIMATE_JOBS["REDIS_SENTINEL_SERVICE"] = "mymaster"',
                meta={"key": "REDIS_SENTINEL_SERVICE"},
            )
        endpoint = Endpoint(url, tuple(sentinels), service)

        def connected() -> tuple[Any, bool]:
            client, cluster = connect(endpoint)
            if cluster and wait_replicas:
                client.close()
                raise SettingsInvalid(
                    'ULTIMATE_JOBS["REDIS_WAIT_REPLICAS"] is not supported on a '
                    "Redis Cluster (a cluster client cannot send WAIT on the "
                    "connection that ran the script)",
                    fix='remove ULTIMATE_JOBS["REDIS_WAIT_REPLICAS"]',
                    meta={"key": "REDIS_WAIT_REPLICAS"},
                )
            return client, cluster

        # Redis away now: built all the same, connected on first use (an
        # enqueue staged in the outbox needs no server; issue 25, B2).
        connection: tuple[Any, bool] | Callable[[], tuple[Any, bool]]
        try:
            connection = connected()
        except Exception as error:
            if not is_unavailable(error):
                raise
            connection = connected
        self.clock = clock
        self.store = RedisStore(
            connection,
            endpoint=endpoint,
            prefix=prefix,
            clock=clock,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
        )
        self.sessions = RedisConnectivity(self.store)
        self.steps = RedisSteps(self.store)
        self.events = RedisEvents(self.store, self.steps)
        self.leases = RedisLeases(self.store)
        self.cron = RedisCron(self.store, self.enqueue_many, self.leases)
        self.maintenance = RedisMaintenance(self.store, self.events, self.leases)

    @classmethod
    def from_settings(cls, settings: JobsSettings) -> RedisDriver:
        """The driver the ``REDIS_*`` keys describe."""
        options = settings.driver_options
        return cls(
            options.get("REDIS_URL", DEFAULT_URL),
            prefix=options.get("REDIS_PREFIX", DEFAULT_PREFIX),
            sentinels=options.get("REDIS_SENTINELS", ()),
            service=options.get("REDIS_SENTINEL_SERVICE", ""),
            wait_replicas=options.get("REDIS_WAIT_REPLICAS", 0),
            wait_timeout_ms=options.get("REDIS_WAIT_TIMEOUT", DEFAULT_WAIT_TIMEOUT_MS),
        )

    def now(self) -> datetime:
        """The test clock's instant, else the Redis server's ``TIME``."""
        return self.store.now()

    def wake_listener(
        self,
        on_wake: WakeCallback,
        *,
        worker_id: str,
        on_live: Callable[[bool], None] | None = None,
    ) -> WakeListener | None:
        """A pub/sub listener on the wake channel (not started)."""
        return RedisWakeListener(
            self.store, on_wake=on_wake, on_live=on_live, worker_id=worker_id
        )

    # -- enqueue -------------------------------------------------------------

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """Insert many jobs (one script per queue); answers in request order.

        A refusal (``on_conflict="error"``) leaves nothing of the batch.

        Raises:
            JobDuplicate: ``on_conflict="error"`` met a live key.
            RedisQueuePinned: a keyed or capped job's rows live in another queue.
        """
        asks = []
        ids = ids_or_new([request.id for request in requests])
        for request, job_id in zip(requests, ids, strict=True):
            # Encoded before anything is written (JsonRefused, a ValueError).
            text = request.input_json or json_text(request.input, exact=False)
            asks.append(_Ask(request, job_id, request.run_id or job_id, text))
        by_queue: dict[str, list[int]] = defaultdict(list)
        for index, ask in enumerate(asks):
            by_queue[ask.request.queue].append(index)
        store = self.store
        for queue, indexes in by_queue.items():
            store.register(queue)
            for index in indexes:
                request = asks[index].request
                if request.idempotency_key is not None or request.concurrency_key:
                    store.pin(request.name, queue)
                if request.concurrency_key is not None:
                    store.lease_home(request.concurrency_key, queue)
        answers: list[Enqueued | None] = [None] * len(asks)
        inserted: list[UUID] = []
        due: list[str] = []
        for queue, indexes in by_queue.items():
            got = store.run(
                "enqueue",
                store.layout.queue(queue),
                self._args(queue, [asks[i] for i in indexes]),
            )
            if got and got[0] == "dup":
                self._take_back(inserted)
                holder, name = got[1], got[2]
                raise JobDuplicate(
                    f"a live {name} job already holds this idempotency key",
                    fix=f"python manage.py jobs show {holder}  (or on_conflict='dedupe')",
                    meta={"holder": holder, "job": name},
                )
            for index, (job_id, run_id, deduped, created) in zip(
                indexes, got, strict=True
            ):
                answer = Enqueued(
                    UUID(job_id),
                    UUID(run_id),
                    deduped == "1",
                    from_us(created) if created else None,
                )
                answers[index] = answer
                if not answer.deduped:
                    inserted.append(answer.id)
                    store.jobs.put(answer.id, queue)
                    request = asks[index].request
                    if request.run_at is None and request.delay_ms <= 0:
                        due.append(queue)
        for queue in dict.fromkeys(due):
            wake_hub.notify(queue)
        return [a for a in answers if a is not None]

    def _args(self, queue: str, asks: Sequence[_Ask]) -> list[Any]:
        args: list[Any] = [
            self.store.now_arg(),
            queue,
            self.store.layout.channel,
            len(asks),
        ]
        for ask in asks:
            r = ask.request
            run_at = None if r.run_at is None else to_us(r.run_at.astimezone(UTC))
            args += [
                str(ask.id),
                r.name,
                ask.text,
                opt(r.idempotency_key),
                opt(r.tenant_id),
                str(ask.run),
                r.max_attempts,
                r.priority,
                opt(run_at),
                r.delay_ms,
                "e" if r.on_conflict == "error" else "d",
                opt(r.enqueued_by),
                opt(r.traceparent),
                opt(r.concurrency_key),
                opt(r.concurrency_limit),
            ]
        return args

    def _take_back(self, inserted: Iterable[UUID]) -> None:
        # A refused batch spanning queues: the queues written before the
        # refusal get their rows removed again.
        for job_id in inserted:
            self.remove(job_id)

    # -- claim ----------------------------------------------------------------

    def claim(self, options: ClaimOptions) -> ClaimResult:
        """Claim due jobs; re-take lapsed leases; bury lapsed final attempts.

        One script per queue. Several queues are claimed in the order of
        their first due row, each taking what the earlier ones left of the
        limit (and of ``retake``, ``start_now`` and ``capped``).
        """
        if not options.queues:
            raise ClaimQueuesEmpty("a claim named no queue")
        if options.limit <= 0:
            return ClaimResult([], [])
        store = self.store
        queues = list(dict.fromkeys(options.queues))
        if len(queues) > 1:
            queues = self._by_head(queues)
        limit = options.limit
        retake = options.limit if options.retake is None else options.retake
        start_now, capped = options.start_now, options.capped
        skip = json.dumps(
            sorted(options.skip_tenants, key=lambda t: (t is not None, t or ""))
        )
        refuse = json.dumps(sorted(options.refuse_busy))
        drop = json.dumps(sorted(options.drop_exhausted))
        got_claimed: list[ClaimedJob] = []
        buried: list[JobRecord] = []
        for queue in queues:
            if limit <= 0:
                break
            fence = self._fences(capped) if capped > 0 else 0
            rows = store.run(
                "claim",
                store.layout.queue(queue),
                [
                    store.now_arg(),
                    limit,
                    options.worker_id,
                    options.visibility_ms,
                    retake,
                    start_now,
                    capped,
                    "1" if options.uncapped else "0",
                    skip,
                    refuse,
                    drop,
                    fence,
                    LEASE_LAPSED_RECLAIMED,
                    LEASE_LAPSED_UNSTARTED,
                    LEASE_LAPSED_FINAL_ATTEMPT,
                ],
            )
            for entry in rows:
                if entry[0] == "b":
                    buried.append(record(pairs(entry[1:])))
                    retake -= 1
                else:
                    job = claimed(pairs(entry[4:]), entry[1:4])
                    got_claimed.append(job)
                    store.jobs.put(job.id, queue)
                    store.runs.put(job.run_id, queue)
                    retake -= job.retaken
                    start_now -= (not job.retaken) and job.start_recorded
                    capped -= job.concurrency_key is not None and not job.key_busy
                limit -= 1
        if options.registry_ttl_ms is not None:
            store.fleet("refresh", options.worker_id, options.registry_ttl_ms)
        return ClaimResult(got_claimed, buried)

    def _fences(self, count: int) -> int:
        # The first of ``count`` fences drawn from the fleet's sequence: a
        # capped claim's slots fence like every other grant (locks included).
        store = self.store
        last = int(store.conn().incrby(store.layout.fleet + "fence", count))
        return last - count + 1

    def _by_head(self, queues: list[str]) -> list[str]:
        # The queue whose best row comes first is claimed first: its first
        # promoted row (priority, run_at, id), else its first due delayed
        # row or lapsed lease (run_at order, priority unknown: 0).
        store = self.store
        now = store.now_arg() or "+inf"
        pipe = store.conn().pipeline(transaction=False)
        for queue in queues:
            prefix = store.layout.queue(queue)
            pipe.zrange(prefix + "a", 0, 0, withscores=True)
            pipe.zrange(prefix + "c", 0, 0, withscores=True)
            pipe.zrangebyscore(
                prefix + "d", "-inf", now, start=0, num=1, withscores=True
            )
            pipe.zrangebyscore(
                prefix + "r", "-inf", now, start=0, num=1, withscores=True
            )
        answers = pipe.execute()
        heads: list[tuple[float, str, int]] = []
        for index in range(len(queues)):
            a, c, d, r = answers[index * 4 : index * 4 + 4]
            keys = [(score, member[:16]) for member, score in (*a, *c)]
            keys += [(0.0, f"{int(score):016d}") for _, score in (*d, *r)]
            if keys:
                heads.append((*min(keys), index))
        order = [queues[i] for *_, i in sorted(heads)]
        return order + [q for q in queues if q not in order]

    # -- settle --------------------------------------------------------------

    def _grouped(self, ids: Iterable[UUID]) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = defaultdict(list)
        for index, job_id in enumerate(ids):
            queue = self.store.locate(job_id)
            if queue is not None:
                groups[queue].append(index)
        return groups

    def ack_many(self, requests: Sequence[AckRequest]) -> list[bool]:
        """Settle successful attempts (one script per queue); answers in order."""
        answers = [False] * len(requests)
        store = self.store
        for queue, indexes in self._grouped(r.job_id for r in requests).items():
            args: list[Any] = [store.now_arg(), len(indexes)]
            for index in indexes:
                request = requests[index]
                args += [
                    str(request.job_id),
                    request.identity.worker_id,
                    request.identity.claim,
                    "1" if request.counted else "0",
                    request.duration_ms,
                    opt(_result(request.result)),
                ]
            landed = store.run("ack", store.layout.queue(queue), args)
            for index, ok in zip(indexes, landed, strict=True):
                answers[index] = bool(ok)
        return answers

    def nack(self, request: NackRequest) -> bool:
        """Hand one attempt back (state per ``nack_state``); True if it landed."""
        store = self.store
        queue = store.locate(request.job_id)
        if queue is None:
            return False
        error = None if request.error is None else storable_text(request.error)
        stack = None
        if error is not None and request.stack is not None:
            stack = storable_text(request.stack)[-MAX_ERROR_STACK_LENGTH:]
        run_at = None if request.run_at is None else to_us(request.run_at)
        landed = store.run(
            "nack",
            store.layout.queue(queue),
            [
                store.now_arg(),
                str(request.job_id),
                request.identity.worker_id,
                request.identity.claim,
                nack_state(request).value,
                "1" if request.counts_as_attempt else "0",
                opt(run_at),
                request.delay_ms,
                opt(error),
                opt(stack),
                request.duration_ms,
            ],
        )
        return bool(landed)

    def heartbeat_many(
        self,
        held: Iterable[tuple[UUID, ClaimIdentity | None]],
        *,
        visibility_ms: int,
    ) -> Renewed:
        """Extend many leases (and their slots); answers the ids that landed."""
        held = list(held)
        store = self.store
        landed: set[UUID] = set()
        lost: set[UUID] = set()
        for queue, indexes in self._grouped(job_id for job_id, _ in held).items():
            args: list[Any] = [store.now_arg(), visibility_ms, len(indexes)]
            for index in indexes:
                job_id, identity = held[index]
                if identity is None:
                    args += [str(job_id), "", ""]
                else:
                    args += [str(job_id), identity.worker_id, identity.claim]
            answers = store.run("heartbeat", store.layout.queue(queue), args)
            for index, answer in zip(indexes, answers, strict=True):
                if answer:
                    landed.add(held[index][0])
                if answer == 2:
                    lost.add(held[index][0])
        return Renewed(landed, lost)

    def _fenced(
        self, job_id: UUID, identity: ClaimIdentity, what: str, value: str
    ) -> bool:
        store = self.store
        queue = store.locate(job_id)
        if queue is None:
            return False
        args = [str(job_id), identity.worker_id, identity.claim, what, value]
        return bool(store.run("fenced", store.layout.queue(queue), args))

    def mark_started(self, job_id: UUID, identity: ClaimIdentity) -> bool:
        """Record that this claim's body starts now; fenced. True if it landed."""
        return self._fenced(job_id, identity, "start", "")

    def record_progress(
        self, job_id: UUID, identity: ClaimIdentity, progress: Mapping[str, Any]
    ) -> bool:
        """Store progress on a running job (fenced); True if it landed."""
        return self._fenced(
            job_id, identity, "progress", json_text(progress, exact=False)
        )

    def close(self) -> None:
        """Close the shared client's connections."""
        self.store.close()


def _result(value: Any) -> str | None:
    """A handler's result as stored by an ack: ``None`` when not JSON-safe."""
    if value is None:
        return None
    try:
        return json_text(value, exact=False)
    except ValueError:
        return None


if TYPE_CHECKING:
    from ..base import JobDriver

    def _keeps_the_contract(driver: RedisDriver) -> JobDriver:
        # mypy holds the class to every verb and role of the contract.
        return driver
