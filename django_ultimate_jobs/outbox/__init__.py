"""The transactional outbox (spec §7, upstream §17).

When the jobs live in another database than the business data
(``ULTIMATE_JOBS["DATABASE"]`` is not ``OUTBOX_DATABASE``), an insert into
the jobs table cannot join the caller's transaction. With
``ULTIMATE_JOBS["OUTBOX"]`` on (or ``.using(outbox=True)``), an enqueue
inside ``transaction.atomic()`` writes an :class:`~django_ultimate_jobs.models.OutboxMessage`
on the caller's connection instead (:mod:`.staging`); a rollback leaves
nothing, a commit wakes this process's relay, which publishes the message
as the job (:mod:`.relay`), and ``runjobs``' relay role sweeps what a
crash left. The message's id is the job's id: a second publish inserts
nothing.
"""

from __future__ import annotations

from .relay import publish_pending

__all__ = ["publish_pending"]
