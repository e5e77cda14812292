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

A writer is user code on the thread every job of the worker settles
through, so what it does wrong stays its own: an error it raises (even
``SystemExit``), an error it caught but left the transaction failed by, a
rollback it asked for (``set_rollback``), a plain ``ROLLBACK`` of its own, a
coroutine it returned, a deadlock it
loses three times running, or its connection lost three times running right
after the acks were written on it: each is logged
``jobs.settle.write-failed`` naming the writer, its items are dropped, and
the batch is written again without it. Its jobs still end done; the other
jobs of the batch are not touched. A lost connection otherwise is the
database away, and the batch is kept and written again once it answers.
A writer that COMMITs (or ends the transaction AND CHAIN) breaks the acks'
atomicity in a way no check undoes: the docs forbid it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from django.db import connections, transaction

from ..drivers.base import ClaimedJob, JobDriver
from .executor import Execution
from .logfields import MAX_ERROR_TEXT

__all__ = ["AckWrites"]

logger = logging.getLogger("django_ultimate_jobs")

Writer = Callable[[list[Any]], None]
Acks = Callable[[], tuple[list[bool], list[ClaimedJob]]]

WRITER_RETRIES = 3
"""Tries of a writer that loses a deadlock, or its connection right after
the acks, before it is left out."""
_IN_TRANSACTION = psycopg.pq.TransactionStatus.INTRANS


class _WriterFailed(Exception):
    def __init__(self, writer: Writer, error: BaseException, *, again: bool) -> None:
        super().__init__(str(error))
        self.writer = writer
        self.error = error
        self.again = again
        """A deadlock victim: the same call may land on a retry."""


class _WriterBroke(Exception):
    """What a writer did wrong without raising (logged as its error)."""


class AckWrites:
    """Makes the writes of one worker's settle batches (the settle thread's)."""

    def __init__(self, driver: JobDriver) -> None:
        self.driver = driver
        self._losses: dict[Writer, int] = {}
        """Connections lost in a row inside a writer, right after its acks."""

    def run(
        self, acks: Sequence[Execution], ack: Acks
    ) -> tuple[list[bool], list[ClaimedJob]]:
        """Run ``ack`` (the batch's acks: landed flags in order, and heirs)
        with the writes of ``acks``; answer what ``ack`` answered.

        Raises what ``ack`` raises, and a writer's lost connection (the
        database away): nothing of the batch is written then.
        """
        if not any(execution.writes for execution in acks):
            return ack()
        alias = self.driver.alias
        joined = alias is not None and self.driver.features.joins_caller_transaction
        written: set[Writer] = set()  # outside a transaction: those that landed
        tries: dict[Writer, int] = {}
        while True:
            try:
                if alias is None or not joined:
                    self._write(acks, None, written, None)
                    return ack()
                with transaction.atomic(using=alias):
                    answer = ack()
                    self._write(acks, answer[0], None, alias)
                return answer
            except _WriterFailed as failed:
                tried = tries.get(failed.writer, 0) + 1
                tries[failed.writer] = tried
                if not (failed.again and tried < WRITER_RETRIES):
                    _drop(acks, failed)
            except Exception:
                # A writer may use a connection other than the acks' (another
                # alias): one left unusable is closed, so the next try reconnects.
                self.driver.sessions.reset_broken()
                raise

    def _write(
        self,
        acks: Sequence[Execution],
        landed: list[bool] | None,
        written: set[Writer] | None,
        alias: str | None,
    ) -> None:
        groups: dict[Writer, list[Any]] = {}
        for index, execution in enumerate(acks):
            if landed is not None and not landed[index]:
                continue  # not this worker's row any more: its writes are not ours
            for writer, item in execution.writes or ():
                groups.setdefault(writer, []).append(item)
        for writer, items in groups.items():
            if written is not None and writer in written:
                continue
            self._call(writer, items, alias)
            if written is not None:
                written.add(writer)

    def _call(self, writer: Writer, items: list[Any], alias: str | None) -> None:
        sessions = self.driver.sessions
        try:
            call: Callable[..., Any] = writer  # it may return what it must not
            returned = call(items)
        except (Exception, SystemExit, KeyboardInterrupt) as error:
            if sessions.is_unavailable(error):
                losses = self._losses.get(writer, 0) + 1
                if alias is None or losses < WRITER_RETRIES:
                    # The database away (or this writer's own doing, which
                    # three losses in a row right after the acks tell).
                    self._losses[writer] = losses
                    raise
                self._losses.pop(writer, None)
            again = sessions.is_transient(error)
            raise _WriterFailed(writer, error, again=again) from error
        self._losses.pop(writer, None)
        if inspect.isawaitable(returned) or inspect.isgenerator(returned):
            close = getattr(returned, "close", None)
            if close is not None:
                close()
            broke = _WriterBroke(
                f"the writer returned {type(returned).__name__}, which nothing "
                "awaits or runs: a writer must be a plain function"
            )
            raise _WriterFailed(writer, broke, again=False)
        if alias is not None:
            connection = connections[alias]
            raw = connection.connection
            status = None if raw is None else raw.info.transaction_status
            if connection.needs_rollback:
                broke = _WriterBroke(
                    "the writer marked the acks' transaction for rollback "
                    "(transaction.set_rollback(True), or an error caught inside "
                    "an atomic block): wrap what may fail in its own atomic()"
                )
                raise _WriterFailed(writer, broke, again=False)
            if status != _IN_TRANSACTION:
                broke = _WriterBroke(
                    "the writer left the acks' transaction failed or ended "
                    f"({status.name if status is not None else 'closed'}): an "
                    "error it caught without a savepoint (use transaction.atomic() "
                    "around what may fail), or a COMMIT or ROLLBACK of its own"
                )
                raise _WriterFailed(writer, broke, again=False)


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
            "fix": "fix the writer given to ctx.write_on_ack: these jobs end done "
            "and their writes were dropped",
        },
        exc_info=error if not isinstance(error, _WriterBroke) else None,
    )


def _name(writer: Writer) -> str:
    writer = getattr(writer, "func", writer)  # functools.partial: what it wraps
    module = getattr(writer, "__module__", None) or "?"
    return f"{module}.{getattr(writer, '__qualname__', repr(writer))}"
