"""``manage.py jobs_reindex``: list, dry-run and run the declared reindexes.

``NAME`` alone is a dry run (rows, pages, least time at the declared rate);
``NAME --write`` queues the pass and follows its ``Reindex`` row. A done
reindex starts over; a failed one goes on after its cursor unless
``--restart``; a paused one is refused (resume it in the admin, or
``--restart``).
"""

from __future__ import annotations

from typing import Any

from ...search.reindex import get_reindex, registered_reindexes
from ...terminal import counted
from ..pass_command import PassCommand, Queued, describe
from ..progress import duration, pages

__all__ = ["Command"]


class Command(PassCommand):
    """List, dry-run or run reindexes."""

    help = "Show the declared reindexes (--list), dry-run one (NAME) or run it (NAME --write)."
    kind = "reindex"
    rerun_flag = "--restart"
    rerun_help = "start over from the first row (a failed pass otherwise goes on)"

    def list_lines(self) -> list[str]:
        """Each reindex: its state, rows, documents removed."""
        from ...models import Reindex

        rows = {row.name: row for row in Reindex.objects.all()}
        lines = []
        for handle in registered_reindexes():
            row = rows.get(handle.name)
            if row is None:
                lines.append(f"{handle.name}: pending (never run)")
            else:
                lines.append(
                    f"{handle.name}: {describe(row)}, phase {row.phase}, "
                    f"{row.removed:,} documents removed"
                )
        return lines or ["no reindex(...) is declared"]

    def dry_run(self, options: dict[str, Any]) -> str:
        """Rows, pages and the least time the rate allows."""
        handle = get_reindex(options["name"])
        plan = handle.plan()
        return (
            f"{plan.name} ({plan.state}): would index "
            f"{counted(plan.rows, 'row', grouped=True)} in "
            f"{pages(plan.pages)} of {handle.batch:,} at {handle.rate:g} pages/s "
            f"(at least {duration(plan.seconds)}), then sweep the documents of "
            "rows that are gone"
        )

    def enqueue(self, options: dict[str, Any]) -> Queued:
        """Queue the pass (``--restart``: from the first row)."""
        from ...models import Reindex

        name = options["name"]
        enqueued = get_reindex(name).enqueue(restart=options["rerun"])
        return Queued(
            name, enqueued, lambda: Reindex.objects.filter(name=name).first(), "page"
        )
