"""The fleet-wide concurrency checks: slots of capped jobs.

Internal to :mod:`django_ultimate_jobs.testing.conformance` (mixed into
``DriverConformance``). A capped row carries its lease key and limit from
enqueue; a claim with ``capped=True`` takes it only together with a free
slot of its key, a renewal keeps the slot only while it is unexpired and
still the claim's, and a settle that landed frees it (one that lost its
claim frees nothing). Leases lapse by moving the clock, never by sleeping.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..drivers.base import ClaimedJob, Enqueued
from ..ids import uuid7
from ..states import JobState

if TYPE_CHECKING:
    from .conformance import Lane

__all__ = ["LimitsConformance"]

_SHORT_MS = 1_000
_LAST_ID = UUID(int=0)


def _capped(lane: Lane, limit: int, key: str | None = None, **fields: Any) -> Enqueued:
    """Enqueue a row of ``lane`` capped at ``limit`` (per ``key`` when given).

    Ids ascend with each call (UUIDv7s minted in one millisecond are not
    ordered), so rows due together are claimed in enqueue order.
    """
    global _LAST_ID
    _LAST_ID = max(uuid7(), UUID(int=_LAST_ID.int + 1))
    lease_key = f"job:{lane.job}" if key is None else f"job-key:{lane.job}:{key}"
    return lane.enqueue(
        id=_LAST_ID, concurrency_key=lease_key, concurrency_limit=limit, **fields
    )


def _claim(lane: Lane, worker: str, **options: Any) -> list[ClaimedJob]:
    result = lane.claim(worker, capped=True, **options)
    assert not result.buried, result
    return result.claimed


class LimitsConformance:
    """Slot checks; the lane fixture comes from ``DriverConformance``."""

    def test_cap_claims_only_rows_with_a_free_slot(self, lane):
        """A full key's rows stay ready, their attempt unspent, until a slot frees."""
        rows = {_capped(lane, 2).id for _ in range(3)}
        first = _claim(lane, "worker-a")
        assert len(first) == 2
        assert _claim(lane, "worker-b") == []
        (left,) = rows - {job.id for job in first}
        waiting = lane.row(left)
        assert (waiting.state, waiting.attempt) == (JobState.READY, 0)
        assert lane.ack(first[0]) is True
        assert [job.id for job in _claim(lane, "worker-b")] == [left]

    def test_uncapped_claim_leaves_capped_rows(self, lane):
        """A claim without ``capped`` takes the plain rows beside capped ones."""
        capped = _capped(lane, 5)
        plain = lane.enqueue()
        claimed = lane.claim("worker-a").claimed
        assert [job.id for job in claimed] == [plain.id]
        assert [job.id for job in _claim(lane, "worker-a")] == [capped.id]

    def test_keyed_cap_is_per_key(self, lane):
        """Limit 1 per key: one run of each key at a time, keys independent."""
        a1, a2 = _capped(lane, 1, "a"), _capped(lane, 1, "a")
        b1 = _capped(lane, 1, "b")
        claimed = _claim(lane, "worker-a")
        assert {job.id for job in claimed} == {a1.id, b1.id}
        assert _claim(lane, "worker-b") == []
        assert lane.ack(next(job for job in claimed if job.id == a1.id)) is True
        assert [job.id for job in _claim(lane, "worker-b")] == [a2.id]

    def test_nack_frees_the_slot(self, lane):
        """A retry hands its slot back with the row (no attempt spent waiting)."""
        first, second = _capped(lane, 1), _capped(lane, 1)
        held = _claim(lane, "worker-a")
        assert [job.id for job in held] == [first.id]
        assert lane.nack(held[0], delay_ms=60_000, error="boom") is True
        assert [job.id for job in _claim(lane, "worker-b")] == [second.id]

    def test_lapsed_slot_returns_within_one_lease(self, lane, clock):
        """A dead holder's slot is free once its lease passes; the lapse is re-taken."""
        first = _capped(lane, 1)
        held = _claim(lane, "worker-a", visibility_ms=_SHORT_MS, limit=1)
        assert [job.id for job in held] == [first.id]
        second = _capped(lane, 1)
        clock.advance(timedelta(milliseconds=_SHORT_MS - 1))
        assert _claim(lane, "worker-b") == []
        clock.advance(timedelta(milliseconds=2))
        # The slot is free again, for one run only: the lapse or the next row.
        (again,) = _claim(lane, "worker-b")
        assert again.id in {first.id, second.id}
        assert _claim(lane, "worker-c") == []
        assert lane.ack(again) is True
        (last,) = _claim(lane, "worker-c")
        assert {again.id, last.id} == {first.id, second.id}
        assert last.retaken is (last.id == first.id)

    def test_fenced_settle_never_frees_a_slot_it_lost(self, lane, clock):
        """The old holder's late ack lands nowhere and frees nothing."""
        first = _capped(lane, 1)
        (old,) = _claim(lane, "worker-a", visibility_ms=_SHORT_MS, limit=1)
        clock.advance(timedelta(milliseconds=_SHORT_MS + 1))
        (new,) = _claim(lane, "worker-b", limit=1)
        assert (new.id, new.retaken) == (first.id, True)
        second = _capped(lane, 1)
        assert lane.ack(old) is False
        assert _claim(lane, "worker-c") == []
        assert lane.ack(new) is True
        assert [job.id for job in _claim(lane, "worker-c")] == [second.id]

    def test_renewal_keeps_the_slot_and_a_lapsed_one_is_lost(self, lane, clock, driver):
        """Renewed in time the slot holds; lapsed, the renewal says it is lost."""
        _capped(lane, 1)
        (job,) = _claim(lane, "worker-a", visibility_ms=_SHORT_MS)
        clock.advance(timedelta(milliseconds=_SHORT_MS - 1))
        renewed = driver.heartbeat_many(
            [(job.id, job.identity)], visibility_ms=_SHORT_MS
        )
        assert (set(renewed), set(renewed.slots_lost)) == ({job.id}, set())
        clock.advance(timedelta(milliseconds=_SHORT_MS + 1))
        lost = driver.heartbeat_many([(job.id, job.identity)], visibility_ms=_SHORT_MS)
        # The row is still this claim's (nobody re-took it), the slot is not.
        assert (set(lost), set(lost.slots_lost)) == ({job.id}, {job.id})

    def test_when_busy_fail_is_claimed_busy_only_on_evidence(self, lane):
        """Another job holding the key: the row comes back busy, without a slot."""
        holder, refused = _capped(lane, 1), _capped(lane, 1)
        names = frozenset({lane.job})
        (running,) = _claim(lane, "worker-a", limit=1, refuse_busy=names)
        assert running.id == holder.id and not running.key_busy
        (busy,) = _claim(lane, "worker-b", refuse_busy=names)
        assert (busy.id, busy.key_busy) == (refused.id, True)
        assert lane.nack(
            busy, fail=True, counts_as_attempt=False, error="X_JOB_KEY_BUSY"
        )
        row = lane.row(refused.id)
        assert (row.state, row.attempt) == (JobState.FAILED, 0)
        # The refusal held no slot: the holder's settle frees the key.
        assert lane.ack(running) is True

    def test_a_wait_job_is_never_claimed_busy(self, lane):
        """Without ``refuse_busy`` a full key's row just waits."""
        _capped(lane, 1)
        waiting = _capped(lane, 1)
        _claim(lane, "worker-a", limit=1)
        assert _claim(lane, "worker-b") == []
        assert lane.row(waiting.id).state == JobState.READY

    def test_job_slots_and_locks_share_one_table_and_one_fence(self, lane):
        """A claimed slot is listed by ``driver.leases`` beside locks, and its
        fence comes from the same counter: greater than an earlier lock's, less
        than a later one's (an operator sees every holder in one place)."""
        leases = lane.driver.leases
        before = leases.acquire(f"lock:{lane.job}:before", 1, _SHORT_MS, "app")
        _capped(lane, 1)
        (claimed,) = _claim(lane, "worker-a")
        after = leases.acquire(f"lock:{lane.job}:after", 1, _SHORT_MS, "app")
        assert before is not None and after is not None
        (slot,) = leases.records(prefix=f"job:{lane.job}")
        assert slot.holder == f"worker-a:{claimed.id}"
        assert before.fence < slot.fence < after.fence
