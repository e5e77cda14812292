"""``manage.py maintain_partitions``: create and drop partitions now.

The same function the daily ``ultimate_jobs.partitions`` job runs, for a
deploy step, a backfill or a look at the plan (``--dry-run``). A refusal
prints the coded error and exits 1.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...errors import JobsError
from ...maintenance.instant import parse_instant
from ...maintenance.partitions import PartitionPlan, maintain_partitions


class Command(BaseCommand):
    """Create the partitions every ``partitioned(...)`` table needs; drop expired ones."""

    help = (
        "Create the current and the next `ahead` partitions of every partitioned "
        "table, and drop partitions older than `retain` periods."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """``--from``, ``--now``, ``--dry-run``."""
        parser.add_argument(
            "--from",
            dest="backfill_from",
            type=_instant,
            help="ISO date or instant: also create every partition back to it, "
            "and drop nothing (before a backfill)",
        )
        parser.add_argument(
            "--now",
            type=_instant,
            help="ISO date or instant to plan as of (default: the database clock)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="print the plan, change nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Plan (and unless ``--dry-run`` apply) every table; print what changed."""
        try:
            plans = maintain_partitions(
                options["now"],
                backfill_from=options["backfill_from"],
                dry_run=options["dry_run"],
            )
        except JobsError as error:
            raise CommandError(error.render()) from error
        verb = "would " if options["dry_run"] else ""
        for plan in plans:
            self.stdout.write(_describe(plan, verb))
        if not plans:
            self.stdout.write("no partitioned(...) tables are declared")


def _describe(plan: PartitionPlan, verb: str) -> str:
    if not plan.changes:
        return f"{plan.table}: up to date"
    lines = [f"{plan.table}:"]
    lines += [
        f"  {verb}create {p.name} [{p.start.isoformat()}, {p.end.isoformat()})"
        for p in plan.create
    ]
    lines += [f"  {verb}drop {p.name}" for p in plan.drop]
    return "\n".join(lines)


def _instant(text: str) -> datetime:
    try:
        return parse_instant(text)
    except ValueError:
        raise CommandError(f"{text!r} is not an ISO 8601 date or instant") from None
