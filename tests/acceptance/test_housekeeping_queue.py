"""A plain ``runjobs`` runs the built-in housekeeping jobs; ``--no-housekeeping`` not.

The built-in jobs wait on ``HOUSEKEEPING_QUEUE`` (``ultimate_jobs``), which
no app lists in ``QUEUES``: every worker serves it besides its own queues,
so retention and partitions run wherever a worker runs.
"""

from __future__ import annotations

import pytest

from django_ultimate_jobs import operator
from django_ultimate_jobs.maintenance.builtin import retention

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

EXIT_S = 60


def test_a_plain_runjobs_runs_housekeeping_unless_excluded(fleet):
    """The worker's queues are QUEUES plus ultimate_jobs, unless excluded."""
    enqueued = retention.enqueue()
    burst = ("--burst", "--no-scheduler")
    excluded = fleet.start(*burst, "--queues", "default", "--no-housekeeping")
    assert excluded.wait_exit(EXIT_S) == 0
    assert "queues=default " in excluded.output()
    assert operator.show(enqueued.id)["state"] == "ready"

    plain = fleet.start(*burst)
    assert plain.wait_exit(EXIT_S) == 0
    assert "queues=default,ultimate_jobs " in plain.output()
    assert operator.show(enqueued.id)["state"] == "done"
