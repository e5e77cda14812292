"""Dead letters: dead jobs grouped by job name and error code; a group's retry.

Operator code beside :mod:`.operator`, for the admin's dead-letter page (the
admin calls this and the operator module, never the job table). A group is
a job name and an error code: the text of the job's last error before its
first colon (``X_CODE`` of ``X_CODE: cause``, ``RuntimeError`` of a bare
``RuntimeError()``), or ``""`` for a dead job without an error. The page's
counts, the confirmation and the retry read a group through one query
(:func:`_members`), so a retry moves the jobs its confirmation listed and no
other; a group with no name, or one no dead job is in, is refused.

ORM reads of the job table on ``DATABASE`` (as the outbox operator reads
its table); the retry requeues through the driver, one job at a time, in
one transaction that holds the group's rows, so the caller learns which
jobs moved (and logs each) and which were refused, and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import Count, F, Func, Max, QuerySet, TextField, Value
from django.db.models.functions import Coalesce

from .conf import jobs_settings
from .drivers import get_driver
from .drivers.base import MAX_BULK_ROWS
from .errors import JobNotFound, JobPageInvalid, JobsError
from .models import Job
from .validation import storable

__all__ = ["group", "group_label", "groups", "recent", "retry_group"]


class _ErrorCode(Func):
    """``split_part(last_error, ':', 1)``, ``''`` without an error.

    An error without a message has no colon: ``RuntimeError`` is its own
    group, and ``RuntimeErrorX`` another.
    """

    function = "split_part"
    output_field = TextField()


def _code() -> Coalesce:
    return Coalesce(
        _ErrorCode(F("last_error"), Value(":"), Value(1)),
        Value(""),
        output_field=TextField(),
    )


def _dead() -> QuerySet[Job]:
    return Job.objects.using(jobs_settings().database).filter(state="dead")


def groups() -> list[dict[str, Any]]:
    """Every group: ``name``, ``code``, ``count``, ``latest`` (last failure)."""
    rows = (
        _dead()
        .annotate(code=_code())
        .values("name", "code")
        .annotate(count=Count("id"), latest=Max("updated_at"))
        .order_by("name", "-count", "code")
    )
    return [dict(row) for row in rows]


def recent(limit: int = 25) -> list[dict[str, Any]]:
    """The latest dead jobs: ``id``, ``name``, attempts, when, last error."""
    rows = _dead().order_by("-updated_at", "-id")[:limit]
    return [
        {
            "id": str(row["id"]),
            "name": row["name"],
            "attempt": row["attempt"],
            "max_attempts": row["max_attempts"],
            "updated_at": row["updated_at"],
            "last_error": row["last_error"],
        }
        for row in rows.values(
            "id", "name", "attempt", "max_attempts", "updated_at", "last_error"
        )
    ]


def group_label(name: str, code: str) -> str:
    """``shop.charge X_DECLINED``; ``shop.charge (no error)``."""
    return f"{name} {code}" if code else f"{name} (no error)"


def group(name: Any, code: Any) -> dict[str, Any]:
    """The group's size and its oldest jobs, those a retry moves first.

    Answers ``{"name", "code", "count", "jobs": [{"id", "name", "failed_at"}]}``
    (at most :data:`MAX_BULK_ROWS` jobs: what one retry moves).

    Raises:
        JobPageInvalid: no name, no code (``""`` is the group of dead jobs
            without an error), or text no row can hold.
        JobNotFound: no dead job is in the group.
    """
    members = _members(name, code)
    count = members.count()
    if not count:
        raise JobNotFound(
            f"no dead job is in the group {group_label(name, code)}",
            fix="reload the dead-letter page: the group was retried or removed",
            meta={"name": name, "code": code},
        )
    jobs = [
        {"id": str(job_id), "name": name, "failed_at": failed_at}
        for job_id, failed_at in _oldest(members).values_list("id", "updated_at")
    ]
    return {"name": name, "code": code, "count": count, "jobs": jobs}


def retry_group(
    name: Any, code: Any, ids: Sequence[Any] | None = None
) -> dict[str, Any]:
    """Requeue the group's oldest jobs (up to :data:`MAX_BULK_ROWS`).

    ``ids`` pins the jobs (those a confirmation listed): only those move,
    each only if it is still dead and still in the group; any other is
    refused, and a job added to the group since is left alone.
    The jobs are the group's as :func:`group` reads it, each requeued as
    ``operator.retry`` would (of several sharing an idempotency key, one
    moves and the others are refused). Answers ``{"moved": [ids],
    "refused": [(id, "X_...: ...")], "remaining": n}``.

    Raises:
        JobPageInvalid: as :func:`group`.
        JobNotFound: no dead job is in the group (nothing moves).
    """
    members = _members(name, code)
    pinned = None if ids is None else _pinned(ids)
    if pinned is not None:
        members = members.filter(id__in=pinned)
    driver = get_driver()
    moved: list[str] = []
    refused: list[tuple[str, str]] = []
    with transaction.atomic(using=jobs_settings().database):
        # Held until the end: a job another operator moves meanwhile is
        # skipped, not requeued a second time.
        chosen = list(
            _oldest(members.select_for_update(skip_locked=True)).values_list(
                "id", flat=True
            )
        )
        if pinned is not None:
            left = set(chosen)
            refused = [
                (str(job_id), _not_in_group(job_id, name, code).render())
                for job_id in pinned
                if job_id not in left
            ]
        if not chosen and not refused:
            raise JobNotFound(
                f"no dead job is in the group {group_label(name, code)}",
                fix="reload the dead-letter page: the group was retried or removed",
                meta={"name": name, "code": code},
            )
        for job_id in chosen:
            refusal = _requeue(driver, job_id)
            if refusal is None:
                moved.append(str(job_id))
            else:
                refused.append((str(job_id), refusal))
        remaining = _members(name, code).count()
    return {"moved": moved, "refused": refused, "remaining": remaining}


def _pinned(ids: Sequence[Any]) -> list[UUID]:
    """The pinned ids as UUIDs, in order, once each; refuses bad text."""
    if len(ids) > MAX_BULK_ROWS:
        raise JobPageInvalid(
            f"a group retry pins at most {MAX_BULK_ROWS} jobs",
            fix="press Retry on a group of the dead-letter page",
            meta={"filter": "id"},
        )
    pinned: list[UUID] = []
    for text in ids:
        try:
            job_id = UUID(str(text))
        except ValueError:
            raise JobPageInvalid(
                "a dead-letter group retry pins job ids (UUIDs)",
                fix="press Retry on a group of the dead-letter page",
                meta={"filter": "id"},
            ) from None
        if job_id not in pinned:
            pinned.append(job_id)
    return pinned


def _not_in_group(job_id: UUID, name: str, code: str) -> JobNotFound:
    return JobNotFound(
        f"job {job_id} is no longer a dead job of the group {group_label(name, code)}",
        fix="reload the dead-letter page: it was retried, removed or never in the group",
        meta={"job_id": str(job_id), "name": name, "code": code},
    )


def _requeue(driver: Any, job_id: UUID) -> str | None:
    try:
        # A savepoint: a refused requeue leaves the others' transaction usable.
        with transaction.atomic(using=jobs_settings().database):
            driver.requeue(job_id)
    except JobsError as error:
        return error.render()
    return None


def _oldest(members: QuerySet[Job]) -> QuerySet[Job]:
    return members.order_by("id")[:MAX_BULK_ROWS]


def _members(name: Any, code: Any) -> QuerySet[Job]:
    """The one query a group is read through (count, listing, retry)."""
    if not isinstance(name, str) or not name:
        raise JobPageInvalid(
            "a dead-letter group names a job name",
            fix="press Retry on a group of the dead-letter page",
            meta={"filter": "name"},
        )
    if not isinstance(code, str):
        raise JobPageInvalid(
            "a dead-letter group names an error code ('' for no error)",
            fix="press Retry on a group of the dead-letter page",
            meta={"filter": "error_code"},
        )
    for what, text in (("name", name), ("error_code", code)):
        if not storable(text):
            # PostgreSQL refuses a NUL in a parameter; no row holds one.
            raise JobPageInvalid(
                f"the dead-letter group's {what} holds a NUL or a lone surrogate",
                fix="press Retry on a group of the dead-letter page",
                meta={"filter": what},
            )
    return _dead().annotate(code=_code()).filter(name=name, code=code)
