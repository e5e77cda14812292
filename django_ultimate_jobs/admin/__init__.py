"""The Django admin for jobs: one module per page.

``jobs`` registers :class:`JobAdmin` (the list and the job page) and routes
the other pages under it: ``dead_letter``, ``queues``, ``cron_tasks``,
``workers``, ``leases`` (locks and concurrency slots, read-only),
``events`` (the event bus, read-only) and ``dashboard``. ``backfills`` registers :class:`BackfillAdmin`
(progress, pause, resume). Every read and mutation goes through
:mod:`django_ultimate_jobs.operator` (the dead-letter groups through
:mod:`django_ultimate_jobs.dead_letters`, the backfill verbs through
:mod:`django_ultimate_jobs.backfills`), behind its own permission, and is
recorded in ``LogEntry``, one entry per object acted on (see :mod:`.audit`).
Every list refuses what no row can hold before a query (:mod:`.guards`),
and every JSON column is shown redacted (:mod:`.redacted`). ``ledger`` registers the
read-only ledger postings, lines and balances; ``outbox`` the read-only
outbox messages. ``subjects`` registers the read-only subject requests and
erase audit; ``consumers`` the stream consumers (pause, resume).
"""

from .backfills import BackfillAdmin
from .consumers import ConsumerAdmin
from .exports import ExportAdmin, ImportAdmin
from .jobs import JobAdmin
from .ledger import LedgerLineAdmin, LedgerPostingAdmin
from .outbox import OutboxMessageAdmin
from .search import ReindexAdmin
from .subjects import ErasureRecordAdmin, SubjectRequestAdmin
from .webhooks import InboundDeliveryAdmin, WebhookDeliveryAdmin, WebhookEndpointAdmin

__all__ = [
    "BackfillAdmin",
    "ConsumerAdmin",
    "ErasureRecordAdmin",
    "ExportAdmin",
    "ImportAdmin",
    "InboundDeliveryAdmin",
    "JobAdmin",
    "LedgerLineAdmin",
    "LedgerPostingAdmin",
    "OutboxMessageAdmin",
    "ReindexAdmin",
    "SubjectRequestAdmin",
    "WebhookDeliveryAdmin",
    "WebhookEndpointAdmin",
]
