"""The claim statement's cost as finished rows pile up in the job table.

Run from the repository root (see bench/README.md)::

    ./dev run python bench/claim_scale.py                       # 0, 1 M, 10 M rows
    ./dev run python bench/claim_scale.py --sizes 0,1000000,3000000 --keep

In its own database (``bench_uj_claim_scale``, dropped at the end unless
``--keep``) it measures the worker's claim at each size of the finished
backlog, growing it between steps with ONE ``INSERT ... SELECT
generate_series`` (timed: the load time is part of the result). The
finished rows are what retention would delete once past their window (90%
done, the rest failed, dead and cancelled, over the claimed queue and three
others), so the sizes are the table a worker sees with retention late or
off. At each size:

1. ``VACUUM (ANALYZE)`` of the job table (what autovacuum does after a
   bulk load; timed);
2. 3,000 ready rows enqueued with ``enqueue_many``;
3. ``--claims`` claims of 10 rows through ``PostgresDriver.claim``, each
   batch settled with ``ack_many`` (the rows go ready -> running -> done,
   as in a worker), in one thread with the worker's generic plans;
   latency per claim, median / p95 / max;
4. ``EXPLAIN (ANALYZE, BUFFERS)`` of one claim (rolled back): execution
   time and the buffers it touched. Flat buffers = the claim does not read
   the finished rows (it reads the ready, timer and lease partial indexes,
   which hold no finished row).

Writes ``bench/results/claim_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.common import (  # noqa: E402
    bench_db_name,
    drop_database,
    git_head,
    recreate_database,
    server_url,
    setup_django,
    with_database,
)

BENCH_DB = bench_db_name("bench_uj_claim_scale")
RESULTS = ROOT / "bench" / "results" / "claim_scale.json"
READY = 3000
CLAIM_LIMIT = 10

# One statement per step. Ids are UUIDv7-shaped in creation order (as the
# app makes them), rows two days old (past the default done window).
LOAD = """
INSERT INTO ultimate_jobs_job
       (id, name, queue, input, run_id, attempt, max_attempts, priority, state,
        run_at, created_at, updated_at, claims, started_claim, history)
SELECT g.id, 'bench.noop', g.queue, '{}'::jsonb, g.id, 1, 3, 0, g.state,
       g.at, g.at, g.at, 1, 1,
       jsonb_build_array(jsonb_build_object('attempt', 1, 'worker', 'w', 'at', g.at))
  FROM (
    SELECT (lpad(to_hex((extract(epoch FROM s.at) * 1000)::bigint), 12, '0')
            || '7' || substr(md5(s.i::text), 1, 3) || '8'
            || substr(md5(s.i::text), 4, 15))::uuid AS id,
           s.at,
           CASE WHEN s.i %% 4 = 0 THEN 'default' ELSE 'other' || (s.i %% 4) END AS queue,
           CASE WHEN s.i %% 10 < 9 THEN 'done'
                WHEN s.i %% 30 = 9 THEN 'failed'
                WHEN s.i %% 30 = 19 THEN 'dead'
                ELSE 'cancelled' END AS state
      FROM (SELECT i, now() - interval '3 days'
                      + i * (interval '1 day' / %(total)s::bigint) AS at
              FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i) s
  ) g
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,1000000,10000000")
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    base_url = server_url(BENCH_DB)
    bench_url = with_database(base_url, BENCH_DB)
    commit = git_head()
    recreate_database(base_url, BENCH_DB)
    try:
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.bench_settings"  # bench.noop
        setup_django(bench_url)
        steps = []
        loaded = 0
        with psycopg.connect(bench_url, autocommit=True) as conn:
            for size in sizes:
                load_s = 0.0
                if size > loaded:
                    started = time.perf_counter()
                    conn.execute(
                        LOAD,
                        {"first": loaded + 1, "last": size, "total": sizes[-1] or 1},
                    )
                    load_s = time.perf_counter() - started
                    print(
                        f"loaded {size - loaded:,} rows in {load_s:.1f} s", flush=True
                    )
                    loaded = size
                started = time.perf_counter()
                conn.execute("VACUUM (ANALYZE) ultimate_jobs_job")
                vacuum_s = time.perf_counter() - started
                step = {
                    "finished_rows": size,
                    "load_s": round(load_s, 1),
                    "vacuum_s": round(vacuum_s, 1),
                    "table_mib": conn.execute(
                        "SELECT pg_total_relation_size('ultimate_jobs_job') / 1048576"
                    ).fetchone()[0],
                    **measure_claims(args.claims),
                    **explain_claim(conn),
                }
                steps.append(step)
                print(json.dumps(step), flush=True)
                # The measured rows go away: the next step starts from the
                # finished backlog alone (as retention would leave it).
                conn.execute(
                    "DELETE FROM ultimate_jobs_job WHERE run_at > now() - interval '1 hour'"
                )
        print_table(steps)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            json.dumps(
                {
                    "bench": "claim_scale",
                    "at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "commit": commit,
                    "cpus": os.cpu_count(),
                    "claims": args.claims,
                    "claim_limit": CLAIM_LIMIT,
                    "steps": steps,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    finally:  # also on Ctrl-C or SIGTERM
        from django.db import connections

        connections.close_all()
        if not args.keep:
            drop_database(base_url, BENCH_DB)


def _options():
    from django_ultimate_jobs.drivers.base import ClaimOptions

    return ClaimOptions(
        queues=["default"],
        limit=CLAIM_LIMIT,
        worker_id="bench",
        visibility_ms=60_000,
        start_now=CLAIM_LIMIT,
    )


def measure_claims(count: int) -> dict:
    """``count`` claims of 10 rows, each batch acked, as a worker does."""
    from django_ultimate_jobs.drivers import get_driver
    from django_ultimate_jobs.drivers.base import AckRequest
    from django_ultimate_jobs.registry import get_job

    get_job("bench.noop").enqueue_many([{}] * READY)
    driver = get_driver()
    driver.use_generic_plans_in_this_thread()
    options = _options()
    claim_ms: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        claimed = driver.claim(options).claimed
        claim_ms.append((time.perf_counter() - started) * 1000)
        driver.ack_many(
            [
                AckRequest(job_id=job.id, identity=job.identity, duration_ms=0)
                for job in claimed
            ]
        )
    cuts = statistics.quantiles(claim_ms, n=20, method="inclusive")
    return {
        "claim_ms_median": round(statistics.median(claim_ms), 2),
        "claim_ms_p95": round(cuts[18], 2),
        "claim_ms_max": round(max(claim_ms), 2),
    }


def explain_claim(conn: psycopg.Connection) -> dict:
    """One claim under EXPLAIN (ANALYZE, BUFFERS), rolled back."""
    from django_ultimate_jobs.drivers.base import (
        LEASE_LAPSED_RECLAIMED,
        LEASE_LAPSED_UNSTARTED,
    )
    from django_ultimate_jobs.drivers.postgres.sql import query

    params = {
        "now": None,
        "queues": ["default"],
        "limit": CLAIM_LIMIT,
        "worker": "bench",
        "visibility_ms": 60_000,
        "relapsed_error": LEASE_LAPSED_RECLAIMED,
        "unstarted_error": LEASE_LAPSED_UNSTARTED,
        "ttl": None,
        "start_now": CLAIM_LIMIT,
        "retake": CLAIM_LIMIT,
        # The tenant filter (claim_tenant_open): no tenant skipped, as in
        # the claims measured above.
        "skip": [],
        "untenanted": True,
    }
    with conn.transaction(force_rollback=True):
        cursor = psycopg.ClientCursor(conn)
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query("job_claim"), params
        )
        plan = cursor.fetchone()[0][0]
    top = plan["Plan"]
    return {
        "explain_ms": round(plan["Execution Time"] + plan["Planning Time"], 2),
        "explain_buffers": _buffers(top),
        # Every scan of the job table and the buffers it touched: the
        # partial indexes of live rows only, never a finished row's page.
        "explain_scans": sorted(
            f"{node['Node Type']} {node.get('Index Name', '')}: {_buffers(node)}"
            for node in _nodes(top)
            if node.get("Relation Name") == "ultimate_jobs_job"
        ),
    }


def _buffers(node: dict) -> int:
    return node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)


def _nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def print_table(steps: list[dict]) -> None:
    print()
    head = (
        f"{'finished rows':>14} {'load s':>7} {'vacuum s':>9} {'table MiB':>10} "
        f"{'claim ms p50':>13} {'p95':>7} {'max':>7} {'EXPLAIN ms':>11} {'buffers':>8}"
    )
    print(head)
    print("-" * len(head))
    for s in steps:
        print(
            f"{s['finished_rows']:>14,} {s['load_s']:>7} {s['vacuum_s']:>9} "
            f"{s['table_mib']:>10} {s['claim_ms_median']:>13} {s['claim_ms_p95']:>7} "
            f"{s['claim_ms_max']:>7} {s['explain_ms']:>11} {s['explain_buffers']:>8}"
        )


if __name__ == "__main__":
    main()
