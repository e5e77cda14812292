"""What an idle cron scheduler costs the database: statements per minute.

Run from the repository root::

    ./dev run python bench/scheduler_idle.py
    BENCH_SCHED_WINDOW=20 ./dev run python bench/scheduler_idle.py   # quick

It (re)creates the database ``ultimate_jobs_bench_scheduler``, migrates it,
declares one hourly task, and runs two real schedulers (``Scheduler.run``
on the system clock, each in its own thread with its own connection, as two
``runjobs`` processes would): one leads, one stands by. After a warm-up it
counts, over the window (``BENCH_SCHED_WINDOW``, default 65 s), the
statements each scheduler sent (counted by the driver as it sends them)
and, as a cross-check from outside, the statement ends seen in
``pg_stat_activity`` sampled every 20 ms. The target is 6 a minute each:
the lease renewal (leader) or ask (standby) every 10 s, and no table read
while nothing is due.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.common import (  # noqa: E402
    bench_db_name,
    git_head,
    migrate_in_subprocess,
    recreate_database,
    server_url,
    with_database,
)

BENCH_DB = bench_db_name("ultimate_jobs_bench_scheduler")
WARMUP_S = float(os.environ.get("BENCH_SCHED_WARMUP", "3"))
WINDOW_S = float(os.environ.get("BENCH_SCHED_WINDOW", "65"))
SAMPLE_S = 0.020
TARGET_PER_MINUTE = 6.0
RESULTS = ROOT / "bench" / "results" / "scheduler_idle.json"


def prepare(base_url: str, bench_url: str) -> None:
    recreate_database(base_url, BENCH_DB)
    migrate_in_subprocess(bench_url, "tests.settings")


def statement_ends(start: datetime, end: datetime, seen: set) -> int:
    return sum(1 for _pid, at in seen if start <= at < end)


def sample(base_url: str, stop: threading.Event, seen: set) -> None:
    with psycopg.connect(base_url, autocommit=True) as conn:
        query = (
            "SELECT pid, state_change FROM pg_stat_activity WHERE datname = %s "
            "AND backend_type = 'client backend' AND state = 'idle' "
            "AND state_change IS NOT NULL"
        )
        while not stop.wait(SAMPLE_S):
            seen.update(conn.execute(query, (BENCH_DB,)).fetchall())


def main() -> None:
    base_url = server_url(BENCH_DB)
    bench_url = with_database(base_url, BENCH_DB)
    prepare(base_url, bench_url)
    os.environ.update(DATABASE_URL=bench_url, DJANGO_SETTINGS_MODULE="tests.settings")
    import django

    django.setup()
    from django.db import connections

    from django_ultimate_jobs import task
    from django_ultimate_jobs.drivers.postgres import PostgresDriver
    from django_ultimate_jobs.worker.scheduler import Scheduler
    from tests.jobsapp.jobs import noop

    class CountingDriver(PostgresDriver):
        def __init__(self) -> None:
            super().__init__()
            self.sent: list[tuple[float, str]] = []

        def _rows(self, name, params):  # type: ignore[no-untyped-def]
            self.sent.append((time.monotonic(), name))
            return super()._rows(name, params)

    hourly = task(name="bench.hourly", cron="0 * * * *", tz="UTC", job=noop)
    drivers = {"first": CountingDriver(), "second": CountingDriver()}
    stop = threading.Event()
    schedulers = {
        role: Scheduler(driver=driver, tasks=lambda: [hourly], holder=f"bench-{role}")
        for role, driver in drivers.items()
    }

    def run(scheduler: Scheduler) -> None:
        try:
            scheduler.run(stop)
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=run, args=(s,), daemon=True)
        for s in schedulers.values()
    ]
    for thread in threads:
        thread.start()
    time.sleep(WARMUP_S)  # the bench's own pacing, not a wait on a worker
    seen: set = set()
    sampler_stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(base_url, sampler_stop, seen))
    sampler.start()
    with psycopg.connect(base_url, autocommit=True) as clock:
        time.sleep(0.2)
        start_db = clock.execute("SELECT clock_timestamp()").fetchone()[0]
        start = time.monotonic()
        time.sleep(WINDOW_S)
        end = time.monotonic()
        end_db = clock.execute("SELECT clock_timestamp()").fetchone()[0]
    leading = {role: s.lease.leading for role, s in schedulers.items()}
    time.sleep(0.2)
    sampler_stop.set()
    sampler.join()
    stop.set()
    for thread in threads:
        thread.join(5)
    minutes = WINDOW_S / 60
    result = {
        "commit": git_head(),
        "window_s": WINDOW_S,
        "target_per_minute": TARGET_PER_MINUTE,
        "outside_statements_per_minute": round(
            statement_ends(start_db, end_db, seen) / minutes, 2
        ),
    }
    for role, driver in drivers.items():
        sent = [name for at, name in driver.sent if start <= at < end]
        result[role] = {
            "leading": leading[role],
            "statements_per_minute": round(len(sent) / minutes, 2),
            "kinds": sorted(set(sent)),
        }
    print(json.dumps(result, indent=2))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
