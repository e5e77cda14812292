"""The claim behind one tenant's flood: EXPLAIN ANALYZE and timings.

Run from the repository root (see bench/README.md)::

    ./dev run python bench/fairness.py

It (re)creates the database ``bench_uj_fairness`` (dropped at the end;
``--keep`` keeps it), enqueues ``BENCH_FAIR_FLOOD`` (20,000) ready jobs of
tenant ``a`` and then 20 of tenant ``b`` on one queue, and runs the worker's
claim statement (``job_claim``, prepared and planned generically, as the
claim loop runs it) in transactions that are rolled back, so every
measurement sees the same table:

1. nothing skipped (a worker without limits, or no tenant full): the claim
   takes the head of the queue, all ``a``;
2. tenant ``a`` skipped (full in this process): the scan reads past every
   ``a`` row to reach ``b``'s.

Prints the plan of each and the median of ``BENCH_FAIR_REPEAT`` (50) timed
claims (client wall time of EXECUTE). Writes ``bench/results/fairness.json``.

``BENCH_FAIR_BEFORE=<path of another checkout's queries.sql>`` also times
that checkout's ``job_claim`` beside this one with nothing skipped,
interleaved on the same table in the same run: what the tenant filter costs
a claim that skips nothing (a worker without limits). ``BENCH_FAIR_LIMIT``
(8) is the claim's limit (the worker claims up to 64 ahead of short jobs).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    ROOT,
    bench_db_name,
    drop_database,
    git_head,
    hold_bench_lock,
    recreate_database,
    server_url,
    setup_django,
    with_database,
)

BENCH_DB = bench_db_name("bench_uj_fairness")
RESULTS = ROOT / "bench" / "results" / "fairness.json"
FLOOD = int(os.environ.get("BENCH_FAIR_FLOOD", "20000"))
LATE = 20
REPEAT = int(os.environ.get("BENCH_FAIR_REPEAT", "50"))
LIMIT = int(os.environ.get("BENCH_FAIR_LIMIT", "8"))
PARAM = re.compile(r"%\((\w+)\)s")


def enqueue(bench_url: str) -> None:
    from django_ultimate_jobs.drivers import get_driver
    from django_ultimate_jobs.drivers.base import EnqueueRequest

    driver = get_driver()
    for tenant, count in (("a", FLOOD), ("b", LATE)):
        for start in range(0, count, 2000):
            driver.enqueue_many(
                [
                    EnqueueRequest(name="bench.fair", input={}, tenant_id=tenant)
                    for _ in range(min(2000, count - start))
                ]
            )


def prepared(
    conn: psycopg.Connection, text: str | None = None, name: str = "claim"
) -> list[str]:
    """PREPARE job_claim with $n parameters; answer their names in order."""
    from django_ultimate_jobs.drivers.postgres.sql import query

    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = PARAM.sub(number, text or query("job_claim"))
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute(f"PREPARE {name} AS {text}")
    return names


def claim_before(path: str) -> str:
    """The job_claim statement of another checkout's queries.sql, collapsed
    as the loader collapses it (fragments are not expanded: main's has none)."""
    body = Path(path).read_text().split("-- name: job_claim", 1)[1]
    body = re.split(r"^-- (?:name|fragment): ", body, flags=re.MULTILINE)[0]
    lines = [ln for ln in body.splitlines()[1:] if not ln.lstrip().startswith("--")]
    return re.sub(r"\s+", " ", "\n".join(lines)).strip().rstrip(";")


def compare(conn: psycopg.Connection, path: str) -> dict:
    """This checkout's claim beside another's, nothing skipped, interleaved."""
    ours_names = prepared(conn)
    before_names = prepared(conn, claim_before(path), "claim_before")
    ours = execute_sql(ours_names, params([]), conn)
    before = execute_sql(before_names, params([]), conn).replace(
        "EXECUTE claim(", "EXECUTE claim_before("
    )
    timings: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(REPEAT * 4):
        for label, statement in (("before", before), ("after", ours)):
            with conn.transaction(force_rollback=True):
                started = time.perf_counter()
                conn.execute(statement).fetchall()
                timings[label].append((time.perf_counter() - started) * 1000)
    return {
        label: round(statistics.median(values), 3) for label, values in timings.items()
    }


def params(skip: list[str]) -> dict[str, object]:
    return {
        "now": None,
        "queues": ["default"],
        "limit": LIMIT,
        "worker": "bench",
        "visibility_ms": 30_000,
        "relapsed_error": "x",
        "unstarted_error": "y",
        "ttl": None,
        "start_now": LIMIT,
        "retake": 1,
        "skip": skip,
        "untenanted": True,
    }


def execute_sql(names: list[str], values: dict[str, object], conn) -> str:
    literals = []
    for name in names:
        value = values[name]
        literals.append(
            sql.Literal(value).as_string(conn) if value is not None else "NULL"
        )
    return f"EXECUTE claim({', '.join(literals)})"


def measure(conn: psycopg.Connection, names: list[str], skip: list[str]) -> dict:
    statement = execute_sql(names, params(skip), conn)
    plan = []
    with conn.transaction(force_rollback=True):
        rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {statement}").fetchall()
        plan = [row[0] for row in rows]
    timings = []
    tenants: set[str] = set()
    for _ in range(REPEAT):
        with conn.transaction(force_rollback=True):
            started = time.perf_counter()
            claimed = conn.execute(statement).fetchall()
            timings.append((time.perf_counter() - started) * 1000)
            tenants |= {row[10] for row in claimed}
    return {
        "skip": skip,
        "claimed_tenants": sorted(tenants),
        "median_ms": round(statistics.median(timings), 3),
        "p90_ms": round(sorted(timings)[int(len(timings) * 0.9)], 3),
        "plan": plan,
    }


def main() -> None:
    base_url = server_url(BENCH_DB)
    bench_url = with_database(base_url, BENCH_DB)
    lock = hold_bench_lock(base_url, BENCH_DB)  # noqa: F841 (held until exit)
    commit = git_head()
    recreate_database(base_url, BENCH_DB)
    try:
        setup_django(bench_url)
        enqueue(bench_url)
        with psycopg.connect(bench_url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE ultimate_jobs_job")
            before = os.environ.get("BENCH_FAIR_BEFORE")
            nothing_skipped = compare(conn, before) if before else None
            conn.execute("DEALLOCATE ALL")
            names = prepared(conn)
            results = [measure(conn, names, []), measure(conn, names, ["a"])]
    finally:
        if "--keep" not in sys.argv:
            drop_database(base_url, BENCH_DB)
    for result in results:
        print(
            f"\n== skip={result['skip']}: claimed tenants {result['claimed_tenants']}, "
            f"median {result['median_ms']} ms, p90 {result['p90_ms']} ms"
        )
        print("\n".join(result["plan"]))
    if nothing_skipped:
        print(f"\n== nothing skipped, median ms: {nothing_skipped}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "bench": "fairness",
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "commit": commit,
                "flood": FLOOD,
                "late": LATE,
                "limit": LIMIT,
                "repeat": REPEAT,
                "results": results,
                "nothing_skipped_before_after_ms": nothing_skipped,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
