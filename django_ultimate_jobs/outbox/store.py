"""The outbox table's statements: stage, claim, mark, release, pending.

Every statement runs on ``connections[alias]`` of the calling thread, the
alias being ``ULTIMATE_JOBS["OUTBOX_DATABASE"]``: staging joins the
caller's transaction; the relay's claim, mark and release run in autocommit
on the relay thread's own connection. The statements are named queries in
``drivers/postgres/sql/outbox.sql``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import DatabaseError, connections

from ..conf import jobs_settings
from ..drivers.base import EnqueueRequest
from ..drivers.postgres import coded_failure
from ..drivers.postgres.jsonb import dumps, loads
from ..drivers.postgres.maintenance import delete_batch
from ..drivers.postgres.sql import query
from ..errors import SettingsInvalid
from ..ids import monotonic_uuid7

__all__ = ["Claimed", "OutboxStore", "outbox_database"]

_SQL = "outbox.sql"
_RETURNED = (
    "id",
    "run_id",
    "name",
    "queue",
    "input",
    "idempotency_key",
    "tenant_id",
    "priority",
    "max_attempts",
    "run_at",
    "enqueued_by",
    "traceparent",
)
"""The request fields ``outbox_claim`` returns first, in order; then the
extra fields' JSON text and ``staged_at``."""


_COLUMNS = frozenset({*_RETURNED, "delay_ms", "on_conflict", "input_json"})
"""Request fields with a column of their own (``delay_ms`` becomes ``run_at``;
``on_conflict``: a publish always dedupes; ``input_json`` is the ``input``
column's text, not stored twice); the rest ride in ``extra``."""
MAX_ERROR_LENGTH = 2_000


@dataclasses.dataclass(frozen=True, slots=True)
class Claimed:
    """A leased message: the request its publish sends, in stage order."""

    request: EnqueueRequest
    staged_at: datetime

    @property
    def id(self) -> UUID:
        """The message's id, which is the job's."""
        assert self.request.id is not None  # every staged message has one
        return self.request.id


def outbox_database() -> str:
    """``ULTIMATE_JOBS["OUTBOX_DATABASE"]``, checked to name a ``DATABASES`` alias.

    Raises:
        SettingsInvalid: it names none (``manage.py check`` says so too,
            ``ultimate_jobs.E005``), rather than Django's bare
            ``ConnectionDoesNotExist`` at the first statement.
    """
    alias = jobs_settings().outbox_database
    if alias not in connections.settings:
        raise SettingsInvalid(
            f"ULTIMATE_JOBS['OUTBOX_DATABASE'] names {alias!r}, which DATABASES "
            "does not define",
            fix=OUTBOX_DATABASE_FIX,
            meta={"database": alias},
        )
    return alias


OUTBOX_DATABASE_FIX = (
    "set ULTIMATE_JOBS['OUTBOX_DATABASE'] to the DATABASES alias your "
    "transactions run on (the default is 'default')"
)


class OutboxStore:
    """The outbox table of one database alias."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def _execute(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        return self._run(name, params)[0]

    def _run(
        self, name: str, params: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...]], int]:
        """The statement's rows and rowcount; a missing table is coded."""
        with connections[self.alias].cursor() as cursor:
            try:
                cursor.execute(query(name, _SQL), params)
            except DatabaseError as error:
                # The driver's reading of a failure: the outbox table not
                # migrated on OUTBOX_DATABASE is X_JOBS_TABLES_MISSING too.
                coded = coded_failure(self.alias, error)
                if coded is None:
                    raise
                raise coded from error
            rows = cursor.fetchall() if cursor.description else []
            return rows, int(cursor.rowcount)

    def stage(self, requests: Sequence[EnqueueRequest]) -> list[EnqueueRequest]:
        """Insert one message per request in the current transaction.

        Answers the requests with their ids allocated (the future jobs' ids,
        in call order, so id order is stage order).
        """
        staged = [
            dataclasses.replace(r, id=job_id, run_id=r.run_id or job_id)
            for r, job_id in ((r, r.id or monotonic_uuid7()) for r in requests)
        ]
        rows = [_row(index, r) for index, r in enumerate(staged)]
        self._execute("outbox_stage", {"rows": dumps(rows)})
        return staged

    def claim(self, token: str, *, limit: int, lease_ms: int) -> list[Claimed]:
        """Lease up to ``limit`` unpublished messages, in (staged_at, id) order."""
        rows = self._execute(
            "outbox_claim", {"token": token, "limit": limit, "lease_ms": lease_ms}
        )
        claimed = [_claimed(row) for row in rows]
        # UPDATE ... RETURNING promises no order: put stage order back.
        claimed.sort(key=lambda c: (c.staged_at, c.id))
        return claimed

    def mark_published(self, ids: Sequence[UUID], token: str) -> int:
        """Retire published messages this claimant holds; answers how many."""
        if not ids:
            return 0
        return self._run("outbox_mark", {"ids": list(ids), "token": token})[1]

    def release(
        self,
        ids: Sequence[UUID],
        token: str,
        *,
        failed: UUID | None = None,
        error: str | None = None,
    ) -> None:
        """Hand claimed messages back now; ``failed`` records its error."""
        if not ids:
            return
        self._execute(
            "outbox_release",
            {
                "ids": list(ids),
                "token": token,
                "failed": failed,
                "error": None if error is None else error[:MAX_ERROR_LENGTH],
            },
        )

    def release_claimant(self, token: str) -> int:
        """Hand back every unpublished message ``token`` holds (a relay that
        stops); answers how many."""
        return self._run("outbox_release_claimant", {"token": token})[1]

    def pending(self) -> int:
        """Messages not published yet (claimed or not)."""
        return int(self._execute("outbox_pending", {})[0][0])

    def purge_published(self, before: datetime, *, limit: int) -> int:
        """Delete up to ``limit`` messages published before ``before``, oldest
        first, in a transaction of their own (one batch of the retention
        sweep); unpublished messages are never touched."""
        return delete_batch(self.alias, "outbox_retention", {"before": before}, limit)[
            0
        ]


def _row(index: int, request: EnqueueRequest) -> dict[str, Any]:
    extra = {
        f.name: getattr(request, f.name)
        for f in dataclasses.fields(request)
        if f.name not in _COLUMNS
    }
    # Fields added to EnqueueRequest later (and their defaults) ride along.
    extra = {
        key: value
        for key, value in extra.items()
        if value != _default(key) and value is not None
    }
    return {
        "ord": index,
        "id": str(request.id),
        "run_id": str(request.run_id),
        "name": request.name,
        "queue": request.queue,
        "input": request.input,
        "idempotency_key": request.idempotency_key,
        "tenant_id": request.tenant_id,
        "priority": request.priority,
        "max_attempts": request.max_attempts,
        "run_at": request.run_at.isoformat() if request.run_at else None,
        "delay_ms": request.delay_ms,
        "enqueued_by": request.enqueued_by,
        "traceparent": request.traceparent,
        "extra": extra or None,
    }


def _default(name: str) -> Any:
    field = EnqueueRequest.__dataclass_fields__[name]
    if field.default is not dataclasses.MISSING:
        return field.default
    return None


def _claimed(row: tuple[Any, ...]) -> Claimed:
    fields = dict(zip(_RETURNED, row, strict=False))
    extra_text, staged_at = row[len(_RETURNED) :]
    fields["input"] = loads(fields["input"])
    extra = loads(extra_text) if extra_text else {}
    known = EnqueueRequest.__dataclass_fields__
    request = EnqueueRequest(
        **fields,
        # A publish cannot reach the enqueuer: a live holder of the key
        # answers the publish (the staged id then names no job).
        on_conflict="dedupe",
        **{k: v for k, v in extra.items() if k in known and k not in fields},
    )
    return Claimed(request, staged_at)
