"""The retention sweep over 1,000,000 finished rows, with live rows beside them.

Loads, in its own database, 800,000 done rows (two days old) and 200,000
failed / dead / cancelled rows (twenty days old), one step per five of
them, plus 100,000 ready rows (a live queue), 50,000 delayed rows and
50,000 done rows still inside their window. Then:

1. prints the EXPLAIN (ANALYZE, in a rolled-back transaction) of one batch
   statement of each kind, and fails unless the finished rows are read
   through their partial index and no table is read by a sequential scan;
2. sweeps with ``sweep_target`` batch by batch while a second thread
   claims live rows in a loop, and reports rows/s, the number of batches,
   the longest batch transaction, the longest claim during the sweep and
   how many claims waited more than 20 ms for a lock (lock_timeout);
3. checks that exactly the expired rows (and their steps) are gone.

    ./dev run python bench/retention.py     # BENCH_RETENTION_ROWS=1000000

Writes bench/results/retention.json.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    bench_db_name,
    drop_database,
    git_head,
    recreate_database,
    server_url,
    setup_django,
)

DB_NAME = bench_db_name("bench_uj_retention")
FINISHED = int(os.environ.get("BENCH_RETENTION_ROWS", "1000000"))
BATCH = int(os.environ.get("BENCH_RETENTION_BATCH", "5000"))
LIVE_QUEUE = "bench-live"

_LOAD = """
INSERT INTO ultimate_jobs_job
       (id, name, queue, input, run_id, state, run_at, created_at, updated_at)
SELECT u, 'bench.noop', %(queue)s, '{}'::jsonb, u, %(state)s,
       now() - %(age)s::interval, now() - %(age)s::interval,
       now() - %(age)s::interval
  FROM (SELECT gen_random_uuid() AS u FROM generate_series(1, %(rows)s)) g
"""
_LOAD_STEPS = """
INSERT INTO ultimate_jobs_step (run_id, name, status, started_at, attempts)
SELECT run_id, 'charge', 'completed', updated_at, 1
  FROM ultimate_jobs_job
 WHERE state IN ('done', 'failed', 'dead', 'cancelled') AND random() < 0.2
"""


def main() -> None:
    base_url = server_url(DB_NAME)
    import psycopg

    bench_url = recreate_database(base_url, DB_NAME)
    try:
        setup_django(bench_url)
        url = os.environ["DATABASE_URL"]
        with psycopg.connect(url, autocommit=True) as conn:
            started = time.perf_counter()
            load(conn)
            loaded_s = time.perf_counter() - started
            counts_before = state_counts(conn)
            plans = {name: explain(conn, name) for name in ("done", "failed")}
        for name, plan in plans.items():
            print(f"-- EXPLAIN job_retention_{name}\n{plan}\n")
            assert f"uj_job_{'done' if name == 'done' else 'finished'}_idx" in plan, (
                plan
            )
            assert "Seq Scan" not in plan, plan

        alone = claims_alone(100)
        sweep, claims = sweep_while_claiming()

        with psycopg.connect(url, autocommit=True) as conn:
            counts_after = state_counts(conn)
            (steps_left,) = conn.execute(
                "SELECT count(*) FROM ultimate_jobs_step"
            ).fetchone()
        assert counts_after == {
            "ready": counts_before["ready"] - claims["claimed"] - alone["claimed"],
            "running": claims["claimed"] + alone["claimed"],
            "delayed": counts_before["delayed"],
            "done": 50_000,
        }, counts_after
        assert steps_left == 0, steps_left

        summary = {
            "commit": git_head(),
            "finished_rows": FINISHED,
            "batch": BATCH,
            "load_s": round(loaded_s, 1),
            "rows_before": counts_before,
            "rows_after": counts_after,
            **sweep,
            "claims_without_sweep": alone,
            "claims_during_sweep": claims,
            "explain": plans,
        }
        print(
            json.dumps({k: v for k, v in summary.items() if k != "explain"}, indent=2)
        )
        out = ROOT / "bench" / "results" / "retention.json"
        out.write_text(json.dumps(summary, indent=2) + "\n")
    finally:  # also on Ctrl-C or SIGTERM
        from django.db import connections

        connections.close_all()
        if "--keep" not in sys.argv:
            drop_database(base_url, DB_NAME)


def load(conn) -> None:
    """The finished rows past their windows, the live rows, the young done rows."""
    done = FINISHED * 4 // 5
    ended = (FINISHED - done) // 3
    batches = [
        ("default", "done", "2 days", done),
        ("default", "failed", "20 days", ended),
        ("default", "dead", "20 days", ended),
        ("default", "cancelled", "20 days", FINISHED - done - 2 * ended),
        (LIVE_QUEUE, "ready", "1 minute", 100_000),
        ("default", "delayed", "0 seconds", 50_000),
    ]
    for queue, state, age, rows in batches:
        conn.execute(_LOAD, {"queue": queue, "state": state, "age": age, "rows": rows})
    conn.execute(_LOAD_STEPS)
    # Done rows inside their window: kept (and no steps, so the step check
    # above is exact).
    conn.execute(
        _LOAD, {"queue": "default", "state": "done", "age": "1 hour", "rows": 50_000}
    )
    conn.execute("ANALYZE ultimate_jobs_job")
    conn.execute("ANALYZE ultimate_jobs_step")


def explain(conn, target: str) -> str:
    """EXPLAIN ANALYZE of one batch, rolled back (the rows stay for the sweep)."""
    import psycopg

    from django_ultimate_jobs.drivers.postgres.sql import query

    statement = query(f"job_retention_{target}", "maintenance.sql")
    before = datetime.now(UTC) - timedelta(days=1 if target == "done" else 14)
    with conn.transaction(force_rollback=True):
        # A client-side cursor inlines the values, as EXPLAIN cannot take
        # bind parameters.
        cursor = psycopg.ClientCursor(conn)
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement,
            {"before": before, "batch": BATCH},
        )
        return "\n".join(row[0] for row in cursor.fetchall())


def _claim_options():
    from django_ultimate_jobs.drivers.base import ClaimOptions

    return ClaimOptions(
        queues=[LIVE_QUEUE], limit=10, worker_id="bench", visibility_ms=600_000
    )


def _latencies(claim_ms: list[float], claimed: int) -> dict:
    return {
        "claims": len(claim_ms),
        "claimed": claimed,
        "claim_ms_median": round(statistics.median(claim_ms), 2),
        "claim_ms_max": round(max(claim_ms), 1),
    }


def claims_alone(count: int) -> dict:
    """The claim's latency with no sweep running: the baseline."""
    from django_ultimate_jobs.drivers import get_driver

    driver, options = get_driver(), _claim_options()
    claim_ms: list[float] = []
    claimed = 0
    for _ in range(count):
        started = time.perf_counter()
        claimed += len(driver.claim(options).claimed)
        claim_ms.append((time.perf_counter() - started) * 1000)
    return _latencies(claim_ms, claimed)


def sweep_while_claiming() -> tuple[dict, dict]:
    """Sweep batch by batch while another thread claims live rows."""
    from django.db import connections

    from django_ultimate_jobs.drivers import get_driver
    from django_ultimate_jobs.drivers.postgres.maintenance import delete_in_batches
    from django_ultimate_jobs.maintenance.instant import maintenance_now

    driver = get_driver()
    stop = threading.Event()
    claim_ms: list[float] = []
    claimed = 0

    lock_waits = 0

    def claim_loop() -> None:
        nonlocal claimed, lock_waits
        from django.db import OperationalError, connection

        options = _claim_options()
        # A claim that waits more than 20 ms for any lock (a table lock, a
        # row lock the sweep holds) fails instead: counted, then retried.
        # Slower claims without a lock error are CPU or I/O, not locks.
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '20ms'")
        try:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    claimed += len(driver.claim(options).claimed)
                except OperationalError:
                    lock_waits += 1
                    continue
                claim_ms.append((time.perf_counter() - started) * 1000)
        finally:
            connections.close_all()

    claimer = threading.Thread(target=claim_loop)
    claimer.start()
    now = maintenance_now()
    batch_ms: list[float] = []
    deleted = steps = 0
    started = time.perf_counter()
    for target, window in (("done", timedelta(days=1)), ("failed", timedelta(days=14))):
        batches = delete_in_batches(
            "default", f"job_retention_{target}", {"before": now - window}, BATCH
        )
        while True:
            began = time.perf_counter()
            try:
                rows, dependent = next(batches)
            except StopIteration:
                break
            batch_ms.append((time.perf_counter() - began) * 1000)
            deleted, steps = deleted + rows, steps + dependent
    elapsed = time.perf_counter() - started
    stop.set()
    claimer.join()
    sweep = {
        "deleted_jobs": deleted,
        "deleted_steps": steps,
        "sweep_s": round(elapsed, 2),
        "rows_per_s": round(deleted / elapsed),
        "batches": len(batch_ms),
        "batch_ms_median": round(statistics.median(batch_ms), 1),
        "batch_ms_max": round(max(batch_ms), 1),
    }
    return sweep, {**_latencies(claim_ms, claimed), "lock_waits_over_20ms": lock_waits}


def state_counts(conn) -> dict[str, int]:
    rows = conn.execute(
        "SELECT state, count(*) FROM ultimate_jobs_job GROUP BY state ORDER BY state"
    ).fetchall()
    return dict(rows)


if __name__ == "__main__":
    main()
