"""An enqueuing process of the two-database project, as a web process is.

``python -m tests.acceptance.outbox_client <scenario> [count]`` with the
settings ``tests.acceptance.outbox_settings`` runs one scenario and prints
one JSON line: ``{"committed": [ids], "rolled_back": [ids]}``. Scenarios:

- ``commit N``: one transaction staging N jobs;
- ``mixed``: a commit, a rollback, and a transaction whose savepoint rolls
  back (its own message only);
- ``earlier-callback-raises N``: another ``on_commit`` callback, registered
  first, raises at commit (Django then runs no later callback);
- ``threads N``: 16 threads, N enqueues each, 5 per transaction.

After the scenario it waits (at most 10 s, then exits 0 all the same) for
its own relay thread to have nothing pending, unless ``--exit`` is passed: a
process that exits at once.
"""

from __future__ import annotations

import json
import sys
import threading

import django

from tests.support.waiting import poll_until

THREADS = 16
PER_TRANSACTION = 5


def main(argv: list[str]) -> int:
    django.setup()
    from django.db import transaction

    from django_ultimate_jobs.outbox.store import OutboxStore
    from tests.jobsapp.jobs import noop

    scenario, *rest = argv
    count = int(rest[0]) if rest and rest[0].isdigit() else 1
    committed: list[str] = []
    rolled_back: list[str] = []

    def stage(n: int, into: list[str]) -> None:
        into.append(str(noop.enqueue(n=n).id))

    if scenario == "commit":
        with transaction.atomic():
            committed += [str(noop.enqueue(n=i).id) for i in range(count)]
    elif scenario == "mixed":
        with transaction.atomic():
            stage(1, committed)
        try:
            with transaction.atomic():
                stage(2, rolled_back)
                raise RuntimeError("the business write failed")
        except RuntimeError:
            pass
        with transaction.atomic():
            stage(3, committed)
            try:
                with transaction.atomic():
                    stage(4, rolled_back)
                    raise RuntimeError("the inner write failed")
            except RuntimeError:
                pass
            stage(5, committed)
    elif scenario == "earlier-callback-raises":

        def boom() -> None:
            raise RuntimeError("another app's callback raised")

        try:
            with transaction.atomic():
                transaction.on_commit(boom)
                committed += [str(noop.enqueue(n=i).id) for i in range(count)]
        except RuntimeError:
            pass
    elif scenario == "threads":
        committed = _threads(count)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    print(json.dumps({"committed": committed, "rolled_back": rolled_back}), flush=True)
    if "--exit" not in rest:
        store = OutboxStore("default")
        # Up to 10 s for its relay thread; then it exits anyway, as a web
        # process may: a relay elsewhere publishes what is left (the tests
        # judge by the tables, not by this wait).
        poll_until(lambda: not store.pending(), 10)
    return 0


def _threads(per_thread: int) -> list[str]:
    from django.db import connections, transaction

    from tests.jobsapp.jobs import noop

    ids: list[list[str]] = [[] for _ in range(THREADS)]

    def run(index: int) -> None:
        try:
            for start in range(0, per_thread, PER_TRANSACTION):
                size = min(PER_TRANSACTION, per_thread - start)
                with transaction.atomic():
                    if start % 2:
                        answers = noop.enqueue_many([{"n": i} for i in range(size)])
                        ids[index] += [str(a.id) for a in answers]
                    else:
                        ids[index] += [str(noop.enqueue(n=i).id) for i in range(size)]
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [job_id for chunk in ids for job_id in chunk]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
