"""What the export and erase jobs share: the start, the pages, the failure.

Both walk each table in keyset pages (``pk > cursor ORDER BY pk LIMIT
batch``), one durable step per page; a page's step records the cursor
and the row count, never the rows, so a worker killed mid-run is followed
by one that replays the pages done and goes on with the first not done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.db import close_old_connections
from django.db.models import F, QuerySet
from django.db.models.functions import Greatest, Now

from ..errors import JobsError, RetryClass, code_of, retry_class_of
from ..validation import storable_text
from .declaration import Subject, Table, get_subject
from .errors import SubjectRequestInvalid

if TYPE_CHECKING:
    from ..context import JobContext
    from .models import SubjectRequest

__all__ = [
    "advance",
    "page_of",
    "request_row",
    "run_request",
    "start",
    "subject_of",
    "walk_table",
]

logger = logging.getLogger("django_ultimate_jobs")

# Codes that stop an attempt without judging the request (as backfills).
_NOT_A_FAILURE = frozenset(
    {"X_ABORTED", "X_DRAINING", "X_JOB_LEASE_LOST", "X_RATE_LIMITED"}
)


def request_row(request_id: str, *, lock: bool = False) -> SubjectRequest:
    """The request ``request_id`` names.

    Raises:
        SubjectRequestInvalid: no such row (removed while its job waited).
    """
    from .models import SubjectRequest

    rows = SubjectRequest.objects.all()
    if lock:
        rows = rows.select_for_update()
    row = rows.filter(id=request_id).first()
    if row is None:
        raise SubjectRequestInvalid(
            f"the subject request {request_id} is not stored (removed?)",
            meta={"request": request_id},
        )
    return row


def subject_of(row: SubjectRequest) -> Subject:
    """The declared subject of ``row``.

    Raises:
        SubjectRequestInvalid: this deploy does not declare it.
    """
    try:
        return get_subject(row.subject)
    except JobsError:
        raise SubjectRequestInvalid(
            f"subject {row.subject!r} of request {row.id} is not declared "
            "in this deploy",
            meta={"request": str(row.id), "subject": row.subject},
        ) from None


def start(request_id: str, kind: str, run_id: str) -> dict[str, Any]:
    """The start step (atomic): check, count, mark the request running.

    Answers ``skip`` (a request already done: an operator re-ran its job),
    ``batch`` and the table labels, which every later page is checked
    against: a deploy that changed them mid-run fails the request rather
    than walk the wrong table.

    Raises:
        SubjectRequestInvalid: the row or the subject is gone, or the row
            is not a request of this kind.
        PersonalDataUnerased: the subject's erase leaves a marked field.
    """
    from .models import SubjectRequest

    row = request_row(request_id, lock=True)
    if row.kind != kind:
        raise SubjectRequestInvalid(
            f"request {request_id} is an {row.kind} request, not an {kind}",
            meta={"request": request_id},
        )
    if row.state == SubjectRequest.State.DONE:
        return {"skip": "done", "batch": 0, "tables": []}
    spec = subject_of(row)
    unerased = spec.unerased()
    if unerased:
        raise unerased[0]
    if kind == "export":
        row.total = sum(t.rows(row.key).count() for t in spec.tables)
    else:
        row.total = sum(t.untreated(row.key).count() for t in spec.tables)
    row.state = SubjectRequest.State.RUNNING
    row.run_id = UUID(run_id)
    row.error = ""
    if row.started_at is None:
        row.started_at = Now()
    row.updated_at = Now()
    row.save()
    return {
        "skip": None,
        "batch": spec.batch,
        "tables": [t.label for t in spec.tables],
    }


def checked_subject(row: SubjectRequest, started: Mapping[str, Any]) -> Subject:
    """The subject of ``row``, refused if its tables changed since the start.

    Raises:
        SubjectRequestInvalid: the tables differ from the start's.
    """
    spec = subject_of(row)
    if [t.label for t in spec.tables] != list(started["tables"]):
        raise SubjectRequestInvalid(
            f"the tables of subject {spec.name!r} changed while request "
            f"{row.id} ran; request it again",
            meta={"request": str(row.id), "subject": spec.name},
        )
    return spec


def page_of(rows: QuerySet[Any], cursor: Any, batch: int) -> list[Any]:
    """The primary keys of the next page after ``cursor`` (keyset, never OFFSET)."""
    if cursor is not None:
        rows = rows.filter(pk__gt=cursor)
    return list(rows.order_by("pk").values_list("pk", flat=True)[:batch])


def cursor_of(pk: Any) -> int | str:
    """A primary key as a JSON cursor (a UUID as its text)."""
    return pk if isinstance(pk, int) and not isinstance(pk, bool) else str(pk)


def advance(request_id: UUID, rows: int) -> None:
    """Count a page on the request row (in the page's own transaction)."""
    from .models import SubjectRequest

    SubjectRequest.objects.filter(id=request_id).update(
        rows_done=F("rows_done") + rows,
        pages_done=F("pages_done") + 1,
        # Rows written during the run can take it past the count at start.
        total=Greatest(F("total"), F("rows_done") + rows),
        updated_at=Now(),
    )


PageWork = Callable[["SubjectRequest", Table, int, list[Any], int], None]
"""``(request, table, table index, primary keys, page number)``: one page's
work, inside its step's transaction."""


def walk_table(
    ctx: JobContext,
    request_id: str,
    started: dict[str, Any],
    index: int,
    prefix: str,
    rows_of: Callable[[Table, Any], QuerySet[Any]],
    work: PageWork,
) -> int:
    """Walk table ``index`` in keyset pages, each an atomic durable step
    ``<prefix>-page-N`` that hands the page's primary keys to ``work``.

    The walk ends at a page shorter than the batch. Answers the rows seen.
    """
    batch = int(started["batch"])

    def step(cursor: Any, page: int) -> dict[str, Any]:
        row = request_row(request_id)
        table = checked_subject(row, started).table(index)
        pks = page_of(rows_of(table, row.key), cursor, batch)
        if not pks:
            return {"cursor": cursor, "rows": 0}
        work(row, table, index, pks, page)
        return {"cursor": cursor_of(pks[-1]), "rows": len(pks)}

    cursor: Any = None
    page = rows = 0
    while True:
        out = ctx.step.run(f"{prefix}-page-{page}", step, cursor, page, atomic=True)
        count = _checkpoint(prefix, out)
        if count:
            cursor, rows, page = out["cursor"], rows + count, page + 1
        if count < batch:
            return rows


def _checkpoint(prefix: str, out: Any) -> int:
    # A step output is read back from storage: refuse a malformed one
    # rather than start the table again.
    if (
        not isinstance(out, Mapping)
        or isinstance(out.get("rows"), bool)
        or not isinstance(out.get("rows"), int)
        or out["rows"] < 0
    ):
        raise SubjectRequestInvalid(
            f"a page checkpoint of {prefix} is malformed", meta={"step": prefix}
        )
    return int(out["rows"])


def run_request(
    ctx: JobContext,
    request_id: str,
    kind: str,
    body: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """The start step, then ``body(started)``; a failure is written on the
    request row, then re-raised.

    A request already done is not run again (an operator re-ran its job).
    The row turns ``failed`` only when the job will not try again (the last
    attempt, or a terminal code); before that it stays ``running`` with the
    error, as the attempt after may well succeed.
    """
    try:
        started = ctx.step.run(
            "start", start, request_id, kind, str(ctx.run_id), atomic=True
        )
        if started["skip"]:
            return {"request": request_id, "skipped": started["skip"]}
        return body(started)
    except Exception as error:
        code = code_of(error)
        if code not in _NOT_A_FAILURE:
            final = ctx.final_attempt or retry_class_of(code) == RetryClass.TERMINAL
            text = (
                error.render()
                if isinstance(error, JobsError)
                else f"{type(error).__name__}: {error}"
            )
            _note_failure(request_id, text, final=final)
        raise


def _note_failure(request_id: str, text: str, *, final: bool) -> None:
    from .models import SubjectRequest

    changes: dict[str, Any] = {"error": storable_text(text[:2000]), "updated_at": Now()}
    if final:
        changes["state"] = SubjectRequest.State.FAILED
    try:
        SubjectRequest.objects.filter(id=request_id).exclude(
            state=SubjectRequest.State.DONE
        ).update(**changes)
    except Exception:
        # Bookkeeping must not hide the error that failed the attempt; a
        # connection the failure broke is dropped, not kept for the next job.
        logger.warning("jobs.subject.request-unrecorded", extra={"request": request_id})
        close_old_connections()
