"""One run of a consumer: fetch, check, handle and move the cursor, batch by batch.

Each batch is fetched outside any transaction (a network call must not
hold one open), then committed in one: the consumer's row is locked, the
run checks that it is still the run of record and that the cursor is the
one it fetched after (its ``version``), calls ``handle(items)``, and moves
the cursor. A crash before that commit loses the batch's effects and
leaves the cursor where it was: the next attempt fetches the batch again
(at least once per batch); effects in the same database commit exactly
once, with the cursor.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.db import close_old_connections, router, transaction
from django.db.models import F
from django.db.models.functions import Now

from ..errors import JobsError, code_of
from ..validation import storable_text
from .cursor import checked_batch
from .declaration import Batch, ConsumerSpec
from .errors import (
    ConsumerBatchInvalid,
    ConsumerCursorBackwards,
    ConsumerFetchFailed,
    ConsumerHandleFailed,
)

if TYPE_CHECKING:
    from ..context import JobContext

__all__ = ["run_once"]

logger = logging.getLogger("django_ultimate_jobs")

_HALTING = (ConsumerBatchInvalid, ConsumerCursorBackwards)
# Codes that stop a run without judging the stream: no error is recorded.
_NOT_A_FAILURE = frozenset(
    {"X_ABORTED", "X_DRAINING", "X_JOB_LEASE_LOST", "X_RATE_LIMITED"}
)


def _database() -> str:
    from .models import Consumer

    return router.db_for_write(Consumer)


def run_once(ctx: JobContext, spec: ConsumerSpec) -> dict[str, Any]:
    """One run: batches until caught up (or ``run_for`` passes, with ``poll``)."""
    skipped = _begin(spec, ctx.run_id)
    if skipped is not None:
        return {"consumer": spec.name, "skipped": skipped}
    try:
        return _loop(ctx, spec)
    except _HALTING as error:
        _write_error(spec, error.render(), halt=True)
        logger.warning(
            "jobs.consumer.halted", extra={"consumer": spec.name, "code": error.code}
        )
        raise
    except Exception as error:
        if code_of(error) in _NOT_A_FAILURE:
            _end(spec, ctx.run_id)  # a drain or a cancel: not the stream's fault
            raise
        text = (
            error.render()
            if isinstance(error, JobsError)
            else f"{type(error).__name__}: {error}"
        )
        _write_error(spec, text, halt=False, run_id=ctx.run_id)
        raise


def _begin(spec: ConsumerSpec, run_id: UUID) -> str | None:
    from .models import Consumer

    with transaction.atomic(using=_database()):
        row, _ = Consumer.objects.select_for_update().get_or_create(
            name=spec.name, defaults={"cursor": spec.start}
        )
        if row.state in (Consumer.State.PAUSED, Consumer.State.HALTED):
            return str(row.state)
        row.state = Consumer.State.RUNNING
        row.run_id = run_id
        row.run_batches = row.run_items = 0
        row.started_at = row.updated_at = Now()
        row.save()
    return None


def _loop(ctx: JobContext, spec: ConsumerSpec) -> dict[str, Any]:
    from .models import Consumer

    deadline = time.monotonic() + spec.run_for_s
    batches = items = 0
    ended = "caught-up"
    while True:
        ctx.cancellation.raise_if_cancelled()
        seen = (
            Consumer.objects.filter(name=spec.name)
            .values("cursor", "version", "state", "run_id")
            .first()
        )
        if seen is None or seen["state"] != Consumer.State.RUNNING:
            ended = seen["state"] if seen is not None else "removed"
            break
        batch = checked_batch(spec, _fetch(spec, seen["cursor"]), seen["cursor"])
        if not batch.items and batch.cursor == seen["cursor"]:
            if spec.poll_s is None or time.monotonic() + spec.poll_s > deadline:
                break
            if ctx.cancellation.wait(spec.poll_s):
                ctx.cancellation.raise_if_cancelled()
            continue
        refused = _commit(spec, ctx.run_id, seen["version"], batch)
        if refused is not None:
            # Paused meanwhile, or another run moved the cursor first: its
            # commit stands, and this run's batch was never handled.
            logger.info(
                "jobs.consumer.yielded", extra={"consumer": spec.name, "why": refused}
            )
            ended = refused
            break
        batches, items = batches + 1, items + len(batch.items)
        if time.monotonic() >= deadline:
            ended = "run-for"
            break
    _end(spec, ctx.run_id)
    return {"consumer": spec.name, "batches": batches, "items": items, "ended": ended}


def _fetch(spec: ConsumerSpec, cursor: Any) -> Any:
    try:
        return spec.fetch(cursor)
    except JobsError:
        raise  # its own code (RetryAfter, Terminal...) decides
    except Exception as error:
        raise ConsumerFetchFailed(
            f"fetch() of consumer {spec.name!r} raised {type(error).__name__}",
            meta={"consumer": spec.name, "error": type(error).__name__},
        ) from error


def _commit(spec: ConsumerSpec, run_id: UUID, version: int, batch: Batch) -> str | None:
    """Handle ``batch`` and move the cursor in one transaction.

    Answers ``None`` when committed, else why not (nothing was handled).
    """
    from .models import Consumer

    with transaction.atomic(using=_database()):
        row = (
            Consumer.objects.select_for_update()
            .filter(name=spec.name)
            .values("state", "run_id", "version")
            .first()
        )
        if row is None:
            return "removed"
        if row["state"] != Consumer.State.RUNNING:
            return str(row["state"])
        if row["run_id"] != run_id:
            return "superseded"
        if row["version"] != version:
            return "cursor-moved"
        if batch.items:
            _handle(spec, list(batch.items))
        Consumer.objects.filter(name=spec.name).update(
            cursor=batch.cursor,
            version=F("version") + 1,
            batches_done=F("batches_done") + 1,
            items_done=F("items_done") + len(batch.items),
            run_batches=F("run_batches") + 1,
            run_items=F("run_items") + len(batch.items),
            last_batch_at=Now(),
            updated_at=Now(),
            error="",
        )
    return None


def _handle(spec: ConsumerSpec, items: list[Any]) -> None:
    try:
        spec.handle(items)
    except JobsError:
        raise
    except Exception as error:
        raise ConsumerHandleFailed(
            f"handle() of consumer {spec.name!r} raised {type(error).__name__} "
            f"on a batch of {len(items)} item(s)",
            meta={"consumer": spec.name, "error": type(error).__name__},
        ) from error


def _end(spec: ConsumerSpec, run_id: UUID) -> None:
    from .models import Consumer

    Consumer.objects.filter(
        name=spec.name, state=Consumer.State.RUNNING, run_id=run_id
    ).update(state=Consumer.State.IDLE, updated_at=Now())


def _write_error(
    spec: ConsumerSpec, text: str, *, halt: bool, run_id: UUID | None = None
) -> None:
    from .models import Consumer

    changes: dict[str, Any] = {"error": storable_text(text[:2000]), "updated_at": Now()}
    rows = Consumer.objects.filter(name=spec.name)
    if halt:
        changes["state"] = Consumer.State.HALTED
    try:
        rows.update(**changes)
        if not halt:
            rows.filter(state=Consumer.State.RUNNING, run_id=run_id).update(
                state=Consumer.State.IDLE
            )
    except Exception:
        logger.warning("jobs.consumer.error-unrecorded", extra={"consumer": spec.name})
        close_old_connections()
