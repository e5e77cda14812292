"""The writes bodies hand the worker with ``ctx.write_on_ack``, made with their acks.

Each writer is called once per settle batch with the items of every attempt
in it that gave it that writer. Where the job rows live in a Django database
whose transactions the driver joins (the Postgres driver), the acks and the
writes are ONE transaction on the settle thread's connection: the writes
commit with the done mark or not at all, and only attempts whose ack landed
write (one that lost its lease learns it here, and writes nothing). A store
outside Django's databases (Redis, memory) shares no transaction with them:
there the writes go first, then the acks, so a worker that dies in between
runs the jobs again (the writer must be idempotent).

A writer that raises for a reason of its own (not its database away, not a
deadlock) is logged ``jobs.settle.write-failed`` and left out: the batch is
written again without it, and its jobs still end done. A writer's bug must
not make every job of the batch run again, forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from django.db import transaction

from ..drivers.base import ClaimedJob, JobDriver
from .executor import Execution
from .logfields import MAX_ERROR_TEXT

__all__ = ["ack_with_writes"]

logger = logging.getLogger("django_ultimate_jobs")

Writer = Callable[[list[Any]], None]
Acks = Callable[[], tuple[list[bool], list[ClaimedJob]]]


class _WriterFailed(Exception):
    def __init__(self, writer: Writer, error: Exception) -> None:
        super().__init__(str(error))
        self.writer = writer
        self.error = error


def ack_with_writes(
    driver: JobDriver, acks: Sequence[Execution], ack: Acks
) -> tuple[list[bool], list[ClaimedJob]]:
    """Run ``ack`` (the batch's acks: landed flags in order, and heirs) with
    the writes of ``acks``; answer what ``ack`` answered.

    Raises what ``ack`` raises, and a writer's error that says its database
    is away or that it lost a deadlock: nothing of the batch is written then.
    """
    if not any(execution.writes for execution in acks):
        return ack()
    alias = driver.alias
    joined = alias is not None and driver.features.joins_caller_transaction
    written: set[Writer] = set()  # outside a transaction: those that landed
    while True:
        try:
            if not joined:
                _write(driver, acks, None, written)
                return ack()
            assert alias is not None
            with transaction.atomic(using=alias):
                answer = ack()
                _write(driver, acks, answer[0], None)
            return answer
        except _WriterFailed as failed:
            _drop(acks, failed)
        except Exception:
            # A writer may use a connection other than the acks' (another
            # alias): one left unusable is closed, so the next try reconnects.
            driver.sessions.reset_broken()
            raise


def _write(
    driver: JobDriver,
    acks: Sequence[Execution],
    landed: list[bool] | None,
    written: set[Writer] | None,
) -> None:
    groups: dict[Writer, list[Any]] = {}
    for index, execution in enumerate(acks):
        if landed is not None and not landed[index]:
            continue  # not this worker's row any more: its writes are not ours
        for writer, item in execution.writes or ():
            groups.setdefault(writer, []).append(item)
    sessions = driver.sessions
    for writer, items in groups.items():
        if written is not None and writer in written:
            continue
        try:
            writer(items)
        except Exception as error:
            if sessions.is_unavailable(error) or sessions.is_transient(error):
                raise
            raise _WriterFailed(writer, error) from error
        if written is not None:
            written.add(writer)


def _drop(acks: Sequence[Execution], failed: _WriterFailed) -> None:
    """Log the writer that failed, and leave its items out of the next try."""
    jobs = []
    for execution in acks:
        if execution.writes and any(w is failed.writer for w, _ in execution.writes):
            jobs.append(str(execution.claimed.id))
            execution.writes = [
                (w, item) for w, item in execution.writes if w is not failed.writer
            ]
    error = failed.error
    logger.error(
        "jobs.settle.write-failed",
        extra={
            "writer": _name(failed.writer),
            "count": len(jobs),
            "job_ids": jobs[:20],
            "error": f"{type(error).__name__}: {error}"[:MAX_ERROR_TEXT],
            "fix": "fix the writer given to ctx.write_on_ack: these jobs are done "
            "and their writes were dropped",
        },
        exc_info=error,
    )


def _name(writer: Writer) -> str:
    module = getattr(writer, "__module__", None) or "?"
    return f"{module}.{getattr(writer, '__qualname__', repr(writer))}"
