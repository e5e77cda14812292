"""The driver conformance suite: what every ``JobDriver`` must answer.

Subclass :class:`DriverConformance` in a test module (the class name must
start with ``Test``) and provide five fixtures: ``clock`` (a
:class:`~django_ultimate_jobs.clock.ManualClock`; moving it is how leases
lapse, so no check sleeps), ``driver`` (a fresh driver reading that clock),
``put_step(run_id, name, started_at)`` and ``step_names(run_id)`` (record
and list steps in the driver's storage), and ``counters(job)`` (that job's
counter buckets as ``{(bucket_ms, bucket_start): {field: n}}`` over
:data:`COUNTER_FIELDS`)::

    class TestMemoryDriver(DriverConformance):
        @pytest.fixture
        def clock(self):
            return ManualClock(datetime(2030, 1, 1, 12, tzinfo=UTC))

        @pytest.fixture
        def driver(self, clock):
            yield (driver := MemoryDriver(clock=clock))
            driver.close()

        @pytest.fixture
        def counters(self, driver):
            return driver.counters

        # put_step and step_names: see tests/conformance/test_memory_driver.py

Every check uses its own queue and job names, so checks can share a store.
The operator checks live in :mod:`.conformance_operator` (and
:mod:`.conformance_bulk`), the lease store's (``driver.leases``: slots and
locks) in :mod:`.conformance_leases`, the claim's skipping of full tenants
in :mod:`.conformance_fairness`, in-process limits' claims in
:mod:`.conformance_limits`, the step and event stores' (``driver.steps``,
``driver.events``) in :mod:`.conformance_steps`, the cron role's
(``driver.cron``) in :mod:`.conformance_cron`, and the counters and the
maintenance role's (``driver.maintenance``: purges, roll-up) in
:mod:`.conformance_maintenance`, and the declared capability flags that can
be checked (``driver.features``) in :mod:`.conformance_features`; register
the package with ``pytest.register_assert_rewrite("django_ultimate_jobs.testing")``
in a ``conftest.py`` so a failed check shows the values it compared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from ..drivers.base import (
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
    JobDriver,
    JobRecord,
    NackRequest,
    QueueStats,
)
from ..errors import JobsError
from ..ids import uuid7
from ..states import JobState, parse_state
from .conformance_cron import CronConformance
from .conformance_fairness import FairnessConformance
from .conformance_features import FeaturesConformance
from .conformance_leases import LeaseConformance
from .conformance_limits import LimitsConformance
from .conformance_maintenance import COUNTER_FIELDS, MaintenanceConformance
from .conformance_operator import OperatorConformance
from .conformance_steps import StepsConformance
from .conformance_traces import TraceContextConformance

__all__ = ["COUNTER_FIELDS", "VISIBILITY_MS", "DriverConformance", "Lane"]

VISIBILITY_MS = 30_000


@dataclass(frozen=True)
class Lane:
    """One check's own queue and job name, with shorthands over the driver."""

    driver: JobDriver
    queue: str
    job: str

    def sibling(self, suffix: str) -> Lane:
        """Another lane (queue and job name) owned by the same check."""
        return replace(self, queue=f"{self.queue}-{suffix}", job=f"{self.job}-{suffix}")

    def request(self, **fields: Any) -> EnqueueRequest:
        """An enqueue request for this lane."""
        fields.setdefault("input", {"lane": self.job})
        return EnqueueRequest(name=self.job, queue=self.queue, **fields)

    def enqueue(self, **fields: Any) -> Enqueued:
        """Enqueue one job on this lane."""
        return self.driver.enqueue(self.request(**fields))

    def claim(
        self,
        worker: str = "worker-a",
        *,
        limit: int = 10,
        visibility_ms: int = VISIBILITY_MS,
        drop: frozenset[str] = frozenset(),
        queues: list[str] | None = None,
        registry_ttl_ms: int | None = None,
        start_now: int = 0,
        retake: int | None = None,
        capped: bool = False,
        refuse_busy: frozenset[str] = frozenset(),
        skip_tenants: frozenset[str | None] = frozenset(),
    ) -> ClaimResult:
        """Claim from this lane's queue (or ``queues``)."""
        options = ClaimOptions(
            queues=[self.queue] if queues is None else queues,
            limit=limit,
            worker_id=worker,
            visibility_ms=visibility_ms,
            drop_exhausted=drop,
            registry_ttl_ms=registry_ttl_ms,
            start_now=start_now,
            retake=retake,
            skip_tenants=skip_tenants,
            capped=limit if capped else 0,
            refuse_busy=refuse_busy,
        )
        return self.driver.claim(options)

    def claim_one(self, worker: str = "worker-a", **options: Any) -> ClaimedJob:
        """Claim exactly one job (fails the check otherwise)."""
        result = self.claim(worker, limit=1, **options)
        assert len(result.claimed) == 1 and not result.buried, result
        return result.claimed[0]

    def started(self, job: ClaimedJob) -> ClaimedJob:
        """Record that ``job``'s body starts (as the worker does); answer it."""
        assert self.driver.mark_started(job.id, job.identity) is True
        return job

    def ack(self, job: ClaimedJob, **fields: Any) -> bool:
        """Ack ``job`` under its own claim identity."""
        request = AckRequest(job_id=job.id, identity=job.identity, **fields)
        return self.driver.ack(request)

    def nack(self, job: ClaimedJob, **fields: Any) -> bool:
        """Nack ``job`` under its own claim identity."""
        request = NackRequest(job_id=job.id, identity=job.identity, **fields)
        return self.driver.nack(request)

    def heartbeat(self, job: ClaimedJob) -> bool:
        """Renew ``job``'s lease under its own claim identity."""
        return self.driver.heartbeat(
            job.id, visibility_ms=VISIBILITY_MS, identity=job.identity
        )

    def refused(
        self, code: str, call: Callable[..., Any], *args: Any, **kw: Any
    ) -> JobsError:
        """Expect ``call`` to be refused with ``code`` (codes are the contract)."""
        with pytest.raises(JobsError) as info:
            call(*args, **kw)
        assert info.value.code == code, info.value
        return info.value

    def row(self, job_id: UUID) -> JobRecord:
        """The stored row (fails the check if it is gone)."""
        record = self.driver.get(job_id)
        assert record is not None, job_id
        return record

    def stats(self) -> QueueStats | None:
        """This lane's queue stats (``None``: no counted row)."""
        return next((s for s in self.driver.stats() if s.queue == self.queue), None)


def _ids(jobs: list[ClaimedJob] | list[JobRecord]) -> list[UUID]:
    return [job.id for job in jobs]


class DriverConformance(
    OperatorConformance,
    LeaseConformance,
    LimitsConformance,
    FairnessConformance,
    StepsConformance,
    CronConformance,
    MaintenanceConformance,
    TraceContextConformance,
    FeaturesConformance,
):
    """The checks; a subclass provides the fixtures named in the module doc."""

    @pytest.fixture
    def lane(self, driver: JobDriver, request: pytest.FixtureRequest) -> Lane:
        """The queue and job name of this check alone."""
        name = request.node.originalname.removeprefix("test_").replace("_", "-")
        return Lane(driver, queue=f"conformance-{name}", job=f"conformance.{name}")

    # -- the upstream checks (inventory §4.6) ---------------------------------

    def test_history_keeps_one_entry_per_counted_attempt(self, lane, clock):
        """Failed and successful attempts each add an entry; uncounted ones don't."""
        enqueued = lane.enqueue()
        first = lane.claim_one("worker-a")
        assert lane.driver.nack(
            NackRequest(job_id=first.id, identity=first.identity, error="boom")
        )
        shed = lane.claim_one("worker-b")
        assert lane.driver.nack(
            NackRequest(job_id=shed.id, identity=shed.identity, counts_as_attempt=False)
        )
        last = lane.claim_one("worker-c")
        assert lane.ack(last, result={"ok": True})
        record = lane.driver.get(enqueued.id)
        assert record is not None
        assert [
            (e["attempt"], e["worker"], e.get("error")) for e in record.history
        ] == [
            (1, "worker-a", "boom"),
            (2, "worker-c", None),
        ]
        assert record.result == {"ok": True}
        assert record.claimed_at == clock.now()

    def test_a_lapsed_attempt_gets_a_history_entry_when_re_claimed(self, lane, clock):
        """The dead attempt's worker and the lease-lapse error are kept."""
        enqueued = lane.enqueue()
        lane.started(lane.claim_one("worker-a"))
        clock.advance(milliseconds=VISIBILITY_MS + 1)
        again = lane.claim_one("worker-b")
        assert lane.ack(again)
        record = lane.driver.get(enqueued.id)
        assert record is not None and record.history is not None
        assert [(e["attempt"], e["worker"]) for e in record.history] == [
            (1, "worker-a"),
            (2, "worker-b"),
        ]
        assert record.history[0]["error"] == LEASE_LAPSED_RECLAIMED

    def test_a_claim_records_its_first_rows_as_started(self, lane, clock):
        """``start_now`` rows (claim order) are charged on a lapse; the rest are not."""
        first = lane.enqueue(priority=1)
        held = [lane.enqueue(), lane.enqueue()]
        result = lane.claim(limit=3, start_now=1)
        recorded = {job.id: job.start_recorded for job in result.claimed}
        assert recorded == {first.id: True, held[0].id: False, held[1].id: False}
        clock.advance(milliseconds=VISIBILITY_MS + 1)
        again = {job.id: job for job in lane.claim("worker-b", limit=3).claimed}
        assert again[first.id].attempt == 2
        assert [again[e.id].attempt for e in held] == [1, 1]
        assert all(job.retaken and job.needs_start_mark for job in again.values())

    def test_retake_bounds_the_lapsed_rows_a_claim_takes(self, lane, clock):
        """``retake`` caps re-taken lapsed leases; waiting rows still fill the claim."""
        lapsing = [lane.enqueue(priority=5) for _ in range(3)]
        assert len(lane.claim(limit=3).claimed) == 3
        clock.advance(milliseconds=VISIBILITY_MS + 1)
        fresh = lane.enqueue()
        none = lane.claim("worker-b", limit=10, retake=0).claimed
        assert [job.id for job in none] == [fresh.id]
        first, *others = sorted(e.id for e in lapsing)  # claim order: by id
        one = lane.claim("worker-b", limit=10, retake=1).claimed
        assert [(job.id, job.retaken) for job in one] == [(first, True)]
        rest = lane.claim("worker-c", limit=10).claimed
        assert sorted(job.id for job in rest) == others

    def test_a_lapse_before_the_start_is_known_spends_no_attempt(self, lane, clock):
        """Jobs claimed ahead of one that killed their worker lose nothing.

        Nothing proves such a claim's body started, so its lapse is not
        charged and never buries; the re-take must record its start, and
        from then on a lapse is charged as usual.
        """
        enqueued = lane.enqueue(max_attempts=1)
        first = lane.claim_one("worker-a")
        assert first.retaken is False
        clock.advance(milliseconds=VISIBILITY_MS + 1)
        again = lane.claim_one("worker-b")
        assert (again.attempt, again.claims, again.retaken) == (1, 2, True)
        history = lane.row(enqueued.id).history
        assert [(e["attempt"], e["worker"], e["error"]) for e in history] == [
            (1, "worker-a", LEASE_LAPSED_UNSTARTED)
        ]
        assert lane.driver.mark_started(first.id, first.identity) is False  # fenced
        lane.started(again)
        clock.advance(milliseconds=VISIBILITY_MS + 1)
        result = lane.claim("worker-c")
        assert result.claimed == [] and _ids(result.buried) == [enqueued.id]
        assert (result.buried[0].state, result.buried[0].attempt) == (JobState.DEAD, 1)

    def test_claimed_once_and_settled_by_ack(self, lane):
        """A row is claimed once, an ack settles it, and nothing stays running."""
        enqueued = lane.enqueue()
        first = lane.claim("worker-a")
        assert _ids(first.claimed) == [enqueued.id] and first.buried == []
        assert lane.claim("worker-b").claimed == []
        assert lane.stats().running == 1
        assert lane.ack(first.claimed[0]) is True
        assert lane.claim("worker-b") == ClaimResult([], [])
        assert lane.row(enqueued.id).state is JobState.DONE
        # Done rows are not counted, so the queue has no stats row at all.
        assert lane.stats() is None

    def test_live_key_dedupes_onto_holder(self, lane):
        """Enqueueing a live key answers the holder, deduped, with its input."""
        first = lane.enqueue(idempotency_key="order-7", input={"n": 1})
        second = lane.enqueue(idempotency_key="order-7", input={"n": 2})
        assert second == Enqueued(first.id, first.run_id, True)
        assert lane.row(first.id).input == {"n": 1}

    def test_empty_queues_refused(self, lane):
        """A claim naming no queue is refused before anything else."""
        lane.enqueue()
        lane.refused("X_JOB_CLAIM_QUEUES_EMPTY", lane.claim, queues=[])
        lane.refused("X_JOB_CLAIM_QUEUES_EMPTY", lane.claim, queues=[], limit=0)
        assert lane.stats().ready == 1

    def test_nack_hands_back_and_fences_old_claim(self, lane):
        """A nacked row is re-claimed under a higher ordinal; the old ack misses."""
        lane.enqueue()
        old = lane.claim_one("worker-a")
        assert lane.nack(old, error="X_FLAKY: try again") is True
        new = lane.claim_one("worker-a")
        assert (new.id, new.claimed_by) == (old.id, old.claimed_by)
        assert new.claims > old.claims
        assert lane.ack(old) is False
        assert lane.ack(new) is True

    def test_dead_letter_counts_dead_never_claimed(self, lane, clock):
        """A dead-lettered row counts as dead and is never claimed again."""
        enqueued = lane.enqueue()
        assert lane.nack(lane.claim_one(), dead_letter=True, error="X_BOOM: no") is True
        assert lane.stats() == QueueStats(queue=lane.queue, dead=1)
        clock.advance(days=1)
        assert lane.claim() == ClaimResult([], [])
        assert lane.row(enqueued.id).state is JobState.DEAD

    def test_lapsed_lease_reclaimed_by_other_worker(self, lane, clock):
        """A lapsed lease goes to another worker; only its heartbeat lands."""
        enqueued = lane.enqueue()
        old = lane.started(lane.claim_one("worker-a"))
        clock.advance(milliseconds=VISIBILITY_MS - 1)
        assert lane.claim("worker-b").claimed == []
        clock.advance(milliseconds=1)
        new = lane.claim_one("worker-b")
        assert (new.id, new.attempt, new.claims) == (enqueued.id, 2, old.claims + 1)
        assert lane.heartbeat(old) is False
        assert lane.heartbeat(new) is True
        assert lane.ack(old) is False
        assert lane.ack(new) is True

    def test_final_attempt_lapse_buried_once(self, lane, clock):
        """A lease lapsed on the final attempt is buried dead and reported once."""
        enqueued = lane.enqueue(max_attempts=2)
        lane.nack(lane.claim_one(), error="X_FLAKY: first", stack="Traceback: first")
        last = lane.started(lane.claim_one("worker-a"))
        clock.advance(milliseconds=VISIBILITY_MS)
        result = lane.claim("worker-b")
        assert result.claimed == [] and _ids(result.buried) == [enqueued.id]
        buried = result.buried[0]
        assert (buried.state, buried.attempt) == (JobState.DEAD, 2)
        assert buried.last_error == LEASE_LAPSED_FINAL_ATTEMPT
        assert (buried.last_error_stack, buried.claimed_by, buried.visible_at) == (
            (None, None, None)
        )
        assert buried.updated_at == clock.now()
        assert lane.claim("worker-c") == ClaimResult([], [])
        clock.advance(hours=1)
        assert lane.claim("worker-c") == ClaimResult([], [])
        assert lane.row(enqueued.id) == buried
        assert lane.stats() == QueueStats(queue=lane.queue, dead=1)
        assert lane.heartbeat(last) is False and lane.ack(last) is False

    def test_drop_exhausted_burial_is_failed(self, lane, clock):
        """With drop_exhausted naming the job, the burial is failed, not dead."""
        enqueued = lane.enqueue(max_attempts=1)
        lane.started(lane.claim_one())
        clock.advance(milliseconds=VISIBILITY_MS)
        result = lane.claim(drop=frozenset({lane.job}))
        assert _ids(result.buried) == [enqueued.id]
        assert result.buried[0].state is JobState.FAILED
        assert lane.stats() == QueueStats(queue=lane.queue, failed=1)

    # -- enqueue -----------------------------------------------------------------

    def test_get_answers_the_row_as_enqueued(self, lane, driver, clock):
        """An enqueued row reads back field for field; unknown ids read None."""
        fields: dict[str, Any] = {
            "input": {"invoice": 42, "tags": ["a", "é"], "ratio": 0.5, "none": None},
            "idempotency_key": "invoice-42",
            "max_attempts": 5,
            "priority": 7,
            "tenant_id": "tenant-1",
            "run_id": uuid7(),
            "enqueued_by": "web-1",
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        }
        enqueued = lane.enqueue(**fields)
        now = clock.now()
        assert enqueued == Enqueued(enqueued.id, fields["run_id"], False, now)
        assert lane.row(enqueued.id) == JobRecord(
            id=enqueued.id,
            name=lane.job,
            queue=lane.queue,
            attempt=0,
            state=JobState.READY,
            run_at=now,
            created_at=now,
            updated_at=now,
            **fields,
        )
        plain = lane.enqueue()
        assert plain.run_id == plain.id
        assert driver.get(uuid7()) is None

    def test_numbers_read_back_with_their_type(self, lane):
        """A whole float (1e16, 2.0) reads back a float, an int an int.

        In input, claimed input and result: jsonb prints ``1e+16`` back as
        ``10000000000000000``, which would decode as an int.
        """
        given = {
            "big": 1e16,
            "huge": -1.5e300,
            "two": 2.0,
            "count": 10**16,
            "s": "1e+16",
        }
        enqueued = lane.enqueue(input=given)
        job = lane.claim_one()
        assert lane.ack(job, result=[1e17, 3])
        row = lane.row(enqueued.id)
        for value in (job.input, row.input):
            assert value == given
            assert {k: type(v) for k, v in value.items()} == {
                k: type(v) for k, v in given.items()
            }
        assert [type(v) for v in row.result] == [float, int]

    def test_non_json_input_refused(self, lane, driver):
        """Input that is not JSON-safe fails the enqueue and stores nothing."""
        job_id = uuid7()
        with pytest.raises((TypeError, ValueError)):
            lane.enqueue(id=job_id, input={"at": object()})
        with pytest.raises((TypeError, ValueError)):
            lane.enqueue(id=job_id, input={"ratio": float("nan")})
        assert driver.get(job_id) is None

    def test_conflict_error_policy_refuses(self, lane):
        """on_conflict='error' refuses a live key, naming the holder."""
        holder = lane.enqueue(idempotency_key="k")
        error = lane.refused(
            "X_JOB_DUPLICATE", lane.enqueue, idempotency_key="k", on_conflict="error"
        )
        assert error.meta["holder"] == str(holder.id)

    def test_key_namespace_is_name_tenant_key(self, lane):
        """Keys are scoped by job name and tenant; a None key never conflicts."""
        base = lane.enqueue(idempotency_key="k")
        assert lane.sibling("other").enqueue(idempotency_key="k").deduped is False
        tenant = lane.enqueue(idempotency_key="k", tenant_id="t1")
        assert tenant.deduped is False and tenant.id != base.id
        assert lane.enqueue(idempotency_key="k", tenant_id="t1").id == tenant.id
        # Tenantless rows share one namespace: None and "" are the same tenant.
        assert lane.enqueue(idempotency_key="k", tenant_id="").id == base.id
        unkeyed = [lane.enqueue(), lane.enqueue()]
        assert unkeyed[0].id != unkeyed[1].id and not any(e.deduped for e in unkeyed)

    def test_finished_holder_frees_key(self, lane):
        """Once its holder finished, a key enqueues a new row."""
        first = lane.enqueue(idempotency_key="k")
        lane.ack(lane.claim_one())
        again = lane.enqueue(idempotency_key="k")
        assert again.deduped is False and again.id != first.id

    def test_caller_id_dedupes_whatever_state(self, lane):
        """A caller-supplied id that exists answers that row, even finished."""
        job_id = uuid7()
        assert lane.enqueue(id=job_id).deduped is False
        lane.ack(lane.claim_one())
        again = lane.enqueue(id=job_id, idempotency_key="fresh", input={"n": 2})
        assert again == Enqueued(job_id, job_id, True)
        assert lane.enqueue(id=job_id, input={"n": 3}) == again  # without a key
        assert lane.row(job_id).state is JobState.DONE
        assert lane.row(job_id).input == {"lane": lane.job}

    def test_enqueue_many_caller_ids_dedupe(self, lane, driver):
        """In a batch, a caller id that exists answers that row; the rest insert."""
        held, fresh = uuid7(), uuid7()
        lane.enqueue(id=held)
        answers = driver.enqueue_many(
            [
                lane.request(id=held, input={"n": 1}),
                lane.request(id=fresh),
                lane.request(),
            ]
        )
        assert [(a.id, a.deduped) for a in answers[:2]] == [
            (held, True),
            (fresh, False),
        ]
        assert answers[2].deduped is False and answers[2].id not in (held, fresh)
        assert lane.row(held).input == {"lane": lane.job}
        assert lane.row(answers[2].id).run_id == answers[2].id

    def test_enqueue_many_republished_batch_inserts_only_the_new_ids(
        self, lane, driver
    ):
        """A batch published again (the outbox relay after a lost mark) with
        one more id: the known ids answer their rows, whatever their state;
        only the new one is inserted."""
        ids = sorted(uuid7() for _ in range(3))
        first = driver.enqueue_many([lane.request(id=i, run_id=i) for i in ids[:2]])
        assert [(a.id, a.deduped) for a in first] == [(ids[0], False), (ids[1], False)]
        lane.ack(lane.claim_one())
        again = driver.enqueue_many([lane.request(id=i, run_id=i) for i in ids])
        assert [(a.id, a.deduped) for a in again] == [
            (ids[0], True),
            (ids[1], True),
            (ids[2], False),
        ]
        assert [lane.row(i).id for i in ids] == ids

    def test_enqueue_many_answers_in_order(self, lane, driver):
        """enqueue_many answers in request order, dedupes resolved."""
        holder = lane.enqueue(idempotency_key="held")
        answers = driver.enqueue_many(
            [
                lane.request(idempotency_key="one"),
                lane.request(idempotency_key="two", delay_ms=60_000),
                lane.request(idempotency_key="one"),
                lane.request(),
                lane.request(idempotency_key="held"),
            ]
        )
        assert [a.deduped for a in answers] == [False, False, True, False, True]
        assert answers[2].id == answers[0].id and answers[4].id == holder.id
        keys = [lane.row(a.id).idempotency_key for a in answers]
        assert keys == ["one", "two", "one", None, "held"]
        assert lane.row(answers[1].id).state is JobState.DELAYED
        assert driver.enqueue_many([]) == []

    def test_enqueue_many_refusal_leaves_nothing(self, lane, driver):
        """A batch refused under on_conflict='error' inserts none of its rows."""
        lane.enqueue(idempotency_key="held")
        fresh, clashing = uuid7(), uuid7()
        batch = [
            lane.request(id=fresh, idempotency_key="fresh"),
            lane.request(id=clashing, idempotency_key="held", on_conflict="error"),
        ]
        lane.refused("X_JOB_DUPLICATE", driver.enqueue_many, batch)
        assert driver.get(fresh) is None and driver.get(clashing) is None
        assert lane.enqueue(idempotency_key="fresh").deduped is False

    # -- claim -------------------------------------------------------------------

    def test_claimed_job_carries_the_lease(self, lane, clock):
        """A claim counts the attempt and leases the row until now + visibility."""
        enqueued = lane.enqueue(input={"n": 1}, priority=3, max_attempts=4)
        job = lane.claim_one("worker-a", visibility_ms=12_345)
        visible_at = clock.now() + timedelta(milliseconds=12_345)
        assert (job.id, job.run_id, job.input) == (enqueued.id, enqueued.id, {"n": 1})
        assert (job.attempt, job.claims, job.max_attempts, job.priority) == (1, 1, 4, 3)
        assert (job.claimed_by, job.visible_at) == ("worker-a", visible_at)
        row = lane.row(job.id)
        assert (row.state, row.claimed_by, row.claims) == ("running", "worker-a", 1)
        assert (row.visible_at, row.updated_at) == (visible_at, clock.now())

    def test_claimed_job_carries_when_it_was_due(self, lane, clock):
        """``run_at`` and ``claimed_at`` on the claim: the pickup latency."""
        due = clock.now() - timedelta(seconds=90)
        lane.enqueue(run_at=due)
        job = lane.claim_one()
        assert (job.run_at, job.claimed_at) == (due, clock.now())

    def test_limit_bounds_the_claim(self, lane):
        """A claim takes at most its limit; zero or less takes nothing."""
        for _ in range(3):
            lane.enqueue()
        assert lane.claim(limit=0) == ClaimResult([], [])
        assert lane.claim(limit=-1) == ClaimResult([], [])
        assert len(lane.claim(limit=2).claimed) == 2
        assert lane.stats().ready == 1

    def test_claim_order_priority_then_run_at_then_id(self, lane, clock):
        """Due rows are claimed by priority, then run_at, then id."""
        now = clock.now()
        smaller = uuid7()
        larger = UUID(int=smaller.int + 1)
        lane.enqueue(id=larger, run_at=now - timedelta(minutes=1))
        lane.enqueue(id=smaller, run_at=now - timedelta(minutes=1))
        last = lane.enqueue(priority=-5, run_at=now - timedelta(hours=1))
        oldest = lane.enqueue(run_at=now - timedelta(minutes=3))
        urgent = lane.enqueue(priority=5)
        order = [lane.claim_one().id for _ in range(5)]
        assert order == [urgent.id, oldest.id, smaller, larger, last.id]

    def test_lapsed_rows_join_the_claim_order(self, lane, clock):
        """Lapsed leases are re-taken in the same order as waiting rows."""
        low = lane.enqueue(priority=0)
        lane.claim_one()
        clock.advance(seconds=1)
        high = lane.enqueue(priority=5)
        lane.claim_one()
        middle = lane.enqueue(priority=1)
        clock.advance(milliseconds=VISIBILITY_MS + 1_000)
        order = [lane.claim_one("worker-b").id for _ in range(3)]
        assert order == [high.id, middle.id, low.id]

    def test_a_claimed_batch_comes_back_in_claim_order(self, lane, clock):
        """One claim of many rows answers them by priority, then run_at, then id.

        The worker runs a batch in the order it is answered: rows stored
        first (smaller ids, lower priorities) must not come back first.
        """
        now = clock.now()
        last = lane.enqueue(priority=-5)
        later = lane.enqueue(run_at=now - timedelta(minutes=1))
        earlier = lane.enqueue(run_at=now - timedelta(minutes=2))
        lapsed = lane.enqueue(priority=3)
        lane.claim_one("worker-a", visibility_ms=1_000)
        timer = lane.enqueue(priority=1, delay_ms=500)
        urgent = lane.enqueue(priority=5)
        clock.advance(seconds=2)
        result = lane.claim("worker-b", limit=10)
        expected = [urgent, lapsed, timer, earlier, later, last]
        assert _ids(result.claimed) == [e.id for e in expected]

    def test_delayed_row_waits_for_its_time(self, lane, clock):
        """A delayed row is not claimed before its run_at, and is claimed after."""
        enqueued = lane.enqueue(delay_ms=60_000)
        assert lane.row(enqueued.id).state is JobState.DELAYED
        assert lane.stats() == QueueStats(queue=lane.queue, delayed=1)
        clock.advance(seconds=59)
        assert lane.claim().claimed == []
        clock.advance(seconds=1)
        assert lane.stats() == QueueStats(queue=lane.queue, ready=1, oldest_ready_ms=0)
        assert lane.claim_one().id == enqueued.id
        at = clock.now() + timedelta(minutes=5)
        absolute = lane.row(lane.enqueue(run_at=at, delay_ms=1).id)
        assert (absolute.state, absolute.run_at) == (JobState.DELAYED, at)
        past = lane.enqueue(run_at=clock.now() - timedelta(minutes=5))
        assert lane.row(past.id).state is JobState.READY

    def test_due_suspended_row_is_claimed(self, lane, clock):
        """A parked row is claimed again once its run_at passes."""
        enqueued = lane.enqueue()
        assert lane.nack(lane.claim_one(), park=True, delay_ms=1_000) is True
        assert lane.row(enqueued.id).state is JobState.SUSPENDED
        assert lane.claim().claimed == []
        clock.advance(seconds=1)
        assert lane.claim_one().id == enqueued.id

    # -- settle ------------------------------------------------------------------

    def test_ack_many_answers_per_row(self, lane, driver):
        """ack_many answers each row, a stale identity alone missing."""
        for _ in range(3):
            lane.enqueue()
        a, b, c = lane.claim(limit=3).claimed
        stale = ClaimIdentity("worker-z", b.claims)
        answers = driver.ack_many(
            [
                AckRequest(job_id=a.id, identity=a.identity),
                AckRequest(job_id=b.id, identity=stale),
                AckRequest(job_id=c.id, identity=c.identity),
            ]
        )
        assert answers == [True, False, True]
        assert [lane.row(j.id).state for j in (a, b, c)] == ["done", "running", "done"]
        assert driver.ack_many([]) == []

    def test_ack_with_unsafe_result_lands(self, lane):
        """An ack whose result cannot be stored still lands (without it)."""
        for result in ({"at": object()}, {"text": "a\x00b"}, ["\ud800"]):
            lane.enqueue()
            assert lane.ack(lane.claim_one(), result=result) is True

    def test_settled_row_holds_no_lease(self, lane):
        """Ack and nack both clear claimed_by and visible_at."""
        acked, nacked = lane.enqueue(), lane.enqueue()
        lane.ack(lane.claim_one())
        lane.nack(lane.claim_one(), delay_ms=60_000)
        for job_id in (acked.id, nacked.id):
            row = lane.row(job_id)
            assert (row.claimed_by, row.visible_at) == (None, None)

    def test_uncounted_nack_never_below_zero(self, lane):
        """An uncounted nack hands the attempt back, never below zero."""
        enqueued = lane.enqueue()
        for claims in (1, 2, 3):
            job = lane.claim_one()
            assert (job.attempt, job.claims) == (1, claims)
            assert lane.nack(job, counts_as_attempt=False) is True
            assert lane.row(enqueued.id).attempt == 0

    def test_nack_error_rules(self, lane, clock):
        """A nack keeps the error unless given one; a new error replaces the stack."""
        enqueued = lane.enqueue(max_attempts=9)
        lane.nack(lane.claim_one(), error="X_ONE: first", stack="trace 1", delay_ms=500)
        row = lane.row(enqueued.id)
        assert (row.state, row.attempt) == (JobState.READY, 1)
        assert row.run_at == clock.now() + timedelta(milliseconds=500)
        assert (row.last_error, row.last_error_stack) == ("X_ONE: first", "trace 1")
        clock.advance(seconds=1)
        lane.nack(lane.claim_one())
        row = lane.row(enqueued.id)
        assert (row.last_error, row.last_error_stack) == ("X_ONE: first", "trace 1")
        lane.nack(lane.claim_one(), error="X_TWO: second")
        row = lane.row(enqueued.id)
        assert (row.last_error, row.last_error_stack) == ("X_TWO: second", None)
        long_stack = "x" * MAX_ERROR_STACK_LENGTH + "END"
        lane.nack(lane.claim_one(), error="X_THREE: third", stack=long_stack)
        stack = lane.row(enqueued.id).last_error_stack
        assert len(stack) == MAX_ERROR_STACK_LENGTH and stack.endswith("xEND")

    def test_heartbeat_extends_the_lease(self, lane, clock):
        """A landed heartbeat pushes the lease to now + visibility."""
        lane.enqueue()
        job = lane.claim_one()
        clock.advance(seconds=20)
        assert lane.heartbeat(job) is True
        assert lane.row(job.id).visible_at == clock.now() + timedelta(
            milliseconds=VISIBILITY_MS
        )
        clock.advance(seconds=20)
        assert lane.claim("worker-b").claimed == []
        clock.advance(seconds=10)
        assert lane.claim_one("worker-b").id == job.id

    def test_heartbeat_many_answers_ids_that_landed(self, lane, driver):
        """heartbeat_many answers the ids it renewed; no identity matches any."""
        for _ in range(3):
            lane.enqueue()
        a, b, c = lane.claim(limit=3).claimed
        stale = ClaimIdentity(c.claimed_by, c.claims + 1)
        held = [(a.id, a.identity), (b.id, b.identity), (c.id, stale)]
        assert driver.heartbeat_many(held, visibility_ms=VISIBILITY_MS) == {a.id, b.id}
        assert driver.heartbeat_many([], visibility_ms=VISIBILITY_MS) == set()
        assert driver.heartbeat(c.id, visibility_ms=1, identity=None) is True
        lane.ack(c)
        assert driver.heartbeat(c.id, visibility_ms=1, identity=None) is False

    def test_progress_is_fenced(self, lane, driver):
        """Progress lands under the live claim only."""
        enqueued = lane.enqueue()
        job = lane.claim_one()
        assert driver.record_progress(job.id, job.identity, {"done": 3, "of": 9})
        stale = ClaimIdentity("worker-z", job.claims)
        assert driver.record_progress(job.id, stale, {"done": 0}) is False
        assert lane.row(enqueued.id).progress == {"done": 3, "of": 9}
        lane.ack(job)
        assert driver.record_progress(job.id, job.identity, {"done": 9}) is False
        assert lane.row(enqueued.id).progress == {"done": 3, "of": 9}

    # -- states ------------------------------------------------------------------

    def test_unknown_state_refused(self):
        """A stored state this build does not know is refused, never cast."""
        with pytest.raises(JobsError) as info:
            parse_state("exploded")
        assert info.value.code == "X_JOB_ROW_STATUS_UNKNOWN"
        assert info.value.meta == {"state": "exploded"}
