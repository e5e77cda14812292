"""The listing and bulk half of the operator conformance checks.

Internal to :mod:`django_ultimate_jobs.testing.conformance` (mixed into
``DriverConformance`` through ``OperatorConformance``). Ids are allocated
ascending by the checks: UUIDv7s minted in one millisecond are not ordered,
and "newest first" / "oldest first" are defined on the id.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING
from uuid import UUID

from ..drivers.base import BulkResult, JobFilter
from ..ids import uuid7
from ..states import JobState

if TYPE_CHECKING:
    from .conformance import Lane

__all__ = ["BulkConformance"]


def _ascending_ids(count: int) -> list[UUID]:
    return sorted(uuid7() for _ in range(count))


def _dead_letters(lane: Lane, errors: list[str]) -> list[UUID]:
    """One dead job of ``lane`` per error, ids ascending."""
    ids = _ascending_ids(len(errors))
    for job_id, error in zip(ids, errors, strict=True):
        lane.enqueue(id=job_id)
        lane.nack(lane.claim_one(), dead_letter=True, error=error)
    return ids


def _dead_group(lane: Lane, code: str) -> JobFilter:
    return JobFilter(
        queue=lane.queue, states=frozenset({JobState.DEAD}), error_code=code
    )


class BulkConformance:
    """Checks of ``list_jobs`` and the bulk verbs."""

    def test_list_jobs_pages_newest_first(self, lane, driver, clock):
        """Keyset pages, newest id first, cover every row once."""
        ids = _ascending_ids(5)
        for job_id in ids:
            lane.enqueue(id=job_id)
        lane.sibling("other").enqueue()
        where = JobFilter(queue=lane.queue)
        first = driver.list_jobs(where, before=None, limit=2)
        assert [r.id for r in first] == ids[:2:-1]
        second = driver.list_jobs(where, before=first[-1].id, limit=2)
        third = driver.list_jobs(where, before=second[-1].id, limit=2)
        assert [r.id for r in second + third] == [ids[2], ids[1], ids[0]]
        assert driver.list_jobs(where, before=ids[0], limit=2) == []
        assert first[0] == driver.get(ids[4])

    def test_list_jobs_filters(self, lane, driver, clock):
        """State, name, tenant, id range and created range each narrow a page."""
        ids = _ascending_ids(3)
        lane.enqueue(id=ids[0], tenant_id="acme")
        clock.advance(minutes=1)
        lane.enqueue(id=ids[1], delay_ms=60_000)
        clock.advance(minutes=1)
        replace(lane, job=f"{lane.job}-b").enqueue(id=ids[2])

        def listed(**fields):
            where = JobFilter(queue=lane.queue, **fields)
            return [r.id for r in driver.list_jobs(where, before=None, limit=10)]

        assert listed() == ids[::-1]
        assert listed(states=frozenset({JobState.DELAYED})) == [ids[1]]
        assert listed(name=lane.job) == [ids[1], ids[0]]
        assert listed(tenant_id="acme") == [ids[0]]
        assert listed(id_min=ids[1], id_max=ids[1]) == [ids[1]]
        start = clock.now() - timedelta(minutes=2)
        assert listed(created_from=start + timedelta(minutes=1)) == ids[:0:-1]
        assert listed(created_to=start + timedelta(minutes=1)) == [ids[0]]

    def test_count_reads_the_listing_filters(self, lane, driver, clock):
        """Count answers how many rows a listing with the same filters holds."""
        lane.enqueue(tenant_id="acme")
        lane.enqueue(delay_ms=60_000)
        lane.enqueue()
        lane.ack(lane.claim_one())
        lane.enqueue()
        lane.nack(lane.claim_one(), delay_ms=600_000)  # a retry in backoff: ready
        lane.enqueue()
        lane.nack(lane.claim_one(), dead_letter=True, error="X_BOOM: no")
        lane.enqueue()
        lane.claim_one()
        other = replace(lane, job=f"{lane.job}-b")
        other.enqueue()
        lane.sibling("other").enqueue()

        def count(**fields):
            where = JobFilter(queue=lane.queue, **fields)
            counted = driver.count(where)
            assert counted == len(driver.list_jobs(where, before=None, limit=100))
            return counted

        assert count() == 7
        assert count(states=frozenset({JobState.READY})) == 3
        assert count(states=frozenset({JobState.DELAYED, JobState.RUNNING})) == 2
        assert count(states=frozenset({JobState.DEAD}), error_code="X_BOOM") == 1
        assert count(states=frozenset({JobState.DONE})) == 1
        assert count(states=frozenset()) == 0
        assert count(name=other.job) == 1
        assert count(tenant_id="acme") == 1
        assert driver.count(JobFilter(queue=f"{lane.queue}-none")) == 0

    def _dead(self, lane, job_id, **fields):
        lane.enqueue(id=job_id, **fields)
        lane.nack(lane.claim_one(), dead_letter=True, error="X_BOOM: no")

    def test_requeue_many_moves_oldest_of_each_key(self, lane, driver, clock):
        """One row per key moves, held keys stay, and remaining reaches zero."""
        first, twin, plain, held = _ascending_ids(4)
        self._dead(lane, first, idempotency_key="k")
        self._dead(lane, twin, idempotency_key="k")
        self._dead(lane, plain)
        self._dead(lane, held, idempotency_key="h")
        holder = lane.enqueue(idempotency_key="h", delay_ms=600_000)
        where = JobFilter(queue=lane.queue, states=frozenset({JobState.DEAD}))
        assert driver.requeue_many(where, limit=1) == BulkResult(1, 1)
        record = lane.row(first)
        assert (record.state, record.attempt, record.run_at) == (
            JobState.READY,
            0,
            clock.now(),
        )
        assert driver.requeue_many(where, limit=1) == BulkResult(1, 0)
        assert lane.row(plain).state is JobState.READY
        assert driver.requeue_many(where, limit=1) == BulkResult(0, 0)
        assert {lane.row(i).state for i in (twin, held)} == {JobState.DEAD}
        assert lane.row(holder.id).state is JobState.DELAYED

    def test_requeue_many_by_error_code(self, lane, driver):
        """An error code narrows a bulk requeue to that dead-letter group."""
        declined, timeout, prefix_only = _dead_letters(
            lane, ["X_DECLINED: card", "X_TIMEOUT: slow", "X_DECLINED_TWICE: card"]
        )
        where = _dead_group(lane, "X_DECLINED")
        listed = driver.list_jobs(where, before=None, limit=10)
        assert [r.id for r in listed] == [declined]
        assert driver.requeue_many(where, limit=10) == BulkResult(1, 0)
        assert [lane.row(i).state for i in (declined, timeout, prefix_only)] == [
            JobState.READY,
            JobState.DEAD,
            JobState.DEAD,
        ]

    def test_requeue_many_by_an_error_without_a_message(self, lane, driver):
        """A bare ``RuntimeError()`` (stored without a colon) is in its group.

        The group is the text before the first colon, or the whole error
        when it has none; ``RuntimeErrorX`` is another group.
        """
        bare, with_message, longer = _dead_letters(
            lane, ["RuntimeError", "RuntimeError: boom", "RuntimeErrorX"]
        )
        where = _dead_group(lane, "RuntimeError")
        listed = driver.list_jobs(where, before=None, limit=10)
        assert [r.id for r in listed] == [with_message, bare]
        assert driver.requeue_many(where, limit=10) == BulkResult(2, 0)
        assert lane.row(longer).state is JobState.DEAD

    def test_remove_many_skips_running(self, lane, driver, put_step, step_names):
        """Remove deletes oldest first, never a running row, with its steps."""
        running, done, queued, later = _ascending_ids(4)
        lane.enqueue(id=running)
        job = lane.claim_one()
        lane.enqueue(id=done)
        finished = lane.claim_one()
        put_step(finished.run_id, "fetch", finished.visible_at)
        lane.ack(finished)
        lane.enqueue(id=queued)
        lane.enqueue(id=later)
        where = JobFilter(queue=lane.queue)
        assert driver.remove_many(where, limit=2) == BulkResult(2, 1)
        assert driver.get(done) is None and driver.get(queued) is None
        assert step_names(finished.run_id) == set()
        assert driver.remove_many(where, limit=2) == BulkResult(1, 0)
        assert lane.row(running).state is JobState.RUNNING
        assert lane.ack(job)

    def test_promote_many_moves_waiting_rows(self, lane, driver, clock):
        """Delayed rows and retries in backoff run now; due and parked rows stay."""
        backoff, delayed, later, due = _ascending_ids(4)
        lane.enqueue(id=backoff)
        lane.nack(lane.claim_one(), delay_ms=600_000)
        lane.enqueue(id=delayed, delay_ms=60_000)
        lane.enqueue(id=later, delay_ms=120_000)
        lane.enqueue(id=due)
        lane.enqueue(priority=10)  # claimed before the due row, then parked
        lane.nack(lane.claim_one(), park=True, delay_ms=600_000)
        waiting = frozenset({JobState.READY, JobState.DELAYED})
        where = JobFilter(queue=lane.queue, states=waiting)
        assert driver.promote_many(where, limit=2) == BulkResult(2, 1)
        assert lane.row(backoff).run_at == clock.now()
        assert (lane.row(delayed).state, lane.row(delayed).run_at) == (
            JobState.READY,
            clock.now(),
        )
        assert driver.promote_many(where, limit=2) == BulkResult(1, 0)
        assert lane.row(later).state is JobState.READY
        assert lane.stats().suspended == 1

    def test_counter_totals_sum_settled_outcomes(self, lane, driver, clock):
        """Totals sum each job's buckets from a moment on."""
        start = clock.now()
        lane.enqueue()
        lane.ack(lane.claim_one(), duration_ms=30)
        clock.advance(minutes=2)
        lane.enqueue()
        lane.nack(lane.claim_one(), dead_letter=True, duration_ms=10)
        totals = {t.job: t for t in driver.counter_totals(start)}
        mine = totals[lane.job]
        assert (mine.done, mine.dead, mine.retried, mine.failed) == (1, 1, 0, 0)
        assert mine.duration_ms == 40
        later = {
            t.job for t in driver.counter_totals(clock.now() + timedelta(minutes=1))
        }
        assert lane.job not in later
