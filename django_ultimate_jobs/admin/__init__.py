"""The Django admin for jobs: one module per page.

``jobs`` registers :class:`JobAdmin` (the list and the job page) and routes
the other pages under it: ``dead_letter``, ``queues``, ``cron_tasks``,
``workers`` and ``dashboard``. Every mutation goes through
:mod:`django_ultimate_jobs.operator`, behind its own permission, after a
confirmation page, and is recorded in ``LogEntry`` (see :mod:`.audit`).
"""

from .jobs import JobAdmin

__all__ = ["JobAdmin"]
