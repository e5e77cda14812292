"""Ledger postings/s beside a plain insert of the same rows, in one run.

Run from the repository root (see bench/README.md)::

    ./dev run python bench/ledger.py

It (re)creates the database ``bench_uj_ledger`` on the server of
``DATABASE_URL``, migrates it with the test settings, then measures 2-line
postings, each in its own transaction (autocommit):

- ours: ``model_book(LedgerLine).write(posting, ...)``: the posting row
  (``ON CONFLICT (tenant, key) DO NOTHING``) and its two lines in one
  statement, through Django's connection, Protect triggers in place;
- raw: plain psycopg inserting the same two rows in one ``INSERT`` into a
  table shaped like the lines table (``LIKE ... INCLUDING DEFAULTS, IDENTITY,
  INDEXES``: same columns and indexes, no trigger, no posting row).

The sides alternate in small chunks (100 postings raw, 100 ours, ...; 30
chunks each by default), so a load swing on a shared machine hits both
alike; the median rate of each side and the median of the per-chunk ratios
ours/raw (target >= 0.5x) are reported on stdout and in
``bench/results/ledger.json``. Validation (``assert_balanced_posting``) is
outside the timed loop: it runs at enqueue, not at write.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    bench_db_name,
    drop_database,
    git_head,
    hold_bench_lock,
    recreate_database,
    server_url,
    setup_django,
    with_database,
)

BENCH_DB = bench_db_name("bench_uj_ledger")
RESULTS = ROOT / "bench" / "results" / "ledger.json"
TARGET = 0.5
WARMUP = 200
PLAIN = "bench_plain_line"
RAW_INSERT = (
    f"INSERT INTO {PLAIN} (posting_id, tenant, line, account, currency, minor, posted_at) "
    "VALUES (%s, %s, 1, %s, %s, %s, now()), (%s, %s, 2, %s, %s, %s, now())"
)


def postings(prefix: str, count: int) -> list[object]:
    from django_ultimate_jobs.ledger import Money, assert_balanced_posting

    return [
        assert_balanced_posting(
            {
                "key": f"{prefix}-{n}",
                "entries": [
                    {"account": "cash", "amount": Money(n + 1, "EUR")},
                    {"account": "revenue", "amount": Money(-(n + 1), "EUR")},
                ],
            }
        )
        for n in range(count)
    ]


def run_ours(book: object, batch: list[object]) -> float:
    started = time.perf_counter()
    for posting in batch:
        book.write(posting, tenant="bench", ledger="bench.ledger")  # type: ignore[attr-defined]
    return len(batch) / (time.perf_counter() - started)


def run_raw(cursor: object, count: int, offset: int) -> float:
    started = time.perf_counter()
    for n in range(offset, offset + count):
        cursor.execute(  # type: ignore[attr-defined]
            RAW_INSERT,
            (n, "bench", "cash", "EUR", n + 1, n, "bench", "revenue", "EUR", -(n + 1)),
        )
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postings", type=int, default=100, help="per chunk")
    parser.add_argument("--chunks", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    args = parser.parse_args()

    url = server_url(BENCH_DB)
    lock = hold_bench_lock(with_database(url, "postgres"), BENCH_DB)
    bench_url = recreate_database(url, BENCH_DB)
    try:
        setup_django(bench_url)
        import psycopg
        from django.db import connection

        from django_ultimate_jobs.ledger import model_book
        from django_ultimate_jobs.models import LedgerLine

        book = model_book(LedgerLine)
        raw = psycopg.connect(bench_url, autocommit=True)
        raw.execute(
            f"CREATE TABLE {PLAIN} (LIKE ultimate_jobs_ledger_line "
            "INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES)"
        )
        cursor = raw.cursor()
        run_raw(cursor, WARMUP, 10**9)
        run_ours(book, postings("warmup", WARMUP))
        ours_rates, raw_rates, ratios = [], [], []
        for chunk in range(args.chunks):
            raw_rates.append(run_raw(cursor, args.postings, chunk * args.postings))
            ours_rates.append(run_ours(book, postings(f"c{chunk}", args.postings)))
            ratios.append(ours_rates[-1] / raw_rates[-1])
        ours, plain = statistics.median(ours_rates), statistics.median(raw_rates)
        ratio = statistics.median(ratios)
        with connection.cursor() as check:
            check.execute("SELECT count(*) FROM ultimate_jobs_ledger_line")
            lines = check.fetchone()[0]
        expected = 2 * (WARMUP + args.chunks * args.postings)
        assert lines == expected, f"{lines} lines written, {expected} expected"
        raw.close()
        connection.close()
    finally:
        if not args.keep:
            drop_database(url, BENCH_DB)
        lock.close()

    print(f"{'side':<34} {'postings/s':>11}")
    print(f"{'plain INSERT of the 2 rows':<34} {plain:>11.0f}")
    print(f"{'book.write() (posting + 2 lines)':<34} {ours:>11.0f}")
    print(f"median chunk ratio ours/raw {ratio:.2f}x (target >= {TARGET}x)")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "bench": "ledger",
                "commit": git_head(),
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "postings": args.postings,
                "chunks": args.chunks,
                "ours_postings_per_s": round(ours),
                "raw_postings_per_s": round(plain),
                "ratio_quartiles": [
                    round(q, 3) for q in statistics.quantiles(ratios, n=4)
                ],
                "ratio": round(ratio, 3),
                "target": TARGET,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
