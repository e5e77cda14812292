"""The claim: due rows of the named queues, taken under a lease, in one statement.

:class:`PostgresClaims` runs ``driver.claim()`` for the Postgres driver: the
ordinary claim (``job_claim``), and for a worker that runs capped jobs the
capped claims first (``job_claim_capped``, ``job_claim_capped_late``,
``job_claim_busy``), each row with a fleet-wide slot of its key. It keeps,
per worker, where the next capped key scan starts and when the late
statement is due. Rows are read by the names of :data:`~.rows.CLAIM_COLUMNS`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...errors import ClaimQueuesEmpty
from ..base import (
    LEASE_LAPSED_FINAL_ATTEMPT,
    LEASE_LAPSED_RECLAIMED,
    LEASE_LAPSED_UNSTARTED,
    ClaimedJob,
    ClaimOptions,
    ClaimResult,
    JobRecord,
)
from .params import tenant_skip
from .rows import CLAIM, claimed_keyed, claimed_plain, record

if TYPE_CHECKING:
    from .driver import PostgresDriver

__all__ = [
    "CAPPED_KEYS_MIN",
    "CAPPED_KEYS_PER_ROW",
    "CAPPED_LATE_INTERVAL_S",
    "PostgresClaims",
    "claim_order",
]

CAPPED_KEYS_PER_ROW = 4
"""Keys with ready rows a capped claim visits per row it wants (a probe each)..."""
CAPPED_KEYS_MIN = 16
"""... and at least this many."""
CAPPED_LATE_INTERVAL_S = 0.25
"""How often a busy capped worker looks for due delayed and lapsed capped rows."""

_ID, _STATE = CLAIM["id"], CLAIM["state"]
_PRIORITY, _RUN_AT = CLAIM["priority"], CLAIM["run_at"]


def claim_order(row: Sequence[Any]) -> tuple[Any, ...]:
    """The claim order of a claimed row: priority desc, run_at, id (job_claim's
    ``ORDER BY``). ``UPDATE ... RETURNING`` answers in the order it found
    the rows, so the capped claims and the heirs sort again by it."""
    return (-row[_PRIORITY], row[_RUN_AT], row[_ID])


class PostgresClaims:
    """The claim of the Postgres driver (``driver.claim``)."""

    def __init__(self, driver: PostgresDriver) -> None:
        self.driver = driver
        self._capped_after: dict[str, str] = {}
        """Per worker id: the key its next capped claim's key scan starts after."""
        self._capped_late_at: dict[str, float] = {}
        """Per worker id: when its next claim runs job_claim_capped_late."""

    def claim(self, options: ClaimOptions) -> ClaimResult:
        """Claim due jobs; re-take lapsed leases; bury lapsed final attempts.

        With ``options.capped``, up to that many rows carrying a concurrency
        key are claimed first, each with a fleet-wide slot
        (``job_claim_capped``, the first ``start_now`` recorded started),
        then the ``when_busy="fail"`` refusals (``job_claim_busy``), then
        the rest of the limit goes to the uncapped claim, which runs exactly
        as for a worker that declares no limit. Capped first: their number
        is bounded by the slots, so they cannot starve the uncapped rows,
        while an uncapped backlog would starve them.
        """
        if not options.queues:
            raise ClaimQueuesEmpty("a claim named no queue")
        if options.limit <= 0:
            return ClaimResult([], [])
        capped = self._claim_capped(options) if options.capped > 0 else []
        limit = options.limit - len(capped)
        if (limit <= 0 or not options.uncapped) and options.registry_ttl_ms is None:
            return ClaimResult(capped, [])
        started = retaken = 0
        if capped:
            started = sum(1 for job in capped if job.start_recorded)
            retaken = sum(1 for job in capped if job.retaken)
        retake = options.limit if options.retake is None else options.retake
        rows = self.driver._rows(
            "job_claim",
            {
                "queues": list(options.queues),
                "limit": max(limit, 0) if options.uncapped else 0,
                "worker": options.worker_id,
                "visibility_ms": options.visibility_ms,
                "relapsed_error": LEASE_LAPSED_RECLAIMED,
                "unstarted_error": LEASE_LAPSED_UNSTARTED,
                "ttl": options.registry_ttl_ms,
                "start_now": max(options.start_now - started, 0),
                "retake": max(retake - retaken, 0),
                **tenant_skip(options),
            },
        )
        state = _STATE
        claimed = capped + [
            claimed_plain(row) for row in rows if row[state] == "running"
        ]
        exhausted = [row[_ID] for row in rows if row[state] == "exhausted"]
        buried: list[JobRecord] = []
        if exhausted:
            # Rare: a final attempt's lease lapsed after its start was known.
            buried = [
                record(row)
                for row in self.driver._rows(
                    "job_bury",
                    {
                        "ids": exhausted,
                        "drop": sorted(options.drop_exhausted),
                        "error": LEASE_LAPSED_FINAL_ATTEMPT,
                    },
                )
            ]
        return ClaimResult(claimed, buried)

    def _claim_capped(self, options: ClaimOptions) -> list[ClaimedJob]:
        params: dict[str, Any] = {
            "queues": list(options.queues),
            "limit": options.limit,
            "worker": options.worker_id,
            "visibility_ms": options.visibility_ms,
            **tenant_skip(options),
        }
        limit = min(options.capped, options.limit)
        # The key scan takes turns around the keys (see job_claim_capped):
        # after the last key this worker's previous claim took, and from the
        # first key again when that came up short.
        after = self._capped_after.get(options.worker_id, "")
        claimed = self._capped_rows(params, limit, options.start_now, after)
        if len(claimed) < limit and after:
            claimed += self._capped_rows(
                params,
                limit - len(claimed),
                max(options.start_now - len(claimed), 0),
                "",
            )
        taken = [job.concurrency_key or "" for job in claimed]
        self._capped_after[options.worker_id] = max(taken, default="")
        if len(claimed) < limit and self._late_due(options.worker_id, not claimed):
            claimed += self._capped_rows(
                {
                    **params,
                    "retake": options.limit
                    if options.retake is None
                    else options.retake,
                },
                limit - len(claimed),
                max(options.start_now - len(claimed), 0),
                None,
            )
        room = limit - len(claimed)
        if options.refuse_busy and room > 0:
            refused = self.driver._rows(
                "job_claim_busy",
                {**params, "limit": room, "names": sorted(options.refuse_busy)},
            )
            claimed += [replace(claimed_keyed(row), key_busy=True) for row in refused]
        return claimed

    def _late_due(self, worker_id: str, found_nothing: bool) -> bool:
        # job_claim_capped_late reads rows that are rarely there: on a claim
        # that found nothing else, or once per CAPPED_LATE_INTERVAL_S.
        now = time.monotonic()
        if found_nothing or now >= self._capped_late_at.get(worker_id, 0.0):
            self._capped_late_at[worker_id] = now + CAPPED_LATE_INTERVAL_S
            return True
        return False

    def _capped_rows(
        self, params: dict[str, Any], limit: int, start_now: int, after: str | None
    ) -> list[ClaimedJob]:
        # after None: the late statement (timers and lapses), else the key scan.
        scan = {
            "keys": max(CAPPED_KEYS_MIN, limit * CAPPED_KEYS_PER_ROW),
            "after": after,
        }
        rows = self.driver._rows(
            "job_claim_capped" if after is not None else "job_claim_capped_late",
            {
                **params,
                **(scan if after is not None else {}),
                "limit": limit,
                "start_now": start_now,
                "relapsed_error": LEASE_LAPSED_RECLAIMED,
                "unstarted_error": LEASE_LAPSED_UNSTARTED,
            },
        )
        rows.sort(key=claim_order)
        return [claimed_keyed(row) for row in rows]
