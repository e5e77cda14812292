"""The erase job's body: each table treated page by page, then a sweep.

A page is the next ``batch`` primary keys of the rows still to treat, and
one atomic durable step: the ``UPDATE`` (or ``delete()``) of those rows,
their audit records and the request's progress commit together, so each
page is erased exactly once, and the records sum to exactly what was
erased. Tables go in their declared order. After every table is walked,
a second walk (the sweep) treats what was written meanwhile into tables
walked already; its records say ``sweep``.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.db import IntegrityError
from django.db.models import ProtectedError, RestrictedError, Sum
from django.db.models.functions import Now

from .declaration import Table
from .errors import SubjectEraseBlocked
from .policies import Anonymize, Delete, Retain
from .run import advance, checked_subject, request_row, run_request, walk_table

if TYPE_CHECKING:
    from ..context import JobContext
    from .models import SubjectRequest

__all__ = ["run_erase"]

WHOLE_ROW = "*"


def run_erase(ctx: JobContext, request_id: str) -> dict[str, Any]:
    """Erase the subject of request ``request_id``, table by table."""
    return run_request(
        ctx, request_id, "erase", lambda started: _erase(ctx, request_id, started)
    )


def _erase(ctx: JobContext, request_id: str, started: dict[str, Any]) -> dict[str, Any]:
    spec = checked_subject(request_row(request_id), started)
    rows = 0
    for sweep in (False, True):
        for index, table in enumerate(spec.tables):
            if not isinstance(table.erase, Retain):
                prefix = f"{'sweep' if sweep else 'erase'}-t{index}"
                work = partial(_erase_page, sweep=sweep)
                rows += walk_table(
                    ctx, request_id, started, index, prefix, Table.untreated, work
                )
            elif not sweep:
                ctx.step.run(
                    f"t{index}-retain", _retain, request_id, started, index, atomic=True
                )
    summary = ctx.step.run("finish", _finish, request_id, atomic=True)
    return {"request": request_id, "rows": rows, "erased": summary}


def _erase_page(
    row: SubjectRequest,
    table: Table,
    index: int,
    pks: list[Any],
    page: int,
    *,
    sweep: bool,
) -> None:
    """Erase the page and record it (in the page's step transaction)."""
    treated, counts = _treat(table, pks)
    _record(row, counts, sweep)
    advance(row.id, treated)


def _treat(table: Table, pks: list[Any]) -> tuple[int, dict[tuple[str, str, str], int]]:
    """Erase the rows ``pks``: the table's rows treated, and per
    ``(model, field, policy)`` the rows it did that to."""
    rows = table.model._base_manager.filter(pk__in=pks)
    try:
        if isinstance(table.erase, Delete):
            _, per_model = rows.delete()
            return per_model.get(table.label, 0), {
                (
                    label,
                    WHOLE_ROW,
                    "delete" if label == table.label else "delete (cascade)",
                ): count
                for label, count in per_model.items()
                if count
            }
        assert isinstance(table.erase, Anonymize)
        count = rows.update(**table.assignments())
    except (ProtectedError, RestrictedError, IntegrityError) as error:
        raise SubjectEraseBlocked(
            f"the database refused to erase rows of {table.label} "
            f"({type(error).__name__}): another table still references them",
            meta={"model": table.label, "error": type(error).__name__},
        ) from error
    return count, {
        (table.label, name, policy.name): count
        for name, policy in table.erase.policies.items()
    }


def _record(
    row: SubjectRequest, counts: dict[tuple[str, str, str], int], sweep: bool
) -> None:
    from .models import ErasureRecord

    ErasureRecord.objects.bulk_create(
        ErasureRecord(
            request_id=row.id,
            subject=row.subject,
            model=model,
            field=field,
            policy=policy,
            rows=count,
            requested_by=row.requested_by,
            sweep=sweep,
        )
        for (model, field, policy), count in counts.items()
    )


def _retain(request_id: str, started: dict[str, Any], index: int) -> None:
    row = request_row(request_id)
    table = checked_subject(row, started).table(index)
    assert isinstance(table.erase, Retain)
    counts = {
        (table.label, WHOLE_ROW, table.erase.describe()): table.rows(row.key).count()
    }
    _record(row, counts, sweep=False)


def _finish(request_id: str) -> list[dict[str, Any]]:
    """Sum the records into the request's summary; clear the key; done."""
    from .models import ErasureRecord, SubjectRequest

    totals = (
        ErasureRecord.objects.filter(request_id=UUID(request_id))
        .values("model", "field", "policy")
        .annotate(total=Sum("rows"))
        .order_by("model", "field", "policy")
    )
    summary = [
        {
            "model": entry["model"],
            "field": entry["field"],
            "policy": entry["policy"],
            "rows": int(entry["total"]),
        }
        for entry in totals
    ]
    SubjectRequest.objects.filter(id=request_id).update(
        state=SubjectRequest.State.DONE,
        key=None,
        summary=summary,
        error="",
        finished_at=Now(),
        updated_at=Now(),
    )
    return summary
