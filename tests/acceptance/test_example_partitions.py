"""Partition maintenance on the example project's own partitioned table.

``example_project`` declares ``shop.PageView``, range-partitioned by month
(``ahead=3, retain=12``), created by ``CreatePartitionedModel`` in its
migration. This test migrates the example project into a scratch database,
then, inside the example project's own Django (``manage.py shell``), runs
maintenance once per simulated day for 14 months and checks after every run
that exactly the right partitions exist and that a second run at the same
instant changes nothing.
"""

from __future__ import annotations

import json

import pytest

from tests.support.example import manage, scratch_database

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

# Runs in the example project. The expected set is computed here from the
# declaration's rules, independently of the planner: every month from the
# first run's month (nothing is backfilled) or 12 months back, whichever is
# later, through 3 months ahead.
SIMULATION = """
import json
from datetime import UTC, date, datetime, timedelta

from django.db import connection

from django_ultimate_jobs.maintenance.partitions import maintain_partitions


def month(day):
    return date(day.year, day.month, 1)


def shift(first, months):
    years, index = divmod(first.month - 1 + months, 12)
    return date(first.year + years, index + 1, 1)


def existing():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent "
            "WHERE p.relname = 'shop_pageview'"
        )
        return {row[0] for row in cursor.fetchall()}


start = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)
first = month(start.date())
created = dropped = 0
days = 14 * 31
for offset in range(days):
    now = start + timedelta(days=offset)
    plans = maintain_partitions(now)
    created += sum(len(plan.create) for plan in plans)
    dropped += sum(len(plan.drop) for plan in plans)
    again = maintain_partitions(now)
    assert not any(plan.changes for plan in again), (now.isoformat(), again)
    current = month(now.date())
    wanted, cursor_month = set(), max(first, shift(current, -12))
    while cursor_month <= shift(current, 3):
        wanted.add(f"shop_pageview_p{cursor_month:%Y%m%d}")
        cursor_month = shift(cursor_month, 1)
    have = existing()
    assert have == wanted, (now.isoformat(), sorted(have ^ wanted))
print("RESULT " + json.dumps({"days": days, "created": created, "dropped": dropped,
                             "last": sorted(existing())}))
"""


@pytest.fixture
def example_database(db):
    """A scratch database for the example project; its URL."""
    with scratch_database() as url:
        yield url


def test_a_year_of_daily_maintenance_on_the_example_table(example_database):
    manage(example_database, "migrate", "--verbosity", "0")

    output = manage(example_database, "shell", "--command", SIMULATION)

    result = json.loads(output.split("RESULT ", 1)[1])
    print(f"example partitions: {result}")
    # Jan 2026 and 3 ahead at the start, then one more in each of the 14
    # months after (to March 2027); January and February 2026 are dropped
    # once the current month is February and March 2027.
    assert result["created"] == 4 + 14
    assert result["dropped"] == 2
    assert result["last"][0] == "shop_pageview_p20260301"
    assert result["last"][-1] == "shop_pageview_p20270601"

    # The command itself reports nothing to do at an instant already maintained.
    dry = manage(
        example_database, "maintain_partitions", "--dry-run", "--now", "2027-03-10"
    )
    assert "would create" not in dry and "would drop" not in dry, dry
