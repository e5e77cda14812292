"""A worker's claim passes, seen from outside (``pg_stat_activity``).

For tests that need an idle worker whose backoff has grown: a job picked up
sooner than the next poll was picked up by a wake (or a due timer).
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection

__all__ = ["CLAIM_MARK", "ClaimPasses"]

# The start of the job_claim statement (drivers/postgres/sql/queries.sql): only its
# first 1,024 bytes are in pg_stat_activity (track_activity_query_size).
CLAIM_MARK = "WITH clock AS MATERIALIZED%"


class ClaimPasses:
    """The start times of a worker's claim statements, seen from outside."""

    def __init__(self) -> None:
        self.starts: list[datetime] = []

    def poll(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT query_start FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND query LIKE %s ORDER BY query_start DESC LIMIT 1",
                [CLAIM_MARK],
            )
            row = cursor.fetchone()
        if row and row[0] and (not self.starts or row[0] > self.starts[-1]):
            self.starts.append(row[0])

    def idle_gap_reached(self, seconds: float):
        """A predicate: the last two claim passes were ``seconds`` apart."""

        def reached() -> bool:
            self.poll()
            if len(self.starts) < 2:
                return False
            return (self.starts[-1] - self.starts[-2]).total_seconds() >= seconds

        reached.__name__ = f"idle_poll_gap_at_least_{seconds}s"
        return reached
