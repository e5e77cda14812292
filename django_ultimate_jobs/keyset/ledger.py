"""The moves of a pass's progress row, each in the transaction that keeps it true.

A :class:`Ledger` is one pass's row (a :class:`~.models.PassRecord`
subclass and the lookup that finds it) and the coded errors of its kind.
Enqueueing gates on the row and makes it the new pass's in the enqueue's
transaction, so whoever follows the row never reads the previous pass's
outcome; the start, each page and the end are written inside the pass's
steps; a failure is written outside them (its own statement, never hiding
the error that failed the pass); pause and resume are an operator's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.db import transaction
from django.db.models import Case, QuerySet, Value, When
from django.db.models.functions import Now

from ..errors import JobsError
from .state import PassState

if TYPE_CHECKING:
    from ..drivers.base import Enqueued
    from .models import PassRecord

__all__ = ["NOT_A_FAILURE", "Ledger", "Refusal", "Refusals", "db_now"]

logger = logging.getLogger("django_ultimate_jobs")

NOT_A_FAILURE = frozenset(
    {"X_ABORTED", "X_DRAINING", "X_JOB_LEASE_LOST", "X_RATE_LIMITED"}
)
"""Codes that stop an attempt without judging the pass: the row is not
marked failed for them (the next attempt picks up where this one was)."""


Refusal = Callable[..., JobsError]
"""Builds a kind's coded error: ``(cause, *, fix=None, meta=None)``."""


@dataclass(frozen=True, slots=True)
class Refusals:
    """The coded errors one kind of pass raises for the row's moves.

    Each is a callable building the error (a class, or a lambda calling it
    by name so that the docs' scan sees the code raised).
    """

    applied: Refusal
    """Enqueued while done, without ``force``."""
    paused: Refusal
    """Enqueued while paused, without ``force``."""
    state_invalid: Refusal
    """Pause with nothing to pause, resume with nothing to resume."""


@dataclass(frozen=True, slots=True)
class Ledger:
    """One pass's progress row: ``model.objects.filter(**lookup)``.

    Attributes:
        kind: ``backfill``, ``reindex``, ``export`` or ``import``.
        model: the record model.
        lookup: the fields that find the row (and create it).
        label: how messages name the pass (``backfill 'emails'``).
        meta: the ``meta`` of every error raised about it.
        refusals: the kind's coded errors.
        rerun_fix: the ``fix`` of the "done already" refusal.
        done_restarts: a done pass enqueued again starts over by itself
            (a reindex), instead of being refused without ``force``.
        defaults: fields of a row created by the first enqueue.
    """

    kind: str
    model: type[PassRecord]
    lookup: Mapping[str, Any]
    label: str
    meta: Mapping[str, Any]
    refusals: Refusals
    rerun_fix: str = ""
    done_restarts: bool = False
    defaults: Mapping[str, Any] | None = None

    def rows(self) -> QuerySet[Any]:
        """The row, as a QuerySet (for updates)."""
        return self.model._default_manager.filter(**self.lookup)

    def get(self) -> Any:
        """The row, or ``None`` before the first pass."""
        return self.rows().first()

    def state(self) -> str:
        """The stored state (``pending`` before the first pass)."""
        state = self.rows().values_list("state", flat=True).first()
        return state or PassState.PENDING

    def _locked(self) -> Any:
        row, _ = self.model._default_manager.select_for_update().get_or_create(
            **self.lookup, defaults=dict(self.defaults or {})
        )
        return row

    # -- an operator's moves ------------------------------------------------------

    def enqueue(
        self,
        enqueue: Callable[[], Enqueued],
        *,
        force: bool = False,
        check: Callable[[Any], None] | None = None,
        update: Mapping[str, Any] | None = None,
    ) -> Enqueued:
        """Gate on the row, then ``enqueue()`` the pass, in one transaction.

        The row becomes the new pass's (``pending``, its ``run_id``; its
        progress reset with ``force``, or when a done pass of a kind that
        restarts goes again). A live pass is not queued twice: the answer
        is that pass (``deduped``), the row untouched. ``update`` sets more
        fields of the row with it (what the new pass was asked).

        Raises:
            the kind's ``applied`` / ``paused`` refusal, or what ``check(row)``
            raises; nothing is queued then.
        """
        with transaction.atomic():
            row = self._locked()
            done = row.state == PassState.DONE
            if done and not force and not self.done_restarts:
                raise self.refusals.applied(
                    f"{self.label} is done already",
                    fix=self.rerun_fix or None,
                    meta=dict(self.meta),
                )
            if row.state == PassState.PAUSED and not force:
                raise self.refusals.paused(
                    f"{self.label} is paused", meta=dict(self.meta)
                )
            if check is not None:
                check(row)
            enqueued = enqueue()
            if not enqueued.deduped:
                self._mark_queued(
                    row, enqueued.run_id, reset=force or done, **(update or {})
                )
        return enqueued

    def pause(self) -> None:
        """Pause: the pass stops before its next page.

        Raises:
            the kind's ``state_invalid``: done or paused already.
        """
        with transaction.atomic():
            row = self._locked()
            if row.state in (PassState.DONE, PassState.PAUSED):
                raise self.refusals.state_invalid(
                    f"{self.label} is {row.state}: there is nothing to pause",
                    meta=dict(self.meta),
                )
            row.state = PassState.PAUSED
            row.save(update_fields=["state", "updated_at"])

    def resume(self, enqueue: Callable[[Any], Enqueued]) -> Enqueued:
        """Resume a paused pass: ``enqueue(row)`` a run that goes on after
        its last row done.

        Returns:
            The queued run (``deduped`` when the paused pass is still live
            and goes on by itself).

        Raises:
            the kind's ``state_invalid``: it is not paused.
        """
        with transaction.atomic():
            row = (
                self.model._default_manager.select_for_update()
                .filter(**self.lookup, state=PassState.PAUSED)
                .first()
            )
            if row is None:
                raise self.refusals.state_invalid(
                    f"{self.label} is not paused: there is nothing to resume",
                    meta=dict(self.meta),
                )
            # In the same transaction: a resume that could not enqueue leaves
            # the pass paused, not pending with no run coming.
            enqueued = enqueue(row)
            if enqueued.deduped:
                # The paused pass is still live: it goes on by itself.
                row.state, row.updated_at = PassState.PENDING, Now()
                row.save(update_fields=["state", "updated_at"])
            else:
                self._mark_queued(row, enqueued.run_id, reset=False)
            return enqueued

    def _mark_queued(
        self, row: Any, run_id: UUID, *, reset: bool, **update: Any
    ) -> None:
        if reset:
            row.reset_progress()
        for field, value in update.items():
            setattr(row, field, value)
        row.state = PassState.PENDING
        row.run_id = run_id
        row.error = ""
        row.updated_at = Now()
        row.save()

    # -- the pass's moves -----------------------------------------------------------

    def begin(
        self,
        run_id: str,
        force: bool,
        *,
        total: Callable[[Any], int],
        more: Callable[[Any], Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The start step: the row becomes this run's and ``running``.

        Answers ``{"skip": "done" | "paused"}`` for a pass with nothing to
        do, else ``{"skip": None, "cursor", "page", "rows", "total"}`` and
        what ``more(row)`` adds (JSON: it is the step's output).
        ``total(row)`` counts the rows the pass expects.
        """
        row = self._locked()
        done = row.state == PassState.DONE
        if done and not force and not self.done_restarts:
            return {"skip": "done"}
        if row.state == PassState.PAUSED and not force:
            return {"skip": "paused"}
        if force or done:
            row.reset_progress()
        row.state = PassState.RUNNING
        row.run_id = UUID(run_id)
        row.error = ""
        row.total = total(row)
        if row.started_at is None:
            row.started_at = db_now()
        row.save()
        return {
            "skip": None,
            "cursor": row.cursor,
            "page": row.pages_done,
            "rows": row.rows_done,
            "total": row.total,
            **(more(row) if more is not None else {}),
        }

    def page_done(
        self, *, cursor: Any, rows: int | None, pages: int, **more: Any
    ) -> None:
        """Record a page (inside the page's step): where the pass is now.

        ``rows`` (rows done in all) is left as it is when ``None`` (a page
        of a phase that counts something else). An operator's pause, made
        while the page ran, stands.
        """
        paused = PassState.PAUSED
        if rows is not None:
            more["rows_done"] = rows
        self.rows().update(
            cursor=cursor,
            pages_done=pages,
            updated_at=Now(),
            state=Case(
                When(state=paused, then=Value(paused)),
                default=Value(PassState.RUNNING),
            ),
            **more,
        )

    def finish(self, **more: Any) -> None:
        """The end step: every row was handled."""
        self.rows().update(
            state=PassState.DONE,
            finished_at=Now(),
            updated_at=Now(),
            error="",
            **more,
        )

    @contextmanager
    def failures(self) -> Iterator[None]:
        """Mark the row ``failed`` with the error that ends an attempt.

        Not for the codes that only stop an attempt (``NOT_A_FAILURE``);
        the error is raised on either way.
        """
        try:
            yield
        except JobsError as error:
            if error.code not in NOT_A_FAILURE:
                self.mark_failed(error.render())
            raise
        except Exception as error:
            self.mark_failed(f"{type(error).__name__}: {error}")
            raise

    def mark_failed(self, error: str) -> None:
        """Store ``error`` on the row, ``failed`` unless an operator paused it."""
        from django.db import close_old_connections

        try:
            # The row may not exist yet: a start step that failed rolled it back.
            self.model._default_manager.get_or_create(
                **self.lookup, defaults=dict(self.defaults or {})
            )
            self.rows().exclude(state=PassState.PAUSED).update(
                state=PassState.FAILED, error=error[:2000], updated_at=Now()
            )
        except Exception:
            # Progress bookkeeping must not hide the error that failed the
            # pass; a connection the failure broke is dropped, not kept for
            # the next job.
            if self.kind == "backfill":
                logger.warning("jobs.backfill.ledger-failed", extra=dict(self.meta))
            else:
                logger.warning(
                    "jobs.pass.ledger-failed", extra={"kind": self.kind, **self.meta}
                )
            close_old_connections()


def db_now() -> datetime:
    """The database clock."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    return now  # type: ignore[no-any-return]
