"""The Django admin for jobs: one module per page.

``jobs`` registers :class:`JobAdmin` (the list and the job page) and routes
the other pages under it: ``dead_letter``, ``queues``, ``cron_tasks``,
``workers``, ``leases`` (locks and concurrency slots, read-only) and
``dashboard``. ``backfills`` registers :class:`BackfillAdmin`
(progress, pause, resume). Every mutation goes through
:mod:`django_ultimate_jobs.operator` (the backfill verbs through
:mod:`django_ultimate_jobs.backfills`), behind its own permission, and is
recorded in ``LogEntry`` (see :mod:`.audit`). ``ledger`` registers the
read-only ledger postings, lines and balances; ``outbox`` the read-only
outbox messages.
"""

from .backfills import BackfillAdmin
from .exports import ExportAdmin, ImportAdmin
from .jobs import JobAdmin
from .ledger import LedgerLineAdmin, LedgerPostingAdmin
from .outbox import OutboxMessageAdmin
from .search import ReindexAdmin

__all__ = [
    "BackfillAdmin",
    "ExportAdmin",
    "ImportAdmin",
    "JobAdmin",
    "LedgerLineAdmin",
    "LedgerPostingAdmin",
    "OutboxMessageAdmin",
    "ReindexAdmin",
]
