"""Enqueue throughput, each workload beside a raw-psycopg baseline.

Run from the repository root (see bench/README.md)::

    ./dev run python bench/enqueue.py
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python bench/enqueue.py

It (re)creates the database ``ultimate_jobs_bench`` on the server of
``DATABASE_URL``, migrates it with the test settings, then measures in one run:

(a) ``enqueue()`` one job at a time in autocommit (N = 3,000);
(b) ``enqueue()`` N times inside one ``transaction.atomic()``;
(c) ``enqueue_many()`` of 10,000 rows.

The baseline inserts the same columns of the same table with plain
psycopg: a parameterised INSERT with server-side binding on an autocommit
connection (psycopg prepares it after its fifth use). For (c) it tries two
raw ways, one ``INSERT ... SELECT FROM unnest(...)`` and ``executemany``
(pipelined), and compares with the faster. Rounds are interleaved (raw,
ours, raw, ours...), the job table is truncated before every measured run,
and the median rate of each side is reported with the ratio ours/raw, as a
table on stdout and as JSON in ``bench/results/enqueue.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    drop_database,
    recreate_database,
    with_database,
)

BENCH_DB = "ultimate_jobs_bench"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
RESULTS = ROOT / "bench" / "results" / "enqueue.json"
JOB_NAME = "bench.enqueue"
WARMUP_ROWS = 300

COLUMNS = (
    "id, name, queue, input, idempotency_key, run_id, max_attempts, priority, "
    "state, run_at, created_at, updated_at"
)
RAW_INSERT = (
    f"INSERT INTO ultimate_jobs_job ({COLUMNS}) "
    "VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, now(), now(), now())"
)
RAW_INSERT_UNNEST = (
    f"INSERT INTO ultimate_jobs_job ({COLUMNS}) "
    "SELECT t.id, t.name, t.queue, t.input, t.key, t.id, t.max_attempts, "
    "t.priority, t.state, now(), now(), now() "
    "FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::jsonb[], %s::text[], "
    "%s::int[], %s::int[], %s::text[]) "
    "AS t(id, name, queue, input, key, max_attempts, priority, state)"
)

# Targets from the brief (ours/raw); (b) has none.
TARGETS = {"single_autocommit": 0.5, "atomic": None, "enqueue_many": 0.25}
LABELS = {
    "single_autocommit": "(a) enqueue() x N, autocommit",
    "atomic": "(b) enqueue() x N, one atomic()",
    "enqueue_many": "(c) enqueue_many()",
}


def setup_django(bench_url: str) -> None:
    """Configure Django with the test settings on the bench database; migrate."""
    os.environ["DATABASE_URL"] = bench_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


# -- the two sides ---------------------------------------------------------------


class Raw:
    """The baseline: plain psycopg on its own autocommit connection."""

    def __init__(self, url: str) -> None:
        import psycopg

        from django_ultimate_jobs.ids import uuid7

        self.uuid7 = uuid7
        self.conn = psycopg.connect(url, autocommit=True)
        self.cursor = self.conn.cursor()  # server-side binding (psycopg default)

    def _params(self, n: int) -> tuple[object, ...]:
        job_id = self.uuid7()
        return (
            job_id,
            JOB_NAME,
            "default",
            json.dumps({"n": n}, separators=(",", ":")),
            None,
            job_id,
            3,
            0,
            "ready",
        )

    def single(self, count: int) -> None:
        for n in range(count):
            self.cursor.execute(RAW_INSERT, self._params(n))

    def atomic(self, count: int) -> None:
        with self.conn.transaction():
            for n in range(count):
                self.cursor.execute(RAW_INSERT, self._params(n))

    def many_unnest(self, count: int) -> None:
        rows = [self._params(n) for n in range(count)]
        ids = [row[0] for row in rows]
        self.cursor.execute(
            RAW_INSERT_UNNEST,
            (
                ids,
                [JOB_NAME] * count,
                ["default"] * count,
                [row[3] for row in rows],
                [None] * count,
                [3] * count,
                [0] * count,
                ["ready"] * count,
            ),
        )

    def many_executemany(self, count: int) -> None:
        self.cursor.executemany(RAW_INSERT, [self._params(n) for n in range(count)])

    def truncate(self) -> None:
        self.cursor.execute("TRUNCATE ultimate_jobs_job")

    def count(self) -> int:
        self.cursor.execute("SELECT count(*) FROM ultimate_jobs_job")
        row = self.cursor.fetchone()
        assert row is not None
        return int(row[0])

    def server_version(self) -> str:
        self.cursor.execute("SHOW server_version")
        row = self.cursor.fetchone()
        assert row is not None
        return str(row[0])

    def close(self) -> None:
        self.conn.close()


class Ours:
    """``@job`` handles through the installed Postgres driver."""

    def __init__(self) -> None:
        from django.db import connection, transaction

        from django_ultimate_jobs import job

        def bench_enqueue(ctx, *, n: int) -> None:
            return None

        self.handle = job(name=JOB_NAME)(bench_enqueue)
        self.transaction = transaction
        connection.ensure_connection()

    def single(self, count: int) -> None:
        enqueue = self.handle.enqueue
        for n in range(count):
            enqueue(n=n)

    def atomic(self, count: int) -> None:
        enqueue = self.handle.enqueue
        with self.transaction.atomic():
            for n in range(count):
                enqueue(n=n)

    def many(self, count: int) -> None:
        self.handle.enqueue_many([{"n": n} for n in range(count)])


# -- measuring -------------------------------------------------------------------


def timed_rate(run: Callable[[int], None], count: int, raw: Raw) -> float:
    """Rows per second of one run over an empty table (checked afterwards)."""
    raw.truncate()
    started = time.perf_counter()
    run(count)
    elapsed = time.perf_counter() - started
    written = raw.count()
    if written != count:
        raise SystemExit(f"a run wrote {written} rows, expected {count}")
    return count / elapsed


def measure(
    rounds: int,
    count: int,
    sides: dict[str, Callable[[int], None]],
    raw: Raw,
) -> dict[str, list[float]]:
    """Warm every side up, then run them in turn, ``rounds`` times."""
    for run in sides.values():
        raw.truncate()
        run(min(WARMUP_ROWS, count))
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, run in sides.items():
            rates[name].append(timed_rate(run, count, raw))
    raw.truncate()
    return rates


def summarise(
    workload: str, count: int, raw_rates: dict[str, list[float]], ours: list[float]
) -> dict[str, object]:
    """Medians, the raw method compared with, the ratio and the target verdict."""
    medians = {method: statistics.median(r) for method, r in raw_rates.items()}
    best_method = max(medians, key=medians.__getitem__)
    ours_median = statistics.median(ours)
    ratio = ours_median / medians[best_method]
    target = TARGETS[workload]
    return {
        "label": LABELS[workload],
        "n": count,
        "raw": {
            method: {
                "rates": [round(r, 1) for r in rates],
                "median": round(medians[method], 1),
            }
            for method, rates in raw_rates.items()
        },
        "raw_baseline": best_method,
        "ours": {"rates": [round(r, 1) for r in ours], "median": round(ours_median, 1)},
        "ratio": round(ratio, 3),
        "target": target,
        "meets_target": None if target is None else ratio >= target,
    }


def print_table(results: dict[str, dict[str, object]]) -> None:
    header = (
        f"{'workload':<34} {'n':>6} {'raw rows/s':>11} {'ours rows/s':>12} "
        f"{'ours/raw':>9}  {'target':<14} raw baseline"
    )
    print(header)
    print("-" * len(header))
    for result in results.values():
        raw = result["raw"][result["raw_baseline"]]  # type: ignore[index]
        target = result["target"]
        verdict = (
            "-"
            if target is None
            else f">= {target:.2f}x {'ok' if result['meets_target'] else 'MISSED'}"
        )
        print(
            f"{result['label']:<34} {result['n']:>6} {raw['median']:>11,.0f} "
            f"{result['ours']['median']:>12,.0f} {result['ratio']:>8.2f}x  "  # type: ignore[index]
            f"{verdict:<14} {result['raw_baseline']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=3_000, help="rows for (a) and (b)")
    parser.add_argument("--batch", type=int, default=10_000, help="rows for (c)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--keep", action="store_true", help=f"keep the {BENCH_DB} database afterwards"
    )
    args = parser.parse_args()

    base_url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    bench_url = with_database(base_url, BENCH_DB)
    recreate_database(base_url, BENCH_DB)
    setup_django(bench_url)

    import django
    import psycopg
    from django.db import connections

    raw = Raw(bench_url)
    ours = Ours()

    def workload(
        name: str, count: int, sides: dict[str, Callable[[int], None]]
    ) -> dict[str, object]:
        rates = measure(args.rounds, count, sides, raw)
        ours_rates = rates.pop("ours")
        return summarise(name, count, rates, ours_rates)

    load_before = os.getloadavg()
    try:
        results = {
            "single_autocommit": workload(
                "single_autocommit", args.n, {"raw": raw.single, "ours": ours.single}
            ),
            "atomic": workload(
                "atomic", args.n, {"raw": raw.atomic, "ours": ours.atomic}
            ),
            "enqueue_many": workload(
                "enqueue_many",
                args.batch,
                {
                    "unnest": raw.many_unnest,
                    "executemany": raw.many_executemany,
                    "ours": ours.many,
                },
            ),
        }
        server = raw.server_version()
    finally:
        raw.close()
        connections.close_all()
        if not args.keep:
            drop_database(base_url, BENCH_DB)

    print_table(results)
    report = {
        "bench": "enqueue",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "rounds": args.rounds,
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "postgres": server,
        # The machine's 1/5/15-minute load before and after: other work on
        # the host moves both sides, which is why rounds are interleaved.
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "method": (
            "median rows/s over interleaved rounds; job table truncated before "
            "every run; baseline = plain psycopg INSERT of the same columns, "
            "server-side binding, autocommit (for enqueue_many: the faster of "
            "INSERT ... SELECT FROM unnest and executemany)"
        ),
        "workloads": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    shown = (
        args.output.relative_to(ROOT)
        if args.output.is_relative_to(ROOT)
        else args.output
    )
    print(f"\nwritten {shown}")


if __name__ == "__main__":
    main()
