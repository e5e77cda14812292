"""What the backends of a drain wait on: pg_stat_activity / pg_locks sampling.

Run from the repository root (see bench/README.md)::

    ./dev run python bench/contention.py [--processes 2] [--jobs 30000] [--system ours|raw]

It uses bench/throughput.py's database and drain (the gate, ``runjobs
--burst`` or bench/baseline.py) and, while the drain runs, samples every
``--every`` ms from its own connection: each backend of the bench database
that is active, its ``wait_event_type:wait_event`` (or ``CPU`` when it waits
on nothing) and the first line of its statement; for a ``Lock`` wait, the
lock type and relation it waits for. PostgreSQL 15 without
``pg_stat_statements`` preloaded (a server setting, not changed here) has no
per-statement totals, so this sampling is what says which statement of which
role spends the drain's time where. Prints the table; writes nothing.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench import throughput as tp  # noqa: E402
from bench.common import (  # noqa: E402
    JobTableGate,
    hold_bench_lock,
    recreate_database,
    server_url,
    with_database,
)

SAMPLE = """
SELECT a.pid, coalesce(a.wait_event_type || ':' || a.wait_event, 'CPU'),
       split_part(ltrim(a.query), E'\\n', 1),
       (SELECT l.locktype || ' ' || coalesce(l.relation::regclass::text, '')
               || ' ' || l.mode
          FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted LIMIT 1)
  FROM pg_stat_activity a
 WHERE a.datname = %s AND a.state = 'active' AND a.pid <> pg_backend_pid()
"""


def sample(url: str, dbname: str, every_s: float, stop: threading.Event) -> list:
    seen: list = []
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            rows = conn.execute(SAMPLE, (dbname,), prepare=True).fetchall()
            seen.append((time.time(), rows))
            time.sleep(every_s)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=30000)
    parser.add_argument("--system", choices=("ours", "raw"), default="ours")
    parser.add_argument("--work", choices=("noop", "sleep5"), default="noop")
    parser.add_argument("--every", type=float, default=2.0, help="ms between samples")
    args = parser.parse_args()
    tp.JOBS = args.jobs
    base_url = server_url(tp.BENCH_DB)
    bench_url = with_database(base_url, tp.BENCH_DB)
    lock = hold_bench_lock(base_url, tp.BENCH_DB)  # noqa: F841 (held until exit)
    recreate_database(base_url, tp.BENCH_DB)
    tp.setup_django(bench_url)
    stop = threading.Event()
    out: list = []
    sampler = threading.Thread(
        target=lambda: out.extend(
            sample(base_url, tp.BENCH_DB, args.every / 1000, stop)
        )
    )
    sampler.start()
    system = tp.OURS if args.system == "ours" else tp.RAW
    opened: list[float] = []
    open_gate = JobTableGate.open

    def open_and_note(gate: JobTableGate) -> float:
        opened.append(open_gate(gate))
        return opened[-1]

    JobTableGate.open = open_and_note  # type: ignore[method-assign]
    try:
        result = tp.drain(system, bench_url, args.work, args.processes)
    finally:
        stop.set()
        sampler.join()
    print(f"{system} {args.work} x{args.processes}: {result['rate']:.0f} jobs/s")
    waits: collections.Counter = collections.Counter()
    busy = 0
    # Only the drain: from the gate's opening (the enqueue before it, and the
    # claims queued behind the gate, are not the drain's waits).
    out = [rows for at, rows in out if opened and at >= opened[0]]
    for rows in out:
        for _pid, wait, query, lock_wait in rows:
            busy += 1
            waits[(wait, query[:70], lock_wait or "")] += 1
    print(f"{len(out)} samples, {busy} active-backend observations")
    print(f"{'share':>6}  {'wait':28} {'lock awaited':36} statement")
    for (wait, query, lock_wait), n in waits.most_common(25):
        print(f"{n / max(busy, 1):6.1%}  {wait:28} {lock_wait:36} {query}")


if __name__ == "__main__":
    main()
