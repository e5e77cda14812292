"""Conformance checks of the trace context a job row carries.

An enqueue stamps the W3C ``traceparent`` of its producer span on the row
(``EnqueueRequest.traceparent``); the claim hands it to the worker
(``ClaimedJob.traceparent``), whose attempt span continues the trace.
Every write path keeps it: ``enqueue``, ``enqueue_many`` and a cron fire.
Internal to :mod:`django_ultimate_jobs.testing.conformance`, whose
``DriverConformance`` inherits these checks (fixtures ``lane``, ``driver``,
``clock``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .conformance_cron import _arm, _fire

if TYPE_CHECKING:
    from .conformance import Lane

__all__ = ["TraceContextConformance"]

PARENTS = [f"00-{0xA1 + n:032x}-{0xB2 + n:016x}-{n % 2:02x}" for n in range(3)]
"""Valid traceparents, sampled and not (the flags travel too)."""


class TraceContextConformance:
    """What every driver keeps of a job's trace context."""

    def test_a_claim_hands_over_the_traceparent_of_the_enqueue(
        self, lane: Lane
    ) -> None:
        """The worker's attempt span is a child of the enqueue's: it needs the value."""
        enqueued = lane.enqueue(traceparent=PARENTS[0])
        plain = lane.enqueue()
        claimed = {job.id: job for job in lane.claim().claimed}
        assert claimed[enqueued.id].traceparent == PARENTS[0]
        assert claimed[plain.id].traceparent is None

    def test_enqueue_many_keeps_each_rows_traceparent(self, lane: Lane) -> None:
        answers = lane.driver.enqueue_many(
            [lane.request(traceparent=parent) for parent in PARENTS]
        )
        claimed = {job.id: job.traceparent for job in lane.claim().claimed}
        assert [claimed[a.id] for a in answers] == PARENTS
        assert [lane.row(a.id).traceparent for a in answers] == PARENTS

    def test_a_cron_fire_keeps_its_jobs_traceparent(
        self, driver: Any, clock: Any
    ) -> None:
        """The scheduler's fire span is the creation context of the jobs it makes."""
        armed = _arm(driver, "conf.trace.fire", clock.now())
        occurrence = armed + timedelta(minutes=1)
        landed = driver.cron.task_fire(
            _fire(
                "conf.trace.fire",
                armed,
                occurrence,
                ["k"],
                enqueued_by="task:conf.trace.fire",
                traceparent=PARENTS[1],
            )
        )
        assert landed is not None and len(landed.inserted) == 1
        assert driver.get(landed.inserted[0]).traceparent == PARENTS[1]
