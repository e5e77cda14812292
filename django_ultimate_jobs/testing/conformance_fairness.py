"""The tenant-fairness half of the claim checks: ``ClaimOptions.skip_tenants``.

Internal to :mod:`django_ultimate_jobs.testing.conformance` (mixed into
``DriverConformance``). The worker passes the tenants at their in-process
limit (``worker/limits.py``); the claim must skip their waiting rows (of
capped jobs too), treat
jobs without a tenant as a bucket of their own, and still re-take lapsed
leases of any tenant (the worker sheds those).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..states import JobState

if TYPE_CHECKING:
    from ..clock import ManualClock
    from .conformance import Lane

__all__ = ["FairnessConformance"]


class FairnessConformance:
    """Claims that skip the rows of full tenants."""

    def test_a_full_tenant_is_skipped_and_the_next_reached(self, lane: Lane) -> None:
        """Rows of a skipped tenant ahead in claim order do not hide the others'."""
        flood = [lane.enqueue(tenant_id="a", priority=5).id for _ in range(5)]
        other = lane.enqueue(tenant_id="b").id
        bare = lane.enqueue().id
        claimed = lane.claim(limit=10, skip_tenants=frozenset({"a"})).claimed
        assert sorted(job.id for job in claimed) == sorted([other, bare])
        assert {lane.row(job_id).state for job_id in flood} == {JobState.READY}
        assert {lane.row(job_id).attempt for job_id in flood} == {0}
        again = lane.claim(limit=10).claimed
        assert sorted(job.id for job in again) == sorted(flood)

    def test_jobs_without_a_tenant_are_a_bucket_of_their_own(
        self, lane: Lane, clock: ManualClock
    ) -> None:
        """``None`` skips rows without a tenant only; a named tenant never skips them."""
        bare = lane.enqueue().id
        due = lane.enqueue(delay_ms=1_000).id
        named = lane.enqueue(tenant_id="a").id
        clock.advance(seconds=1)
        only_named = lane.claim(limit=10, skip_tenants=frozenset({None}))
        assert [job.id for job in only_named.claimed] == [named]
        rest = lane.claim(limit=10, skip_tenants=frozenset({"a", "b"}))
        assert sorted(job.id for job in rest.claimed) == sorted([bare, due])

    def test_due_rows_of_a_full_tenant_wait_too(
        self, lane: Lane, clock: ManualClock
    ) -> None:
        """A delayed row of a skipped tenant is not claimed once due."""
        delayed = lane.enqueue(tenant_id="a", delay_ms=1_000).id
        clock.advance(seconds=1)
        assert lane.claim(skip_tenants=frozenset({"a"})).claimed == []
        assert lane.claim_one().id == delayed

    def test_lapsed_leases_are_re_taken_whatever_the_tenant(
        self, lane: Lane, clock: ManualClock
    ) -> None:
        """A lapsed lease comes back even for a skipped tenant (the worker sheds it)."""
        lapsed = lane.enqueue(tenant_id="a").id
        lane.claim_one(visibility_ms=1_000)
        clock.advance(seconds=2)
        result = lane.claim("worker-b", skip_tenants=frozenset({"a"}))
        assert [job.id for job in result.claimed] == [lapsed]

    def test_capped_rows_of_a_full_tenant_are_skipped_too(
        self, lane: Lane, clock: ManualClock
    ) -> None:
        """Rows of ``concurrency=`` jobs take no slot while their tenant is
        skipped, ready or due: a flood of capped jobs costs no shed write."""
        key = {"concurrency_key": f"job:{lane.job}", "concurrency_limit": 5}
        ready = lane.enqueue(tenant_id="a", **key).id
        due = lane.enqueue(tenant_id="a", delay_ms=1_000, **key).id
        other = lane.enqueue(tenant_id="b", **key).id
        clock.advance(seconds=1)
        skipped = lane.claim(capped=True, skip_tenants=frozenset({"a"}))
        assert [job.id for job in skipped.claimed] == [other]
        assert lane.driver.leases.held(f"job:{lane.job}") == 1
        later = lane.claim("worker-b", capped=True).claimed
        assert sorted(job.id for job in later) == sorted([ready, due])
