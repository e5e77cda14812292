"""The how-to's "In tests" example as a user runs it: a Django ``TestCase``
with the jobs in their own alias (``DATABASE = "jobs"``).

Not collected by pytest (no ``test_`` prefix): tests/acceptance/test_outbox.py
runs it with ``manage.py test`` under ``tests.acceptance.outbox_settings``,
so Django's runner creates both test databases as it would for a user.
"""

from django.db import transaction
from django.test import TestCase

from django_ultimate_jobs.models import Job, OutboxMessage
from django_ultimate_jobs.testing import publish_outbox, run_jobs
from tests.jobsapp.jobs import noop


class SeparateJobsDatabaseTests(TestCase):
    """docs/howto/separate-jobs-database.md#in-tests, with JOBS = "jobs"."""

    databases = {"default", "jobs"}

    def test_publish_then_run(self) -> None:
        with transaction.atomic(using="default"):
            answer = noop.using(outbox=True).enqueue(n=7)
        staged = OutboxMessage.objects.using("default").filter(
            id=answer.id, published_at=None
        )
        self.assertTrue(staged.exists())
        self.assertFalse(Job.objects.using("jobs").filter(id=answer.id).exists())
        self.assertEqual(publish_outbox(), 1)
        self.assertTrue(Job.objects.using("jobs").filter(id=answer.id).exists())
        self.assertEqual([e.claimed.id for e in run_jobs()], [answer.id])
