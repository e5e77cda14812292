"""Outcomes and pickup latency over time, binned from the job counters.

The dashboard's charts read this: done, retried, failed and dead per minute
over the last hour or per hour over the last day, for every job or for one
queue and/or job name, with the mean pickup latency (due to claimed) of the
attempts settled in each interval. It reads the counter buckets through the
driver contract (``counter_buckets``): a few thousand small rows at most,
never the job table's history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .drivers import get_driver
from .drivers.base import CounterBucket

__all__ = ["OUTCOMES", "SPANS", "Series", "Slot", "Span", "series"]

OUTCOMES = ("done", "retried", "failed", "dead")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, kw_only=True, slots=True)
class Span:
    """A chart's time axis: ``slots`` intervals of ``step``, the last one now."""

    name: str
    label: str
    step: timedelta
    slots: int
    per: str
    """The interval's name in a sentence ("minute", "hour")."""


SPANS = {
    "hour": Span(
        name="hour",
        label="last hour",
        step=timedelta(minutes=1),
        slots=60,
        per="minute",
    ),
    "day": Span(
        name="day", label="last 24 hours", step=timedelta(hours=1), slots=24, per="hour"
    ),
}
"""The spans the dashboard offers, by name."""


@dataclass(kw_only=True, slots=True)
class Slot:
    """One interval's settled outcomes and pickup latency sum."""

    start: datetime
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    pickups: int = 0
    pickup_ms: int = 0

    @property
    def mean_pickup_ms(self) -> int | None:
        """The mean pickup latency of the interval's attempts (``None``: none)."""
        return round(self.pickup_ms / self.pickups) if self.pickups else None

    @property
    def settled(self) -> int:
        """Every counted outcome of the interval."""
        return self.done + self.retried + self.failed + self.dead

    def add(self, bucket: CounterBucket) -> None:
        """Add one counter bucket's counts."""
        self.done += bucket.done
        self.retried += bucket.retried
        self.failed += bucket.failed
        self.dead += bucket.dead
        self.pickups += bucket.pickups
        self.pickup_ms += bucket.pickup_ms


@dataclass(frozen=True, kw_only=True, slots=True)
class Series:
    """The slots of one span for the chosen queue and job name (``None``: all).

    ``queues`` and ``jobs`` list every queue and job name that settled
    anything in the span, whatever was chosen (the choices to offer).
    """

    span: Span
    queue: str | None
    job: str | None
    slots: tuple[Slot, ...]
    queues: tuple[str, ...]
    jobs: tuple[str, ...]
    total: Slot
    """Every slot summed (its ``start`` is the first slot's)."""


def series(
    span: str = "hour", *, queue: str | None = None, job: str | None = None
) -> Series:
    """Bin the counter buckets of ``span`` (a key of :data:`SPANS`).

    The last slot is the current, partial interval (by the driver's clock,
    in UTC); ``queue`` and ``job`` keep only their buckets when given.
    """
    shape = SPANS[span]
    driver = get_driver()
    step = shape.step
    current = _EPOCH + (driver.now() - _EPOCH) // step * step
    first = current - (shape.slots - 1) * step
    slots = tuple(Slot(start=first + i * step) for i in range(shape.slots))
    total = Slot(start=first)
    queues: set[str] = set()
    jobs: set[str] = set()
    for bucket in driver.counter_buckets(first):
        index = (bucket.start - first) // step
        if index >= shape.slots:
            continue
        queues.add(bucket.queue)
        jobs.add(bucket.job)
        if (queue is None or bucket.queue == queue) and (
            job is None or bucket.job == job
        ):
            slots[index].add(bucket)
            total.add(bucket)
    return Series(
        span=shape,
        queue=queue,
        job=job,
        slots=slots,
        queues=tuple(sorted(queues)),
        jobs=tuple(sorted(jobs)),
        total=total,
    )
