"""The Redis driver's read and operator verbs (mixed into ``RedisDriver``).

Each verb that changes a row is one script in the row's queue slot
(``lua/verbs.lua``, ``lua/scan.lua``); listings and totals over several
queues read each queue and merge, as a reader sees them (no snapshot
spans queues: a row moving during a listing may show in neither or both
pages, never changed).
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ...errors import (
    JobDuplicate,
    JobNotCancellable,
    JobNotFound,
    JobNotPromotable,
    JobNotRemovable,
    JobNotRequeueable,
)
from ...validation import storable_text
from ..base import (
    COUNTER_FIELDS,
    BulkResult,
    CounterBucket,
    CounterTotal,
    JobFilter,
    JobRecord,
    PausedName,
    QueueStats,
    WorkerRecord,
)
from ..steps import StepRecord, step_not_found
from .rows import from_us, opt, pairs, record, to_us

if TYPE_CHECKING:
    from .store import RedisStore

__all__ = ["OperatorVerbs"]


class OperatorVerbs:
    """Stats, the operator's verbs, pauses, counters and the worker registry."""

    store: RedisStore

    def _verb(self, queue: str, verb: str, *args: Any) -> Any:
        store = self.store
        return store.run(
            "verbs",
            store.layout.queue(queue),
            [verb, store.now_arg(), store.layout.channel, *args],
        )

    def _where(self, job_id: UUID) -> str:
        queue = self.store.locate(job_id)
        if queue is None:
            raise JobNotFound("no job has that id", meta={"id": str(job_id)})
        return queue

    # -- reads ---------------------------------------------------------------

    def stats(self) -> list[QueueStats]:
        """Depth per queue in six exclusive buckets, sorted by queue name."""
        store = self.store
        queues = store.queues()
        answers = store.run_many(
            [
                ("verbs", store.layout.queue(q), ["stats", store.now_arg(), ""])
                for q in queues
            ]
        )
        listed = []
        for queue, answer in zip(queues, answers, strict=True):
            counts = [int(n) for n in answer[:6]]
            if not any(counts):
                continue
            ready, delayed, running, suspended, failed, dead = counts
            oldest = None
            if answer[6]:
                oldest = (int(answer[7]) - int(float(answer[6])) + 500) // 1000
            listed.append(
                QueueStats(
                    queue=queue,
                    ready=ready,
                    delayed=delayed,
                    running=running,
                    suspended=suspended,
                    failed=failed,
                    dead=dead,
                    oldest_ready_ms=oldest,
                )
            )
        return listed

    def get(self, job_id: UUID) -> JobRecord | None:
        """Return one job row, or ``None``."""
        queue = self.store.locate(job_id)
        if queue is None:
            return None
        row = self.store.conn().hgetall(self.store.layout.queue(queue) + f"j:{job_id}")
        return record(row) if row else None

    def counters(self, job: str) -> dict[tuple[int, datetime], dict[str, int]]:
        """That job's counter buckets, keyed (width ms, start), oldest first."""
        buckets: dict[tuple[int, datetime], dict[str, int]] = {}
        for name, _queue, width, start, counts in self._buckets():
            if name == job:
                bucket = buckets.setdefault(
                    (width, start), dict.fromkeys(COUNTER_FIELDS, 0)
                )
                for field, value in counts.items():
                    bucket[field] += value
        return dict(sorted(buckets.items(), key=lambda item: item[0][1]))

    def _buckets(self) -> list[tuple[str, str, int, datetime, dict[str, int]]]:
        # Each queue's hash holds that queue's buckets (name, width, start).
        store = self.store
        queues = store.queues()
        pipe = store.conn().pipeline(transaction=False)
        for queue in queues:
            pipe.hgetall(store.layout.queue(queue) + "k")
        merged: dict[tuple[str, str, int, datetime], dict[str, int]] = defaultdict(dict)
        for queue, fields in zip(queues, pipe.execute(), strict=True):
            for key, value in fields.items():
                name, width, start, field = key.split("\x1f")
                counts = merged[(name, queue, int(width), from_us(start))]
                counts[field] = counts.get(field, 0) + int(value)
        return [(n, q, w, s, counts) for (n, q, w, s), counts in merged.items()]

    def counter_totals(self, since: datetime) -> list[CounterTotal]:
        """Per job name, the counter buckets from ``since`` on, summed."""
        totals: dict[str, dict[str, int]] = {}
        for name, _queue, _width, start, counts in self._buckets():
            if start >= since:
                total = totals.setdefault(name, dict.fromkeys(COUNTER_FIELDS, 0))
                for field, value in counts.items():
                    total[field] += value
        return [CounterTotal(job=job, **totals[job]) for job in sorted(totals)]

    def counter_buckets(self, since: datetime) -> list[CounterBucket]:
        """Every counter bucket from ``since`` on (start, job, queue order)."""
        picked = [
            CounterBucket(
                job=name,
                queue=queue,
                width_ms=width,
                start=start,
                **{field: counts.get(field, 0) for field in COUNTER_FIELDS},
            )
            for name, queue, width, start, counts in self._buckets()
            if start >= since
        ]
        return sorted(picked, key=lambda b: (b.start, b.job, b.queue, b.width_ms))

    # -- operator verbs ------------------------------------------------------

    def requeue(self, job_id: UUID, *, from_step: str | None = None) -> JobRecord:
        """Make a finished job ready again (attempt 0, due now)."""
        queue = self._where(job_id)
        step = None if from_step is None else _storable_or_none(from_step)
        if from_step is not None and step is None:
            # A name Redis could not even be asked about is no step of the run.
            listed = self._steps(queue, job_id)
            raise step_not_found(job_id, from_step, listed)
        answer = self._verb(queue, "requeue", str(job_id), opt(step))
        if answer[0] == "notfound":
            raise JobNotFound("no job has that id", meta={"id": str(job_id)})
        if answer[0] == "dup":
            raise JobDuplicate(
                "a live job holds this job's idempotency key",
                fix=f"python manage.py jobs show {answer[1]}",
                meta={"id": str(job_id), "holder": answer[1]},
            )
        if answer[0] == "state":
            raise JobNotRequeueable(
                f"the job is {answer[1]}; only finished jobs can be retried",
                meta={"id": str(job_id), "state": answer[1]},
            )
        if answer[0] == "nostep":
            assert from_step is not None
            records = [
                StepRecord(
                    run_id=job_id, name=name, status="completed", started_at=from_us(at)
                )
                for name, at in zip(answer[1::2], answer[2::2], strict=True)
            ]
            raise step_not_found(job_id, from_step, records)
        return record(pairs(answer[1:]))

    def _steps(self, queue: str, job_id: UUID) -> list[StepRecord]:
        row = self.get(job_id)
        if row is None:
            return []
        flat = self.store.run(
            "steps", self.store.layout.queue(queue), ["list", str(row.run_id)]
        )
        return [
            StepRecord(
                run_id=row.run_id,
                name=name,
                status="completed",
                started_at=from_us(value.split("|", 2)[1]),
            )
            for name, value in pairs(flat).items()
        ]

    def promote(self, job_id: UUID) -> JobRecord:
        """Make a ready or delayed job due now, and wake its queue."""
        answer = self._verb(self._where(job_id), "promote", str(job_id))
        if answer[0] == "notfound":
            raise JobNotFound("no job has that id", meta={"id": str(job_id)})
        if answer[0] == "state":
            raise JobNotPromotable(
                f"the job is {answer[1]}, not waiting on its run time",
                meta={"id": str(job_id), "state": answer[1]},
            )
        return record(pairs(answer[1:]))

    def cancel(self, job_id: UUID, *, reason: str | None = None) -> JobRecord:
        """Cancel a live job; a running one loses its fence at once."""
        queue = self.store.locate(job_id)
        text = None if reason is None else storable_text(reason)
        answer = (
            ["no"]
            if queue is None
            else self._verb(queue, "cancel", str(job_id), opt(text))
        )
        if answer[0] != "ok":
            raise JobNotCancellable(
                "the job is finished or unknown", meta={"id": str(job_id)}
            )
        return record(pairs(answer[1:]))

    def remove(self, job_id: UUID) -> bool:
        """Delete a job that is not running, with its steps."""
        queue = self.store.locate(job_id)
        if queue is None:
            return False
        answer = self._verb(queue, "remove", str(job_id))
        if answer[0] == "running":
            raise JobNotRemovable(
                "the job is running", meta={"id": str(job_id), "state": "running"}
            )
        return bool(answer[0] == "ok")

    # -- listings and bulk verbs ---------------------------------------------

    def _scan(
        self, verb: str, where: JobFilter, limit: int, before: UUID | None = None
    ) -> list[tuple[str, Any]]:
        store = self.store
        queues = [where.queue] if where.queue is not None else store.queues()
        states = (
            ""
            if where.states is None
            else json.dumps(sorted(s.value for s in where.states))
        )
        args = [
            verb,
            store.now_arg(),
            store.layout.channel,
            limit,
            opt(before),
            states,
            opt(where.name),
            opt(where.tenant_id),
            opt(where.id_min),
            opt(where.id_max),
            opt(None if where.created_from is None else to_us(where.created_from)),
            opt(None if where.created_to is None else to_us(where.created_to)),
            opt(where.error_code),
        ]
        if where.states is not None and not where.states:
            return []
        answers = store.run_many(
            [("scan", store.layout.queue(q), args) for q in queues]
        )
        return list(zip(queues, answers, strict=True))

    def list_jobs(
        self, where: JobFilter, *, before: UUID | None, limit: int
    ) -> list[JobRecord]:
        """One page of jobs, newest id first, after ``before``."""
        rows = [
            record(pairs(flat))
            for _, page in self._scan("page", where, limit, before)
            for flat in page
        ]
        rows.sort(key=lambda row: row.id.int, reverse=True)
        return rows[:limit]

    def count(self, where: JobFilter) -> int:
        """How many jobs match ``where``."""
        return sum(int(n) for _, n in self._scan("count", where, 0))

    def _bulk(self, verb: str, where: JobFilter, limit: int) -> BulkResult:
        # Oldest first within each queue; the queues in name order, each
        # taking what the earlier ones left of the limit.
        store = self.store
        queues = [where.queue] if where.queue is not None else store.queues()
        affected = remaining = 0
        for queue in queues:
            single = JobFilter(**{**_fields(where), "queue": queue})
            for _, (moved, left) in self._scan(verb, single, limit - affected):
                affected += int(moved)
                remaining += int(left)
        return BulkResult(affected, remaining)

    def requeue_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Requeue up to ``limit`` finished rows, oldest first (one per key)."""
        return self._bulk("requeue", where, limit)

    def remove_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Delete up to ``limit`` rows that are not running, with their steps."""
        return self._bulk("remove", where, limit)

    def promote_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Make up to ``limit`` waiting rows due now, and wake their queues."""
        return self._bulk("promote", where, limit)

    # -- pauses ----------------------------------------------------------------

    def pause_queue(self, queue: str) -> list[PausedName]:
        """Pause ``queue`` (the first pause's time is kept); answers the list."""
        self.store.register(queue)
        self._verb(queue, "pause")
        return self.paused_queues()

    def resume_queue(self, queue: str) -> list[PausedName]:
        """Resume ``queue`` and wake it; answers the paused list after the write."""
        self._verb(queue, "resume", queue)
        return self.paused_queues()

    def paused_queues(self) -> list[PausedName]:
        """Paused queues sorted by name (code-point order)."""
        store = self.store
        queues = store.queues()
        pipe = store.conn().pipeline(transaction=False)
        for queue in queues:
            pipe.get(store.layout.queue(queue) + "pz")
        return [
            PausedName(queue, from_us(at))
            for queue, at in zip(queues, pipe.execute(), strict=True)
            if at is not None
        ]

    # -- the worker registry -------------------------------------------------

    def announce_worker(self, worker: WorkerRecord, *, ttl_ms: int) -> None:
        """Insert or refresh a worker's registry row."""
        row = {
            "id": worker.id,
            "host": worker.host,
            "pid": worker.pid,
            "queues": list(worker.queues),
            "concurrency": worker.concurrency,
            "in_flight": list(worker.in_flight[:100]),
        }
        self.store.fleet("announce", worker.id, json.dumps(row), ttl_ms)

    def forget_worker(self, worker_id: str) -> None:
        """Delete a worker's registry row."""
        self.store.fleet("forget", worker_id)

    def workers(self) -> list[WorkerRecord]:
        """Live workers sorted by id; lapsed rows are deleted by the read."""
        rows = [json.loads(text) for text in self.store.fleet("workers")]
        return sorted(
            (
                WorkerRecord(
                    id=row["id"],
                    host=row["host"],
                    pid=int(row["pid"]),
                    queues=_listed(row["queues"]),
                    concurrency=int(row["concurrency"]),
                    in_flight=_listed(row["in_flight"]),
                    started_at=from_us(row["started_at"]),
                    heartbeat_at=from_us(row["heartbeat_at"]),
                    expires_at=from_us(row["expires_at"]),
                )
                for row in rows
            ),
            key=lambda worker: worker.id,
        )


def _listed(value: Any) -> list[str]:
    # Lua's cjson writes an empty list as {}.
    return list(value) if isinstance(value, list) else []


def _fields(where: JobFilter) -> dict[str, Any]:
    return {name: getattr(where, name) for name in JobFilter.__dataclass_fields__}


def _storable_or_none(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return None if "\x00" in text else text
