"""Bench: the admin's jobs list at 1,000,000 job rows.

Loads a million rows into its own database (``INSERT ... SELECT
generate_series``: about 90% done, the rest ready, delayed, running, dead,
failed and cancelled over 20 job names and 4 queues, ids UUIDv7-shaped in
creation order), then times pages rendered by Django's test ``Client``
logged in as a superuser: the unfiltered list, filtered lists and searches,
the dead-letter and queues pages, and ``operator.list_jobs``. Each page must
render in under 1 s. Prints each page's job-table statements with their
``EXPLAIN (ANALYZE, BUFFERS)`` plans, so index use can be read.

    ./dev run python bench/admin.py [--rows 1000000] [--rounds 5] [--keep]

Writes ``bench/results/admin.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    bench_db_name,
    drop_database,
    git_head,
    recreate_database,
    server_url,
    setup_django,
    with_database,
)

BENCH_DB = bench_db_name("bench_uj_admin")
RESULTS = ROOT / "bench" / "results" / "admin.json"
BUDGET_S = 1.0

# One statement: the state mix is decided by i % 100, the id embeds the
# creation millisecond (UUIDv7 layout), so id order is creation order.
LOAD = """
INSERT INTO ultimate_jobs_job
    (id, name, queue, input, idempotency_key, run_id, attempt, max_attempts,
     priority, state, run_at, created_at, updated_at, last_error, claimed_by,
     visible_at, claims)
SELECT g.id, 'bench.job' || (g.i %% 20), 'q' || (g.i %% 4),
       jsonb_build_object('order', g.i, 'password', 'p'),
       CASE WHEN g.i %% 10 = 0 THEN 'key-' || g.i END, g.id,
       CASE WHEN g.state IN ('done', 'dead', 'failed', 'running') THEN 1 ELSE 0 END,
       3, 0, g.state,
       CASE WHEN g.state = 'delayed' THEN g.created_at + interval '1 day'
            ELSE g.created_at END,
       g.created_at, g.created_at,
       CASE WHEN g.state IN ('dead', 'failed')
            THEN 'X_BOOM' || (g.i %% 3) || ': failed order ' || g.i END,
       CASE WHEN g.state = 'running' THEN 'bench-worker' END,
       CASE WHEN g.state = 'running' THEN now() + interval '1 hour' END,
       CASE WHEN g.state = 'running' THEN 1 ELSE 0 END
  FROM (
    SELECT s.i, s.created_at,
           (lpad(to_hex((extract(epoch FROM s.created_at) * 1000)::bigint), 12, '0')
            || '7' || substr(md5(s.i::text), 1, 3) || '8'
            || substr(md5(s.i::text), 4, 15))::uuid AS id,
           CASE WHEN s.i %% 100 < 90 THEN 'done'
                WHEN s.i %% 100 < 94 THEN 'ready'
                WHEN s.i %% 100 < 96 THEN 'delayed'
                WHEN s.i %% 100 = 96 THEN 'running'
                WHEN s.i %% 100 = 97 THEN 'dead'
                WHEN s.i %% 100 = 98 THEN 'failed'
                ELSE 'cancelled' END AS state
      FROM (SELECT i, now() - (%(rows)s - i) * interval '100 milliseconds' AS created_at
              FROM generate_series(1, %(rows)s) AS i) s
  ) g
"""

PAGES = {
    "jobs list": "/admin/ultimate_jobs/job/",
    "jobs list, page 20": "/admin/ultimate_jobs/job/?p=20",
    "filtered: state=dead": "/admin/ultimate_jobs/job/?state=dead",
    "filtered: queue=q1&state=ready": "/admin/ultimate_jobs/job/?queue=q1&state=ready",
    "filtered: name=bench.job7": "/admin/ultimate_jobs/job/?name=bench.job7",
    "search: id prefix": "/admin/ultimate_jobs/job/?q={prefix}",
    "search: idempotency key": "/admin/ultimate_jobs/job/?q=key-500000",
    "dead letters": "/admin/ultimate_jobs/job/dead-letter/",
    "queues": "/admin/ultimate_jobs/job/queues/",
    "job page": "/admin/ultimate_jobs/job/{job_id}/change/",
}


def load(rows: int) -> float:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(LOAD, {"rows": rows})
        cursor.execute("ANALYZE ultimate_jobs_job")
    return time.perf_counter() - started


def measure(client, path: str, rounds: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, (path, response.status_code)
    with CaptureQueriesContext(connection) as captured:
        client.get(path)
    statements = [
        q["sql"]
        for q in captured.captured_queries
        if "ultimate_jobs_job" in q["sql"] and not q["sql"].startswith("EXPLAIN")
    ]
    return {
        "path": path,
        "median_s": statistics.median(times),
        "max_s": max(times),
        "statements": statements,
    }


def explain(statement: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement)
        return "\n".join(row[0] for row in cursor.fetchall())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    parser.add_argument("--plans", action="store_true", help="print every plan")
    args = parser.parse_args()
    url = server_url(BENCH_DB)
    bench_url = with_database(url, BENCH_DB)
    recreate_database(url, BENCH_DB)
    try:
        setup_django(bench_url)
        from django.contrib.auth.models import User
        from django.test import Client

        from django_ultimate_jobs import operator
        from django_ultimate_jobs.models import Job

        load_s = load(args.rows)
        print(f"loaded {args.rows:,} job rows in {load_s:.1f} s")
        user = User.objects.create_superuser("bench", "bench@example.com", "pw")
        client = Client()
        client.force_login(user)
        sample = (
            Job.objects.filter(state="dead")
            .order_by("-id")
            .values_list("id", flat=True)[0]
        )
        results = {}
        for label, path in PAGES.items():
            path = path.format(prefix=str(sample)[:8], job_id=sample)
            result = measure(client, path, args.rounds)
            verdict = "ok" if result["max_s"] < BUDGET_S else "OVER BUDGET"
            print(
                f"{label:<34} median {result['median_s'] * 1000:7.1f} ms  "
                f"max {result['max_s'] * 1000:7.1f} ms  {verdict}"
            )
            results[label] = result
        started = time.perf_counter()
        page = operator.list_jobs(state="dead", limit=200)
        operator.list_jobs(state="dead", limit=200, after=page["next"])
        list_s = (time.perf_counter() - started) / 2
        print(f"{'operator.list_jobs(dead, 200)':<34} mean   {list_s * 1000:7.1f} ms")
        for label in (
            "jobs list",
            "filtered: state=dead",
            "filtered: name=bench.job7",
            "search: id prefix",
            "search: idempotency key",
        ):
            print(f"\n== {label}: job-table statements and plans ==")
            for statement in results[label]["statements"]:
                print(statement[:300] + (" ..." if len(statement) > 300 else ""))
                print(explain(statement))
        over = [k for k, r in results.items() if r["max_s"] >= BUDGET_S]
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(
            json.dumps(
                {
                    "rows": args.rows,
                    "load_s": load_s,
                    "pages": {
                        k: {
                            "path": r["path"],
                            "median_s": r["median_s"],
                            "max_s": r["max_s"],
                        }
                        for k, r in results.items()
                    },
                    "operator_list_jobs_s": list_s,
                    "budget_s": BUDGET_S,
                    "over_budget": over,
                    "commit": git_head(),
                    "python": platform.python_version(),
                    "load_average": os.getloadavg(),
                    "at": datetime.now(UTC).isoformat(),
                },
                indent=2,
            )
            + "\n"
        )
        return 1 if over else 0
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            drop_database(url, BENCH_DB)


if __name__ == "__main__":
    sys.exit(main())
