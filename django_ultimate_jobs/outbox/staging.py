"""The enqueue's routing decision: insert the job now, or stage a message.

:func:`submit` is the one place every enqueue path (``enqueue``,
``enqueue_many``, the ``django.tasks`` backend) hands its validated requests
to. It stages them in the caller's transaction when the outbox is asked for
(``ULTIMATE_JOBS["OUTBOX"]`` or ``.using(outbox=True)``, or the driver
cannot join the caller's transaction: the Redis driver) and a transaction
is open on ``OUTBOX_DATABASE``; otherwise it calls the driver directly.

A staged batch registers one ``transaction.on_commit`` callback per
transaction (``robust=True``: another app's callback that raises neither
stops ours nor is stopped by it). The callback only wakes this process's
relay thread; the commit path does no database work of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connections, transaction

from .. import tracing
from ..conf import jobs_settings
from ..drivers import get_driver
from ..drivers.base import Enqueued, EnqueueRequest
from ..errors import JobInputInvalid, OutboxNoTransaction
from ..faults import AFTER_OUTBOX_COMMIT, fault_point
from .store import OutboxStore, outbox_database

__all__ = ["routes_to_outbox", "stage", "submit"]


def routes_to_outbox(choice: bool | None) -> bool:
    """Whether an enqueue with ``using(outbox=choice)`` stages a message.

    Raises:
        OutboxNoTransaction: ``OUTBOX = "required"`` and no transaction is
            open on ``OUTBOX_DATABASE``, or ``outbox=False`` was passed.
        SettingsInvalid: ``OUTBOX_DATABASE`` names no ``DATABASES`` alias.
    """
    settings = jobs_settings()
    mode = settings.outbox
    if not mode and not choice:
        # The common case: no connection is looked at. A store that cannot
        # join the caller's transaction and that other processes read (the
        # Redis driver) takes an enqueue inside one through the outbox, so
        # a rolled-back transaction enqueues nothing.
        if choice is False or not _beside_the_transaction():
            return False
        return connections[outbox_database()].in_atomic_block
    alias = outbox_database()
    # outbox=False reads as "no transaction", as upstream: under "required"
    # it is refused like any enqueue outside one.
    in_transaction = choice is not False and connections[alias].in_atomic_block
    if mode == "required" and not in_transaction:
        why = (
            "using(outbox=False) was passed, which 'required' refuses like an "
            "enqueue outside a transaction"
            if choice is False
            else f"no transaction is open on {alias!r}"
        )
        raise OutboxNoTransaction(
            f"ULTIMATE_JOBS['OUTBOX'] is 'required' and {why}; nothing was written",
            meta={"database": alias, "outbox": choice},
        )
    return bool(choice) or in_transaction


def _beside_the_transaction() -> bool:
    """Whether the driver keeps jobs where the caller's transaction is not
    (``joins_caller_transaction`` False) and other processes read them
    (``shared_across_processes``; the memory driver's rows are this
    process's alone, and its users' tests enqueue inside ``TestCase``)."""
    features = get_driver().features
    return features.shared_across_processes and not features.joins_caller_transaction


def submit(
    requests: Sequence[EnqueueRequest], outbox: bool | None, *, many: bool = False
) -> list[Enqueued]:
    """Enqueue ``requests`` (validated) directly or through the outbox.

    Directly, ``many`` picks the driver's ``enqueue_many`` (one statement)
    over ``enqueue`` (one request). With tracing on, the write runs in a
    producer span whose ``traceparent`` each row carries.
    """
    staged = routes_to_outbox(outbox)
    if not tracing.enabled():
        return _write(requests, staged, many)
    with tracing.producing(requests, "stage" if staged else "enqueue") as producing:
        answers = _write(producing.requests, staged, many)
        producing.sent(answers)
        return answers


def _write(
    requests: Sequence[EnqueueRequest], staged: bool, many: bool
) -> list[Enqueued]:
    if staged:
        return stage(requests)
    driver = get_driver()
    if many:
        return driver.enqueue_many(requests)
    return [driver.enqueue(request) for request in requests]


def stage(requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
    """Write one outbox message per request in the caller's transaction.

    Answers the ids the jobs will have, ``deduped=False``: whether a live
    job holds an idempotency key is known only at publish.

    Raises:
        JobInputInvalid: ``on_conflict="error"``, which a publish after
            commit cannot report to the enqueuer; nothing is written.
    """
    if not requests:
        return []
    if any(r.on_conflict == "error" for r in requests):
        raise JobInputInvalid(
            "on_conflict='error' cannot be honoured through the outbox: a "
            "conflict is found at publish, after the enqueuer's commit",
            fix="use on_conflict='dedupe' (the default) with the outbox",
        )
    alias = outbox_database()
    staged = OutboxStore(alias).stage(requests)
    _wake_on_commit(alias)
    return [Enqueued(r.id, r.run_id or r.id, False) for r in staged if r.id]


def _wake_on_commit(alias: str) -> None:
    connection = connections[alias]
    # One callback per transaction is enough; a callback registered in a
    # savepoint that rolled back is gone from the list, so it is added again.
    if any(entry[1] is _committed for entry in connection.run_on_commit):
        return
    transaction.on_commit(_committed, using=alias, robust=True)


def _committed() -> None:
    """After a commit that staged messages: publish them."""
    fault_point(AFTER_OUTBOX_COMMIT)
    from .relay import local_relay, publish_pending

    alias = jobs_settings().outbox_database
    if connections[alias].in_atomic_block:
        # Only a test runs commit callbacks inside a transaction (Django's
        # captureOnCommitCallbacks under TestCase): the staged rows are
        # visible to this thread's connection alone, so publish here.
        publish_pending()
        return
    local_relay().wake()
