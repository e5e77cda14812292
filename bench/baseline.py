"""The ideal worker: a raw-psycopg SKIP LOCKED loop (no Django), for comparison.

bench/throughput.py starts one or two of these as subprocesses, exactly as
it starts ``runjobs``; run alone it needs a migrated database::

    python bench/baseline.py DSN --threads 8 --work noop     # drain, then exit
    python bench/baseline.py DSN --threads 8 --work sleep5   # 5 ms per job
    python bench/baseline.py DSN --listen                    # latency, until SIGTERM

Without ``DSN`` it uses ``DATABASE_URL`` (how bench/throughput.py passes it:
a URL on the command line would show its password in ``ps``).

Drain mode: ``--threads`` threads, each on its own autocommit connection,
claim up to ``--batch`` rows in one prepared statement, run the work of every
row (nothing, or ``time.sleep(0.005)`` each), mark the batch done in a second
prepared statement, and exit once a claim comes back empty.

Listen mode: a LISTEN connection on ``ultimate_jobs_wake`` sets an event; one
claimer thread wakes on it (or after 250 ms), claims until a claim comes back
empty, and runs each ``bench.latency`` row inline: it records ``time.time()``
at handler start into ``bench_latency``, then marks the row done. It stops on
SIGTERM, or within 250 ms once the process that started it is gone.

Either way the process prints ``baseline ready`` once its connections are
open, which bench/throughput.py treats like runjobs' ready line.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

import psycopg

CHANNEL = "ultimate_jobs_wake"

CLAIM = """
WITH c AS (
    SELECT id FROM ultimate_jobs_job
     WHERE state = 'ready' AND queue = 'default'
     ORDER BY priority DESC, run_at, id
     LIMIT %s
       FOR UPDATE SKIP LOCKED
)
UPDATE ultimate_jobs_job j
   SET state = 'running', attempt = j.attempt + 1, claims = j.claims + 1,
       claimed_by = %s, claimed_at = now(),
       visible_at = now() + interval '30 seconds', updated_at = now()
  FROM c
 WHERE j.id = c.id
RETURNING j.id, j.input
"""

DONE = """
UPDATE ultimate_jobs_job
   SET state = 'done', visible_at = NULL, claimed_by = NULL, updated_at = now()
 WHERE id = ANY(%s)
"""

RECORD_LATENCY = "INSERT INTO bench_latency (job_id, started) VALUES (%s, %s)"


def work_noop() -> None:
    return None


def work_sleep5() -> None:
    time.sleep(0.005)


WORK = {"noop": work_noop, "sleep5": work_sleep5}


def drain_thread(conn: psycopg.Connection, worker: str, batch: int, work) -> None:
    with conn:
        while True:
            rows = conn.execute(CLAIM, (batch, worker), prepare=True).fetchall()
            if not rows:
                return
            for _job_id, _input in rows:
                work()
            conn.execute(DONE, ([row[0] for row in rows],), prepare=True)


def run_drain(dsn: str, threads: int, batch: int, work_name: str) -> None:
    work = WORK[work_name]
    worker = f"baseline:{os.getpid()}"
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(threads)]
    print("baseline ready", flush=True)
    pool = [
        threading.Thread(target=drain_thread, args=(conn, worker, batch, work))
        for conn in conns
    ]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()


def run_listen(dsn: str, batch: int) -> None:
    worker = f"baseline:{os.getpid()}"
    parent = os.getppid()
    stop = threading.Event()
    wake = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: (stop.set(), wake.set()))

    listen_conn = psycopg.connect(dsn, autocommit=True)
    listen_conn.execute(f"LISTEN {CHANNEL}")
    claim_conn = psycopg.connect(dsn, autocommit=True)

    def listen() -> None:
        while not stop.is_set():
            for _note in listen_conn.notifies(timeout=0.5):
                wake.set()

    threading.Thread(target=listen, daemon=True).start()
    print("baseline ready", flush=True)
    while not stop.is_set():
        wake.wait(0.25)
        wake.clear()
        if os.getppid() != parent:  # re-parented: the bench died without a word
            break
        while not stop.is_set():
            rows = claim_conn.execute(CLAIM, (batch, worker), prepare=True).fetchall()
            if not rows:
                break
            for job_id, _input in rows:
                started = time.time()
                claim_conn.execute(RECORD_LATENCY, (job_id, started), prepare=True)
            claim_conn.execute(DONE, ([row[0] for row in rows],), prepare=True)
    claim_conn.close()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "dsn",
        nargs="?",
        default=os.environ.get("DATABASE_URL"),
        help="default: $DATABASE_URL",
    )
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--work", choices=sorted(WORK), default="noop")
    parser.add_argument(
        "--listen", action="store_true", help="latency mode (until SIGTERM)"
    )
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("give DSN or set DATABASE_URL")
    if args.listen:
        run_listen(args.dsn, args.batch)
    else:
        run_drain(args.dsn, args.threads, args.batch, args.work)


if __name__ == "__main__":
    main(sys.argv[1:])
