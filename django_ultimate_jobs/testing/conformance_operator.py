"""The operator half of the conformance suite: stats, verbs, pauses, workers.

Internal to :mod:`django_ultimate_jobs.testing.conformance`, whose
``DriverConformance`` inherits these checks; see that module for the
fixtures a driver's test class provides.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..drivers.base import (
    HISTORY_RETRIED,
    ClaimResult,
    JobDriver,
    JobFilter,
    PausedName,
    QueueStats,
    WorkerRecord,
)
from ..ids import uuid7
from ..states import JobState
from .conformance_bulk import BulkConformance

if TYPE_CHECKING:
    from .conformance import Lane

__all__ = ["OperatorConformance"]


class OperatorConformance(BulkConformance):
    """Checks of the read and operator surface (mixed into DriverConformance)."""

    def test_paused_queue_not_claimed(self, lane, driver, clock):
        """A paused queue is skipped, lapsed leases included, until resumed."""
        other = lane.sibling("other")
        held = lane.enqueue()
        lane.claim_one(visibility_ms=1_000)
        waiting, sibling = lane.enqueue(), other.enqueue()
        paused = driver.pause_queue(lane.queue)
        assert PausedName(lane.queue, clock.now()) in paused
        clock.advance(seconds=5)
        both = [lane.queue, other.queue]
        claimed = lane.claim("worker-b", queues=both).claimed
        assert [job.id for job in claimed] == [sibling.id]
        late = lane.enqueue()
        assert late.deduped is False
        assert lane.queue not in [p.name for p in driver.resume_queue(lane.queue)]
        claimed = lane.claim("worker-b", queues=both).claimed
        assert {job.id for job in claimed} == {held.id, waiting.id, late.id}

    def test_paused_list_sorted_keeping_first_pause(self, lane, driver, clock):
        """Paused queues list in code-point order with their first paused_at."""
        upper, lower = lane.sibling("Zeta").queue, lane.sibling("alpha").queue
        first = clock.now()
        driver.pause_queue(lower)
        clock.advance(seconds=10)
        driver.pause_queue(upper)
        clock.advance(seconds=10)
        listed = driver.pause_queue(lower)
        names = [p.name for p in listed]
        assert names == sorted(names) and names.index(upper) < names.index(lower)
        paused_at = {p.name: p.paused_at for p in listed}
        assert paused_at[lower] == first
        assert paused_at[upper] == first + timedelta(seconds=10)
        assert driver.paused_queues() == listed
        assert lower not in [p.name for p in driver.resume_queue(lower)]
        assert driver.resume_queue(lower) == driver.paused_queues()
        driver.resume_queue(upper)

    def test_stats_buckets_are_exclusive(self, lane, driver, clock):
        """Each counted row is in exactly one bucket; done and cancelled are not."""

        def settle(**nack: Any) -> None:
            lane.enqueue()
            job = lane.claim_one()
            assert lane.nack(job, **nack) if nack else lane.ack(job)

        settle()
        settle(dead_letter=True)
        settle(fail=True)
        settle(delay_ms=600_000)  # a retry in backoff: delayed
        settle(park=True)  # due, but suspended only
        clock.advance(minutes=1)
        driver.cancel(lane.enqueue().id)
        lane.enqueue(priority=10)  # outranks the parked row
        lane.claim_one()
        lane.enqueue()
        lane.enqueue(delay_ms=60_000)
        counted = {"running": 1, "suspended": 1, "failed": 1, "dead": 1}
        assert lane.stats() == QueueStats(
            queue=lane.queue, ready=1, delayed=2, oldest_ready_ms=0, **counted
        )
        clock.advance(minutes=3)
        assert lane.stats() == QueueStats(
            queue=lane.queue, ready=2, delayed=1, oldest_ready_ms=180_000, **counted
        )

    def test_stats_sorted_by_queue_code_points(self, lane, driver):
        """Stats list queues in code-point order, like the paused list."""
        upper, lower = lane.sibling("Zeta"), lane.sibling("alpha")
        lower.enqueue()
        upper.enqueue()
        queues = [s.queue for s in driver.stats()]
        assert queues == sorted(queues)
        assert queues.index(upper.queue) < queues.index(lower.queue)

    def test_requeue_finished_job(self, lane, driver, clock):
        """Requeue makes a finished job ready, attempt 0, due now, claimable."""
        enqueued = lane.enqueue()
        lane.nack(lane.claim_one(), dead_letter=True, error="X_BOOM: no")
        clock.advance(minutes=1)
        record = driver.requeue(enqueued.id)
        assert (record.state, record.attempt) == (JobState.READY, 0)
        assert record.run_id == enqueued.run_id
        assert (record.run_at, record.updated_at) == (clock.now(), clock.now())
        assert (record.claimed_by, record.visible_at) == (None, None)
        assert lane.row(enqueued.id) == record
        again = lane.claim_one()
        assert (again.id, again.attempt, again.claims) == (enqueued.id, 1, 2)

    def test_a_requeue_is_an_entry_in_the_history(self, lane, driver, clock):
        """A retry (one job, or in bulk) appends ``{"event": "retried"}``;
        the next attempt counts from 1 again, after it."""
        enqueued = lane.enqueue()
        lane.nack(lane.claim_one("worker-a"), dead_letter=True, error="X_BOOM: no")
        clock.advance(minutes=1)
        driver.requeue(enqueued.id)
        lane.nack(lane.claim_one("worker-b"), dead_letter=True, error="X_BOOM: no")
        clock.advance(minutes=1)
        where = JobFilter(queue=lane.queue, states=frozenset({JobState.DEAD}))
        assert driver.requeue_many(where, limit=10).affected == 1
        assert lane.ack(lane.claim_one("worker-c"))
        history = lane.row(enqueued.id).history or []
        assert [
            (e.get("event"), e.get("attempt"), e.get("worker")) for e in history
        ] == [
            (None, 1, "worker-a"),
            (HISTORY_RETRIED, None, None),
            (None, 1, "worker-b"),
            (HISTORY_RETRIED, None, None),
            (None, 1, "worker-c"),
        ]
        assert datetime.fromisoformat(history[3]["at"]) == clock.now()
        assert "from_step" not in history[1]

    def test_requeue_refusals(self, lane, driver):
        """Requeue refuses unknown ids, live jobs, and keys a live job holds."""
        lane.refused("X_JOB_NOT_FOUND", driver.requeue, uuid7())
        ready = lane.enqueue()
        lane.refused("X_JOB_NOT_REQUEUEABLE", driver.requeue, ready.id)
        lane.claim_one()
        error = lane.refused("X_JOB_NOT_REQUEUEABLE", driver.requeue, ready.id)
        assert error.meta["state"] == "running"
        keyed = lane.sibling("keyed")
        first = keyed.enqueue(idempotency_key="k")
        keyed.nack(keyed.claim_one(), dead_letter=True)
        holder = keyed.enqueue(idempotency_key="k")
        error = lane.refused("X_JOB_DUPLICATE", driver.requeue, first.id)
        assert error.meta["holder"] == str(holder.id)
        assert keyed.row(first.id).state is JobState.DEAD

    def test_requeue_from_step(self, lane, driver, clock, put_step, step_names):
        """Requeue from a step drops it and the steps started after it."""
        enqueued = lane.enqueue()
        job = lane.claim_one()
        start = clock.now()
        # "twin" starts in the same millisecond as "charge", so it is kept.
        offsets = {"fetch": 0, "charge": 1_000_100, "twin": 1_000_900}
        offsets.update({"receipt": 1_001_000, "email": 2_000_000})
        for name, offset_us in offsets.items():
            put_step(job.run_id, name, start + timedelta(microseconds=offset_us))
        refusal = "X_JOB_NOT_REQUEUEABLE"
        lane.refused(refusal, driver.requeue, job.id, from_step="charge")
        assert step_names(job.run_id) == set(offsets)
        lane.ack(job)
        driver.requeue(enqueued.id, from_step="charge")
        assert step_names(job.run_id) == {"fetch", "twin"}
        (*_, retried) = lane.row(enqueued.id).history or [{}]
        assert (retried["event"], retried["from_step"]) == (HISTORY_RETRIED, "charge")

    def test_requeue_from_an_unknown_step_is_refused(
        self, lane, driver, clock, put_step, step_names
    ):
        """A step the run never recorded: X_STEP_NOT_FOUND naming its steps.

        Not a plain retry: nothing moves and no step is dropped, whatever
        the name holds (text PostgreSQL cannot store included).
        """
        enqueued = lane.enqueue()
        job = lane.claim_one()
        for offset, name in enumerate(("fetch", "charge")):
            put_step(job.run_id, name, clock.now() + timedelta(seconds=offset))
        lane.nack(job, dead_letter=True, error="X_BOOM: no")
        for unknown in ("missing", "fetch\x00", "charge\ud800"):
            error = lane.refused(
                "X_STEP_NOT_FOUND", driver.requeue, enqueued.id, from_step=unknown
            )
            assert error.meta["steps"] == ["fetch", "charge"]
            assert "'fetch', 'charge'" in error.cause
            assert lane.row(enqueued.id).state is JobState.DEAD
            assert step_names(job.run_id) == {"fetch", "charge"}
        bare = lane.sibling("bare")
        stepless = bare.enqueue()
        bare.ack(bare.claim_one())
        error = lane.refused(
            "X_STEP_NOT_FOUND", driver.requeue, stepless.id, from_step="any"
        )
        assert error.meta["steps"] == [] and "its steps: none" in error.cause
        assert driver.requeue(enqueued.id, from_step="charge").state is JobState.READY
        assert step_names(job.run_id) == {"fetch"}

    def test_promote_waiting_job(self, lane, driver, clock):
        """Promote makes a delayed or backing-off job due now and claimable."""
        delayed = lane.enqueue(delay_ms=3_600_000)
        record = driver.promote(delayed.id)
        assert (record.state, record.run_at) == (JobState.READY, clock.now())
        assert lane.claim_one().id == delayed.id
        backoff = lane.enqueue()
        lane.nack(lane.claim_one(), delay_ms=600_000)
        assert driver.promote(backoff.id).run_at == clock.now()
        assert lane.claim_one().id == backoff.id
        due_at = clock.now() - timedelta(minutes=1)
        due = lane.enqueue(run_at=due_at)
        clock.advance(seconds=1)
        record = driver.promote(due.id)
        assert (record.run_at, record.updated_at) == (due_at, clock.now())

    def test_promote_refusals(self, lane, driver):
        """Promote refuses unknown ids and running, suspended or finished jobs."""
        lane.refused("X_JOB_NOT_FOUND", driver.promote, uuid7())
        running = lane.enqueue()
        lane.claim_one()
        error = lane.refused("X_JOB_NOT_PROMOTABLE", driver.promote, running.id)
        assert error.meta["state"] == "running"
        parked = lane.enqueue()
        lane.nack(lane.claim_one(), park=True, delay_ms=600_000)
        lane.refused("X_JOB_NOT_PROMOTABLE", driver.promote, parked.id)
        done = lane.sibling("done")
        done_id = done.enqueue().id
        done.ack(done.claim_one())
        lane.refused("X_JOB_NOT_PROMOTABLE", driver.promote, done_id)

    def test_cancel_queued_job(self, lane, driver, clock):
        """Cancelling a queued job records the reason; it is never claimed."""
        enqueued = lane.enqueue()
        record = driver.cancel(enqueued.id, reason="not needed")
        assert (record.state, record.last_error) == (JobState.CANCELLED, "not needed")
        assert record.updated_at == clock.now() and lane.row(enqueued.id) == record
        assert lane.claim() == ClaimResult([], [])
        assert lane.stats() is None

    def test_cancel_running_job_breaks_its_fence(self, lane, driver):
        """A cancelled running job's ack, nack and heartbeat all miss."""
        enqueued = lane.enqueue()
        job = lane.claim_one()
        lane.nack(job, error="X_FLAKY: once")
        job = lane.claim_one()
        record = driver.cancel(enqueued.id)
        assert (record.state, record.claimed_by, record.visible_at) == (
            (JobState.CANCELLED, None, None)
        )
        assert record.last_error == "X_FLAKY: once"
        assert lane.heartbeat(job) is False
        assert lane.ack(job) is False and lane.nack(job) is False
        assert lane.row(enqueued.id).state is JobState.CANCELLED

    def test_cancel_refusals(self, lane, driver):
        """Cancel refuses finished and unknown jobs, leaving them as they ended."""
        lane.refused("X_JOB_NOT_CANCELLABLE", driver.cancel, uuid7())
        done = lane.enqueue()
        lane.ack(lane.claim_one())
        before = lane.row(done.id)
        lane.refused("X_JOB_NOT_CANCELLABLE", driver.cancel, done.id, reason="late")
        assert lane.row(done.id) == before
        cancelled = lane.enqueue()
        driver.cancel(cancelled.id)
        lane.refused("X_JOB_NOT_CANCELLABLE", driver.cancel, cancelled.id)

    def test_remove(self, lane, driver, put_step, step_names):
        """Remove deletes a job and its steps, refuses running, ignores unknown."""
        assert driver.remove(uuid7()) is False
        running = lane.enqueue()
        job = lane.claim_one()
        put_step(job.run_id, "fetch", job.visible_at)
        lane.refused("X_JOB_NOT_REMOVABLE", driver.remove, running.id)
        lane.ack(job)
        assert driver.remove(running.id) is True
        assert driver.get(running.id) is None and step_names(job.run_id) == set()
        queued = lane.enqueue(idempotency_key="k")
        assert driver.remove(queued.id) is True
        assert lane.enqueue(idempotency_key="k").deduped is False

    def _worker(self, lane: Lane, suffix: str, **fields: Any) -> WorkerRecord:
        moment = datetime(2000, 1, 1, tzinfo=UTC)  # the driver stamps times
        fields = {"host": "host-1", "pid": 41, "in_flight": [], **fields}
        return WorkerRecord(
            id=f"{lane.queue}-{suffix}",
            queues=[lane.queue],
            concurrency=4,
            started_at=moment,
            heartbeat_at=moment,
            expires_at=moment,
            **fields,
        )

    def _listed(self, driver: JobDriver, lane: Lane) -> dict[str, WorkerRecord]:
        workers = driver.workers()
        assert [w.id for w in workers] == sorted(w.id for w in workers)
        return {w.id: w for w in workers if w.id.startswith(lane.queue)}

    def test_worker_registry(self, lane, driver, clock):
        """Announced workers list by id until they lapse or are forgotten."""
        start, a_id, b_id = clock.now(), f"{lane.queue}-a", f"{lane.queue}-b"
        driver.announce_worker(self._worker(lane, "b"), ttl_ms=10_000)
        driver.announce_worker(self._worker(lane, "a", in_flight=["j1"]), ttl_ms=20_000)
        listed = self._listed(driver, lane)
        assert list(listed) == [a_id, b_id]
        assert listed[a_id] == replace(
            self._worker(lane, "a", in_flight=["j1"]),
            started_at=start,
            heartbeat_at=start,
            expires_at=start + timedelta(seconds=20),
        )
        clock.advance(seconds=5)
        again = self._worker(lane, "a", host="host-2", pid=7, in_flight=["j2", "j3"])
        driver.announce_worker(again, ttl_ms=20_000)
        # A re-announce moves the in-flight ids and the times, nothing else.
        assert self._listed(driver, lane)[a_id] == replace(
            self._worker(lane, "a", in_flight=["j2", "j3"]),
            started_at=start,
            heartbeat_at=clock.now(),
            expires_at=clock.now() + timedelta(seconds=20),
        )
        clock.advance(seconds=5)
        assert list(self._listed(driver, lane)) == [a_id]
        driver.forget_worker(a_id)
        driver.forget_worker(f"{lane.queue}-never")
        assert self._listed(driver, lane) == {}

    def test_idle_claim_refreshes_worker_row(self, lane, driver, clock):
        """A claim carrying registry_ttl_ms refreshes its worker's row."""
        worker = self._worker(lane, "idle", in_flight=["j1"])
        driver.announce_worker(worker, ttl_ms=10_000)
        clock.advance(seconds=5)
        lane.claim(worker.id)
        assert self._listed(driver, lane)[worker.id].in_flight == ["j1"]
        lane.claim(worker.id, registry_ttl_ms=10_000)
        row = self._listed(driver, lane)[worker.id]
        assert (row.in_flight, row.heartbeat_at) == ([], clock.now())
        assert row.expires_at == clock.now() + timedelta(seconds=10)
        lane.claim(f"{lane.queue}-unknown", registry_ttl_ms=10_000)
        assert list(self._listed(driver, lane)) == [worker.id]
