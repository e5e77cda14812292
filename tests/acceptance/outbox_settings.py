"""Settings of the two-database outbox project (tests/acceptance/test_outbox.py).

The worker settings plus a second alias, ``jobs``, on a database the test
creates itself (``UJ_JOBS_DATABASE_URL``; CI has one PostgreSQL server):
jobs live there, enqueues run in transactions on ``default`` and go
through the outbox, which is required.
"""

import os

from django_ultimate_jobs.dburl import database_from_url
from tests.acceptance.worker_settings import *  # noqa: F403
from tests.acceptance.worker_settings import DATABASES, ULTIMATE_JOBS

DATABASES["jobs"] = database_from_url(os.environ["UJ_JOBS_DATABASE_URL"])

ULTIMATE_JOBS = {
    **ULTIMATE_JOBS,
    "DATABASE": "jobs",
    "OUTBOX": "required",
    "OUTBOX_CLAIM_LEASE": os.environ.get("UJ_OUTBOX_LEASE", "30s"),
    "OUTBOX_SWEEP_MAX": os.environ.get("UJ_OUTBOX_SWEEP_MAX", "30s"),
}
