"""A paginator that never counts millions of rows.

Django's changelist asks its paginator for ``count`` on every page. An
exact ``COUNT(*)`` over a million-row job table takes longer than the page
itself, so this one counts at most :data:`EXACT_COUNT_CAP` + 1 rows (an
index-bounded scan) and, past that, answers PostgreSQL's own estimate of
the filtered query (``EXPLAIN``), which is what the page footer shows.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any

from django.core.paginator import Paginator

__all__ = ["EXACT_COUNT_CAP", "EstimatedCountPaginator"]

EXACT_COUNT_CAP = 10_000


class EstimatedCountPaginator(Paginator):
    """Exact up to 10,000 rows, the planner's estimate beyond."""

    @cached_property
    def count(self) -> int:
        """Rows in the list: exact when small, estimated when large."""
        queryset = self.object_list.order_by()  # type: ignore[attr-defined]
        counted: int = queryset[: EXACT_COUNT_CAP + 1].count()
        if counted <= EXACT_COUNT_CAP:
            return counted
        return max(counted, _planner_rows(queryset))


def _planner_rows(queryset: Any) -> int:
    plan = json.loads(queryset.explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"])
