"""Asking for an export or an erase: checked, recorded, queued, in one go.

Everything is checked before anything is written: the subject, the key
(against every table's ``by=``), who asked, the storage, and that the
subject's erase covers every marked field. The request row and its job
are then written in one transaction. The job's input is the request's id
alone: the key lives in the request row until the request ends, never in
a job row or a step output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.utils.crypto import salted_hmac

from ..drivers import get_driver
from ..states import LIVE_STATES
from ..validation import text_problem
from .declaration import Subject, get_subject
from .errors import SubjectArgumentInvalid
from .storage import resolve_storage

__all__ = [
    "MAX_REQUESTED_BY_LENGTH",
    "Requested",
    "TablePlan",
    "erase_subject",
    "export_subject",
    "key_digest",
    "plan_subject",
]

MAX_REQUESTED_BY_LENGTH = 200
_DIGEST_SALT = "django_ultimate_jobs.subjects.key"


@dataclass(frozen=True, slots=True)
class Requested:
    """What a request answers: its row, its job, and whether it met a live one."""

    request_id: UUID
    job_id: UUID | None
    deduped: bool


def key_digest(subject: str, key: Any) -> str:
    """An HMAC of ``key`` under ``SECRET_KEY``: finds a key's requests without it.

    ``42`` and ``"42"`` digest alike (a command line passes text).
    """
    return salted_hmac(
        _DIGEST_SALT, f"{subject}\x00{key}", algorithm="sha256"
    ).hexdigest()


def _normal_key(key: Any) -> Any:
    return str(key) if isinstance(key, UUID) else key


def _checked_requested_by(requested_by: Any, *, required: bool) -> str:
    if requested_by in (None, "") and not required:
        return ""
    problem = text_problem(requested_by, max_chars=MAX_REQUESTED_BY_LENGTH)
    if problem is None and not requested_by.strip():
        problem = "must not be blank"
    if problem is not None:
        raise SubjectArgumentInvalid(
            f"requested_by {problem} (who asked: at most "
            f"{MAX_REQUESTED_BY_LENGTH} characters)",
            fix="pass requested_by='dpo@example.com, ticket 1234' (the command's --by)",
            meta={"argument": "requested_by"},
        )
    return str(requested_by)


def export_subject(
    name: str, key: Any, *, requested_by: str = "", storage: str = ""
) -> Requested:
    """Queue an export of everything ``name`` holds about ``key``.

    A worker writes one zip archive (a JSON file per table and a
    ``manifest.json``) to the storage; the request row names it when done.
    An export of the same key still live is answered instead (``deduped``).

    Args:
        storage: an alias of ``settings.STORAGES`` overriding the subject's.

    Raises:
        SubjectUnknown, SubjectKeyInvalid, SubjectArgumentInvalid,
        SubjectStorageInvalid, PersonalDataUnerased: nothing written.
    """
    spec = get_subject(name)
    if not isinstance(storage, str):
        raise SubjectArgumentInvalid(
            "storage must be an alias of settings.STORAGES",
            meta={"argument": "storage"},
        )
    resolve_storage(spec.storage, storage)
    return _request(
        spec,
        "export",
        key,
        _checked_requested_by(requested_by, required=False),
        storage=storage,
    )


def erase_subject(name: str, key: Any, *, requested_by: str) -> Requested:
    """Queue an erase of everything ``name`` holds about ``key``.

    A worker treats each table as declared, in pages, each page's writes
    and its audit records in one transaction; an erase of the same key
    still live is answered instead (``deduped``).

    Args:
        requested_by: who asked (required: the audit records it).

    Raises:
        SubjectUnknown, SubjectKeyInvalid, SubjectArgumentInvalid,
        PersonalDataUnerased: nothing written.
    """
    spec = get_subject(name)
    return _request(
        spec, "erase", key, _checked_requested_by(requested_by, required=True)
    )


def _request(
    spec: Subject, kind: str, key: Any, requested_by: str, storage: str = ""
) -> Requested:
    from .jobs import job_for

    key = _normal_key(key)
    spec.check_key(key)
    unerased = spec.unerased()
    if unerased:
        raise unerased[0]
    digest = key_digest(spec.name, key)
    handle = job_for(kind)
    for _ in range(2):
        try:
            with transaction.atomic():
                live = _live_request(spec.name, kind, digest)
                if live is not None:
                    return live
                return _create(spec, kind, key, digest, requested_by, storage, handle)
        except IntegrityError:
            continue  # a request of the same key won the race: meet it
    live = _live_request(spec.name, kind, digest)
    assert live is not None, "the request that won the race is gone"
    return live


def _live_request(subject: str, kind: str, digest: str) -> Requested | None:
    """The live request of this key, if its job is live too.

    One whose job ended without finishing (cancelled, removed) is marked
    failed here, so it no longer blocks a new request.
    """
    from .models import LIVE_REQUEST_STATES, SubjectRequest

    row = (
        SubjectRequest.objects.select_for_update()
        .filter(
            subject=subject,
            kind=kind,
            key_digest=digest,
            state__in=LIVE_REQUEST_STATES,
        )
        .first()
    )
    if row is None:
        return None
    record = None if row.job_id is None else get_driver().get(row.job_id)
    state = None if record is None else str(record.state)
    if state in LIVE_STATES:
        return Requested(request_id=row.id, job_id=row.job_id, deduped=True)
    row.state = SubjectRequest.State.FAILED
    row.error = f"its job ended {state or 'removed'} without finishing"
    row.save(update_fields=["state", "error"])
    return None


def _create(
    spec: Subject,
    kind: str,
    key: Any,
    digest: str,
    requested_by: str,
    storage: str,
    handle: Any,
) -> Requested:
    from .models import SubjectRequest

    row = SubjectRequest.objects.create(
        subject=spec.name,
        kind=kind,
        key=key,
        key_digest=digest,
        requested_by=requested_by,
        storage=storage,
    )
    queue = spec.queue() if callable(spec.queue) else spec.queue
    enqueued = handle.using(queue=queue).enqueue(request=str(row.id))
    row.job_id, row.run_id = enqueued.id, enqueued.run_id
    row.save(update_fields=["job_id", "run_id"])
    return Requested(request_id=row.id, job_id=enqueued.id, deduped=False)


@dataclass(frozen=True, slots=True)
class TablePlan:
    """One table of a dry run: what an erase would do, and to how many rows."""

    model: str
    by: str
    erase: str
    rows: int
    to_treat: int


def plan_subject(name: str, key: Any) -> list[TablePlan]:
    """Count, per table, the subject's rows and those an erase would change.

    Writes nothing (``jobs_subject erase`` without ``--write``).

    Raises:
        SubjectUnknown, SubjectKeyInvalid.
    """
    spec = get_subject(name)
    key = _normal_key(key)
    spec.check_key(key)
    return [
        TablePlan(
            model=table.label,
            by=table.by,
            erase=table.erase.describe(),
            rows=table.rows(key).count(),
            to_treat=table.untreated(key).count(),
        )
        for table in spec.tables
    ]
