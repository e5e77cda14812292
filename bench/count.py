"""Bench: ``operator.count()`` beside ``operator.stats()``.

Loads job rows into its own database with the admin bench's statement
(about 90% done, the rest ready, delayed, running, dead, failed and
cancelled over 20 job names and 4 queues), vacuums and analyzes the table
as autovacuum would, then times each call (median of ``--rounds``, after a
warm-up) and prints the plan of each count statement, so index use can be
read.

    ./dev run python bench/count.py [--rows 100000] [--rounds 20] [--keep]

Writes ``bench/results/count.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.admin import LOAD  # noqa: E402
from bench.common import (  # noqa: E402
    bench_db_name,
    drop_database,
    git_head,
    recreate_database,
    server_url,
    setup_django,
    with_database,
)

BENCH_DB = bench_db_name("bench_uj_count")
RESULTS = ROOT / "bench" / "results" / "count.json"

# What a health check or a script asks: name -> operator.count() arguments.
COUNTS: dict[str, dict[str, Any]] = {
    "dead, all queues": {"states": "dead"},
    "dead in q1": {"queue": "q1", "states": "dead"},
    "ready in q1": {"queue": "q1", "states": "ready"},
    "live in q1 (queue drained?)": {
        "queue": "q1",
        "states": ["ready", "delayed", "running", "suspended"],
    },
    "everything": {},
}


def median_ms(call: Any, rounds: int) -> float:
    call()  # warm-up: connection, catalog caches
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 3)


def count_plan(arguments: dict[str, Any]) -> str:
    """The plan of the count statement for these arguments."""
    from django.db import connection

    from django_ultimate_jobs.drivers.postgres.params import (
        filter_params as _filter_params,
    )
    from django_ultimate_jobs.drivers.postgres.sql import query
    from django_ultimate_jobs.operator import job_filter

    states = arguments.get("states")
    where = job_filter(state=states, queue=arguments.get("queue"))
    connection.ensure_connection()
    rows = connection.connection.execute(
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + query("job_count"),
        _filter_params(where),
    ).fetchall()
    return "\n".join(row[0] for row in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    args = parser.parse_args()
    url = server_url(BENCH_DB)
    recreate_database(url, BENCH_DB)
    try:
        setup_django(with_database(url, BENCH_DB))
        from django.db import connection

        from django_ultimate_jobs import operator

        with connection.cursor() as cursor:
            cursor.execute(LOAD, {"rows": args.rows})
        connection.connection.autocommit = True
        connection.connection.execute("VACUUM (ANALYZE) ultimate_jobs_job")
        timings = {"stats()": median_ms(operator.stats, args.rounds)}
        plans = {}
        for name, arguments in COUNTS.items():
            timings[f"count({name})"] = median_ms(
                lambda a=arguments: operator.count(**a), args.rounds
            )
            plans[name] = count_plan(arguments)
        print(f"{args.rows:,} job rows, median of {args.rounds} calls:")
        for name, ms in timings.items():
            print(f"  {name:<40} {ms:8.3f} ms")
        for name, plan in plans.items():
            print(f"\n-- count({name})\n{plan}")
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            json.dumps(
                {
                    "commit": git_head(),
                    "at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "host": platform.node(),
                    "rows": args.rows,
                    "rounds": args.rounds,
                    "median_ms": timings,
                },
                indent=2,
            )
            + "\n"
        )
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            drop_database(url, BENCH_DB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
