"""One definition of "lost", "duplicated" and "lease overlap" for every test.

A small port of Jepsen's ``total-queue`` checker over what the test knows
it enqueued, the rows that ended ``done`` and the effects table, plus the
lease-overlap check of a queue checker: two effects of one job written
under two DIFFERENT claims while both claims' leases were live.

Effects are ordered by the database clock (``at``), claims by their ordinal
(the fencing counter). Leases renew, so a claim's window is approximated as
``[its first effect, the first effect of any newer claim)``: an effect of an
older claim recorded after a newer claim's first effect means the old
attempt still acted after the job was handed to the new one. Two claims
with the same ordinal by different workers mean the fence itself broke.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

__all__ = ["EffectRow", "Overlap", "QueueHistory", "check_queue", "lease_overlaps"]


@dataclass(frozen=True, slots=True)
class EffectRow:
    """What the checker needs of one effect."""

    job_id: UUID
    claims: int
    worker: str
    at: datetime
    kind: str = "run"

    @classmethod
    def of(cls, row: Any) -> EffectRow:
        """From an ``Effect`` model instance (or anything with those fields)."""
        return cls(row.job_id, row.claims, row.worker, row.at, row.kind)


@dataclass(frozen=True, slots=True)
class Overlap:
    """One effect written outside its claim's window."""

    job_id: UUID
    why: str
    effect: EffectRow
    newer: EffectRow


@dataclass(slots=True)
class QueueHistory:
    """The verdict over one run."""

    enqueued: int
    done: int
    lost: list[UUID] = field(default_factory=list)
    unexpected: list[UUID] = field(default_factory=list)
    duplicated: dict[UUID, int] = field(default_factory=dict)
    overlaps: list[Overlap] = field(default_factory=list)
    effects: int = 0

    @property
    def valid(self) -> bool:
        """No loss, nothing unexpected, no overlap (duplicates are allowed)."""
        return not (self.lost or self.unexpected or self.overlaps)

    def summary(self) -> str:
        """One line for the log."""
        return (
            f"enqueued={self.enqueued} done={self.done} effects={self.effects} "
            f"lost={len(self.lost)} unexpected={len(self.unexpected)} "
            f"duplicated={len(self.duplicated)} overlaps={len(self.overlaps)}"
        )


def lease_overlaps(effects: Iterable[EffectRow]) -> list[Overlap]:
    """Effects of a claim written after a newer claim of the job had acted."""
    by_job: dict[UUID, list[EffectRow]] = defaultdict(list)
    for effect in effects:
        by_job[effect.job_id].append(effect)
    found: list[Overlap] = []
    for job_id, rows in by_job.items():
        workers_of: dict[int, set[str]] = defaultdict(set)
        first_of: dict[int, EffectRow] = {}
        for row in rows:
            workers_of[row.claims].add(row.worker)
            if row.claims not in first_of or row.at < first_of[row.claims].at:
                first_of[row.claims] = row
        for claim, workers in workers_of.items():
            if len(workers) > 1:
                found.append(
                    Overlap(
                        job_id,
                        f"claim {claim} held by {len(workers)} workers: {sorted(workers)}",
                        first_of[claim],
                        first_of[claim],
                    )
                )
        ordinals = sorted(first_of)
        for row in rows:
            newer = [first_of[c] for c in ordinals if c > row.claims]
            if not newer:
                continue
            earliest = min(newer, key=lambda r: r.at)
            if row.at > earliest.at:
                found.append(
                    Overlap(
                        job_id,
                        f"claim {row.claims} wrote {row.kind!r} at {row.at.isoformat()} "
                        f"after claim {earliest.claims} started at {earliest.at.isoformat()}",
                        row,
                        earliest,
                    )
                )
    return found


def check_queue(
    enqueued: Iterable[UUID],
    done: Iterable[UUID],
    effects: Iterable[EffectRow],
    *,
    run_kind: str = "run",
) -> QueueHistory:
    """The total-queue verdict.

    Args:
        enqueued: ids the test's enqueue calls were acknowledged with.
        done: ids whose rows ended ``done``.
        effects: every effect of the run.
        run_kind: the effect kind that marks one execution of a body.

    ``lost``: enqueued, but never done or never executed. ``unexpected``:
    executed but never enqueued. ``duplicated``: executed more than once
    (job -> runs; allowed under at-least-once, reported). ``overlaps``: see
    :func:`lease_overlaps`.
    """
    enqueued_ids = set(enqueued)
    done_ids = set(done)
    rows = list(effects)
    runs: dict[UUID, int] = defaultdict(int)
    for row in rows:
        if row.kind == run_kind:
            runs[row.job_id] += 1
    history = QueueHistory(
        enqueued=len(enqueued_ids), done=len(done_ids & enqueued_ids)
    )
    history.effects = len(rows)
    history.lost = sorted(j for j in enqueued_ids if j not in done_ids or runs[j] == 0)
    history.unexpected = sorted(j for j in runs if j not in enqueued_ids)
    history.duplicated = {j: n for j, n in runs.items() if n > 1}
    history.overlaps = lease_overlaps(rows)
    return history
