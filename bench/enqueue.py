"""Enqueue throughput, each workload beside a raw-psycopg baseline.

Run from the repository root (see bench/README.md)::

    ./dev run python bench/enqueue.py
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python bench/enqueue.py

It (re)creates the database ``ultimate_jobs_bench`` on the server of
``DATABASE_URL``, migrates it with the test settings, then measures in one run:

(a) ``enqueue()`` one job at a time in autocommit (N = 3,000);
(b) ``enqueue()`` N times, 300 inside each ``transaction.atomic()``;
(c) ``enqueue_many()`` of 1,000 rows, 10 calls a run.

The baseline inserts the same columns of the same table with plain
psycopg: a parameterised INSERT with server-side binding on an autocommit
connection (psycopg prepares it after its fifth use). For (c) it tries three
raw ways, one ``INSERT ... SELECT FROM unnest(...)``, ``executemany``
(pipelined) and ``COPY``, and compares with the fastest. Both sides run with
``synchronous_commit = off`` unless ``--synchronous-commit on``: with it on,
every autocommit statement waits for a WAL flush, and on a shared disk that
wait is most of both sides' time, which hides what the library costs.
In a round the sides take turns, 300 rows (a) or one call (c) at a time,
over a job table truncated at the start of the round; each side's median
rate over the rounds and its min-max are reported with the ratio ours/raw
(the median and min-max of the rounds' ratios, each round's ours over the
same round's raw), and the CPU each side spent per row in this process
and in its server backend, as a table on stdout and as JSON in
``bench/results/enqueue.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    bench_db_name,
    drop_database,
    git_head,
    hold_bench_lock,
    process_cpu_s,
    recreate_database,
    server_url,
    setup_django,
    with_database,
)

BENCH_DB = bench_db_name("ultimate_jobs_bench")
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

COPY_COLUMNS = (
    "id, name, queue, input, idempotency_key, run_id, max_attempts, priority, state"
)
RAW_COPY = f"COPY ultimate_jobs_job ({COPY_COLUMNS}) FROM STDIN"

# Targets (ours/raw, issue 16); (b) has none.
TARGETS = {"single_autocommit": 0.5, "atomic": None, "enqueue_many": 0.4}
LABELS = {
    "single_autocommit": "(a) enqueue() x N, autocommit",
    "atomic": "(b) enqueue() x 300 per atomic()",
    "enqueue_many": "(c) enqueue_many() of {batch}",
}


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

    def many_copy(self, count: int) -> None:
        # run_at, created_at and updated_at take their defaults (now).
        with self.cursor.copy(RAW_COPY) as copy:
            for n in range(count):
                copy.write_row(self._params(n))

    def set_synchronous_commit(self, value: str) -> None:
        self.cursor.execute(f"SET synchronous_commit = {value}")

    @property
    def backend_pid(self) -> int:
        return int(self.conn.info.backend_pid)

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
        self.connection = connection
        connection.ensure_connection()

    def set_synchronous_commit(self, value: str) -> None:
        # A session setting on the connection every enqueue uses (autocommit).
        with self.connection.cursor() as cursor:
            cursor.execute(f"SET synchronous_commit = {value}")

    @property
    def backend_pid(self) -> int:
        return int(self.connection.connection.info.backend_pid)

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


def in_batches(run: Callable[[int], None], batch: int) -> Callable[[int], None]:
    """``run`` called once per ``batch`` rows of ``count``."""

    def batched(count: int) -> None:
        for start in range(0, count, batch):
            run(min(batch, count - start))

    return batched


# -- measuring -------------------------------------------------------------------


def timed(run: Callable[[int], None], count: int, pid: int) -> list[float]:
    """One call of ``run``: wall seconds, this process's CPU seconds and the
    server backend's (nan when unreadable). CPU time is what other work on a
    shared host moves least."""
    server_before = process_cpu_s(pid)
    client_before = time.process_time()
    started = time.perf_counter()
    run(count)
    elapsed = time.perf_counter() - started
    client = time.process_time() - client_before
    server_after = process_cpu_s(pid)
    if server_before is None or server_after is None:
        return [elapsed, client, math.nan]
    return [elapsed, client, server_after - server_before]


Sample = tuple[float, float, float | None]


def measure(
    rounds: int,
    count: int,
    chunk: int,
    sides: dict[str, Callable[[int], None]],
    pids: dict[str, int],
    raw: Raw,
    warmup: int = WARMUP_ROWS,
) -> dict[str, list[Sample]]:
    """Warm every side up, then ``rounds`` rounds over an empty table.

    In a round every side writes ``count`` rows, ``chunk`` at a time, the
    sides taking turns chunk by chunk, so a burst of other work on the host
    lands on all of them; the row count is checked at the end of the round.
    A sample is a side's rows per second over its whole round and its CPU
    microseconds per row (client, server; None when unreadable).
    """
    for run in sides.values():
        raw.truncate()
        run(min(warmup, count))
    samples: dict[str, list[Sample]] = {name: [] for name in sides}
    for _ in range(rounds):
        raw.truncate()
        totals = {name: [0.0, 0.0, 0.0] for name in sides}
        for start in range(0, count, chunk):
            size = min(chunk, count - start)
            for name, run in sides.items():
                for index, value in enumerate(timed(run, size, pids[name])):
                    totals[name][index] += value
        written = raw.count()
        if written != count * len(sides):
            raise SystemExit(
                f"a round wrote {written} rows, expected {count * len(sides)}"
            )
        for name, (elapsed, client, server) in totals.items():
            samples[name].append(
                (
                    count / elapsed,
                    client / count * 1e6,
                    None if math.isnan(server) else server / count * 1e6,
                )
            )
    raw.truncate()
    return samples


def spread(samples: list[Sample]) -> dict[str, object]:
    """Every round's rate, the median and the min-max; median CPU per row."""
    rates = [rate for rate, _, _ in samples]
    servers = [server for _, _, server in samples if server is not None]
    return {
        "rates": [round(r, 1) for r in rates],
        "median": round(statistics.median(rates), 1),
        "min": round(min(rates), 1),
        "max": round(max(rates), 1),
        "client_cpu_us": round(statistics.median(c for _, c, _ in samples), 1),
        "server_cpu_us": round(statistics.median(servers), 1) if servers else None,
    }


def summarise(
    workload: str,
    label: str,
    count: int,
    raw_samples: dict[str, list[Sample]],
    ours: list[Sample],
) -> dict[str, object]:
    """Medians, the raw method compared with, the ratio and the target verdict.

    The ratio (and the verdict) is the median of the rounds' ratios, each
    round's ours over the same round's raw: they took turns, so they saw the
    same machine. The ratio of the two sides' median rates is kept beside it;
    on a busy host it pairs rates from different rounds.
    """
    medians = {
        method: statistics.median(rate for rate, _, _ in samples)
        for method, samples in raw_samples.items()
    }
    best_method = max(medians, key=medians.__getitem__)
    ours_rates = [rate for rate, _, _ in ours]
    of_medians = statistics.median(ours_rates) / medians[best_method]
    per_round = [
        o / r for o, (r, _, _) in zip(ours_rates, raw_samples[best_method], strict=True)
    ]
    ratio = statistics.median(per_round)
    target = TARGETS[workload]
    raw = {method: spread(samples) for method, samples in raw_samples.items()}
    mine = spread(ours)
    return {
        "label": label,
        "n": count,
        "raw": raw,
        "raw_baseline": best_method,
        "ours": mine,
        "ratio": round(ratio, 3),
        "ratio_of_medians": round(of_medians, 3),
        "ratio_per_round": [round(r, 3) for r in per_round],
        "ratio_min": round(min(per_round), 3),
        "ratio_max": round(max(per_round), 3),
        "cpu_ratio": _cpu_ratio(raw[best_method], mine),
        "target": target,
        "meets_target": None if target is None else ratio >= target,
    }


def _cpu_ratio(raw: dict[str, Any], ours: dict[str, Any]) -> float | None:
    """Raw's CPU per row over ours (client + server): the rate ratio the two
    would have with nothing else on the machine and no wait between them."""
    if raw["server_cpu_us"] is None or ours["server_cpu_us"] is None:
        return None
    mine = ours["client_cpu_us"] + ours["server_cpu_us"]
    return round((raw["client_cpu_us"] + raw["server_cpu_us"]) / mine, 3)


def print_table(results: dict[str, dict[str, object]]) -> None:
    def line(result: dict[str, Any], raw: Any, ours: Any) -> str:
        target = result["target"]
        verdict = (
            "-"
            if target is None
            else f">= {target:.2f}x {'ok' if result['meets_target'] else 'MISSED'}"
        )
        ratio = f"{result['ratio']:.2f}x ({result['ratio_min']:.2f}-{result['ratio_max']:.2f})"
        return (
            f"{result['n']:>6} {_rate(raw):>24} {_rate(ours):>24} {ratio:>20}  "
            f"{verdict:<14} {result['raw_baseline']}"
        )

    _print_rows(
        f"{'n':>6} {'raw rows/s (min-max)':>24} {'ours rows/s (min-max)':>24} "
        f"{'ours/raw (min-max)':>20}  {'target':<14} raw baseline",
        results,
        line,
    )


def print_cpu_table(results: dict[str, dict[str, object]]) -> None:
    print(
        "\nCPU microseconds per row, median (client = this process, "
        "server = its PostgreSQL backend)"
    )

    def line(result: dict[str, Any], raw: Any, ours: Any) -> str:
        ratio = result["cpu_ratio"]
        return (
            f"{raw['client_cpu_us']:>10} {_or_dash(raw['server_cpu_us']):>10} "
            f"{ours['client_cpu_us']:>11} {_or_dash(ours['server_cpu_us']):>11} "
            f"{_or_dash(ratio and f'{ratio:.2f}x'):>9}"
        )

    _print_rows(
        f"{'raw client':>10} {'raw server':>10} {'ours client':>11} "
        f"{'ours server':>11} {'raw/ours':>9}",
        results,
        line,
    )


def _print_rows(
    header: str,
    results: dict[str, dict[str, Any]],
    line: Callable[[dict[str, Any], Any, Any], str],
) -> None:
    header = f"{'workload':<33} {header}"
    print(header)
    print("-" * len(header))
    for result in results.values():
        raw = result["raw"][result["raw_baseline"]]
        print(f"{result['label']:<33} {line(result, raw, result['ours'])}")


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _rate(side: Any) -> str:
    return f"{side['median']:,.0f} ({side['min']:,.0f}-{side['max']:,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=3_000, help="rows for (a) and (b)")
    parser.add_argument(
        "--chunk", type=int, default=300, help="rows a turn in (a) (sides alternate)"
    )
    parser.add_argument("--batch", type=int, default=1_000, help="rows a call in (c)")
    parser.add_argument("--batches", type=int, default=10, help="calls a run in (c)")
    parser.add_argument(
        "--synchronous-commit",
        choices=["off", "on"],
        default="off",
        help="both sides' session setting (default off: see the module docstring)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--keep", action="store_true", help=f"keep the {BENCH_DB} database afterwards"
    )
    args = parser.parse_args()

    base_url = server_url(BENCH_DB)
    bench_url = with_database(base_url, BENCH_DB)
    lock = hold_bench_lock(base_url, BENCH_DB)  # noqa: F841 (held until exit)
    recreate_database(base_url, BENCH_DB)
    try:
        setup_django(bench_url)
    except BaseException:  # Ctrl-C or SIGTERM while migrating: drop it as below
        if not args.keep:
            drop_database(base_url, BENCH_DB)
        raise

    import django
    import psycopg
    from django.db import connections

    raw = Raw(bench_url)
    ours = Ours()
    raw.set_synchronous_commit(args.synchronous_commit)
    ours.set_synchronous_commit(args.synchronous_commit)

    def workload(
        name: str,
        count: int,
        sides: dict[str, Callable[[int], None]],
        label: str,
        chunk: int,
        warmup: int = WARMUP_ROWS,
    ) -> dict[str, object]:
        pids = {side: raw.backend_pid for side in sides}
        pids["ours"] = ours.backend_pid
        samples = measure(args.rounds, count, chunk, sides, pids, raw, warmup)
        ours_samples = samples.pop("ours")
        return summarise(name, label, count, samples, ours_samples)

    def batched(run: Callable[[int], None]) -> Callable[[int], None]:
        return in_batches(run, args.batch)

    load_before = os.getloadavg()
    try:
        results = {
            "single_autocommit": workload(
                "single_autocommit",
                args.n,
                {"raw": raw.single, "ours": ours.single},
                LABELS["single_autocommit"],
                chunk=args.chunk,
            ),
            "atomic": workload(
                "atomic",
                args.n,
                {"raw": raw.atomic, "ours": ours.atomic},
                LABELS["atomic"],
                chunk=args.chunk,  # a transaction of 300, sides taking turns
            ),
            "enqueue_many": workload(
                "enqueue_many",
                args.batch * args.batches,
                {
                    "unnest": batched(raw.many_unnest),
                    "executemany": batched(raw.many_executemany),
                    "copy": batched(raw.many_copy),
                    "ours": batched(ours.many),
                },
                LABELS["enqueue_many"].format(batch=f"{args.batch:,}"),
                chunk=args.batch,
                # Six calls: PostgreSQL settles a prepared statement's plan
                # (custom or generic) after its fifth execution.
                warmup=6 * args.batch,
            ),
        }
        server = raw.server_version()
    finally:
        raw.close()
        connections.close_all()
        if not args.keep:
            drop_database(base_url, BENCH_DB)

    print(f"synchronous_commit = {args.synchronous_commit} on both sides")
    print_table(results)
    print_cpu_table(results)
    report = {
        "bench": "enqueue",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git_head(),
        "rounds": args.rounds,
        "synchronous_commit": args.synchronous_commit,
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "postgres": server,
        # The machine's 1/5/15-minute load before and after: other work on
        # the host moves both sides, which is why rounds are interleaved.
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "method": (
            "rows/s over rounds (median, min-max), the sides taking turns within a "
            "round; job table truncated before every round; baseline = plain psycopg INSERT of the same columns, "
            "server-side binding, autocommit (for enqueue_many: the fastest of "
            "INSERT ... SELECT FROM unnest, executemany and COPY, in batches of the "
            "same size); ratio = median of the rounds' ours/raw (min-max beside it)"
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
