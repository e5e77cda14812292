"""Cron tasks, their pauses and the leader lease on Redis (``driver.cron``).

Tasks live in the fleet's slot; the jobs a fire inserts live in their
queues' slots, so a fire is three steps, each one script: move the
watermark (fenced on the one the scheduler read) and record the fire's
jobs (their ids chosen first) as in flight; insert the jobs; clear the
record. A scheduler that dies between the first and the last leaves the
record, and the next ``task_sync`` inserts those jobs again: their ids
make the second insert a dedupe, so an occurrence is enqueued once,
whatever dies when.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ...ids import uuid7
from ..base import Enqueued, EnqueueRequest, PausedName
from ..cron import FireResult, TaskArm, TaskFire, TaskRecord
from .leases import RedisLeases
from .rows import from_us, opt, pairs, to_us

if TYPE_CHECKING:
    from .store import RedisStore

__all__ = ["RedisCron", "dump_request", "load_request"]


def dump_request(request: EnqueueRequest) -> dict[str, Any]:
    """An enqueue request as JSON-safe fields (a fire's in-flight record)."""
    return {
        "name": request.name,
        "input": request.input,
        "queue": request.queue,
        "idempotency_key": request.idempotency_key,
        "max_attempts": request.max_attempts,
        "priority": request.priority,
        "run_at": None if request.run_at is None else to_us(request.run_at),
        "delay_ms": request.delay_ms,
        "tenant_id": request.tenant_id,
        "id": str(request.id),
        "run_id": None if request.run_id is None else str(request.run_id),
        "enqueued_by": request.enqueued_by,
        "traceparent": request.traceparent,
        "concurrency_key": request.concurrency_key,
        "concurrency_limit": request.concurrency_limit,
    }


def load_request(fields: dict[str, Any]) -> EnqueueRequest:
    """The request :func:`dump_request` wrote."""
    return EnqueueRequest(
        name=fields["name"],
        input=fields["input"],
        queue=fields["queue"],
        idempotency_key=fields["idempotency_key"],
        max_attempts=fields["max_attempts"],
        priority=fields["priority"],
        run_at=None if fields["run_at"] is None else from_us(fields["run_at"]),
        delay_ms=fields["delay_ms"],
        tenant_id=fields["tenant_id"],
        id=UUID(fields["id"]),
        run_id=None if fields["run_id"] is None else UUID(fields["run_id"]),
        enqueued_by=fields["enqueued_by"],
        traceparent=fields["traceparent"],
        concurrency_key=fields["concurrency_key"],
        concurrency_limit=fields["concurrency_limit"],
    )


def _paused(flat: Sequence[str]) -> list[PausedName]:
    return [PausedName(name, from_us(at)) for name, at in sorted(pairs(flat).items())]


class RedisCron:
    """The Redis driver's cron store (``driver.cron``)."""

    def __init__(
        self,
        store: RedisStore,
        enqueue_many: Callable[[Sequence[EnqueueRequest]], list[Enqueued]],
        leases: RedisLeases,
    ) -> None:
        self.store = store
        self._enqueue_many = enqueue_many
        self._leases = leases

    def task_sync(self, tasks: Sequence[TaskArm]) -> dict[str, datetime]:
        """Answer each task's watermark, arming the new ones (schedules updated).

        Fires a scheduler left unfinished are finished first.
        """
        self._finish_fires()
        args: list[Any] = []
        for task in tasks:
            args += [
                task.name,
                task.cron,
                task.tz,
                to_us(task.watermark),
                opt(None if task.next_run_at is None else to_us(task.next_run_at)),
            ]
        if not args:
            return {}
        marks = self.store.fleet("sync", *args)
        return {t.name: from_us(m) for t, m in zip(tasks, marks, strict=True)}

    def _finish_fires(self) -> None:
        store = self.store
        for name, marker in store.conn().hgetall(store.layout.fleet + "cf").items():
            requests = [load_request(f) for f in json.loads(marker)]
            self._enqueue_many(requests)
            store.fleet("fired", name, marker)

    def task_fire(self, fire: TaskFire) -> FireResult | None:
        """Fire one occurrence; ``None`` when another fire moved the watermark."""
        jobs = [r if r.id is not None else replace(r, id=uuid7()) for r in fire.jobs]
        marker = json.dumps([dump_request(r) for r in jobs], separators=(",", ":"))
        landed = self.store.fleet(
            "fire",
            fire.name,
            to_us(fire.expected),
            to_us(fire.watermark),
            to_us(fire.occurrence),
            opt(None if fire.next_run_at is None else to_us(fire.next_run_at)),
            marker,
        )
        if not landed:
            return None
        answers = self._enqueue_many(jobs)
        self.store.fleet("fired", fire.name, marker)
        inserted = [a.id for a in answers if not a.deduped]
        return FireResult(inserted, len(answers) - len(inserted))

    def task_list(self) -> list[TaskRecord]:
        """Every stored task with its pause, sorted by name."""
        listed = []
        for flat in self.store.fleet("tasks"):
            name, fields = flat[0], pairs(flat[1:])

            def at(field: str, fields: dict[str, str] = fields) -> datetime | None:
                value = fields.get(field) or None
                return None if value is None else from_us(value)

            listed.append(
                TaskRecord(
                    name=name,
                    cron=fields["cron"],
                    tz=fields["tz"],
                    watermark=from_us(fields["wm"]),
                    last_occurrence=at("last"),
                    fired_at=at("fired"),
                    next_run_at=at("next"),
                    paused_at=at("paused"),
                )
            )
        return sorted(listed, key=lambda task: task.name)

    def leader_acquire(self, key: str, holder: str, *, ttl_ms: int) -> bool:
        """Take or renew the lease ``key``; True if ``holder`` now leads."""
        return self._leases.lead(key, holder, ttl_ms)

    def leader_release(self, key: str, holder: str) -> None:
        """Give up the lease ``key`` if ``holder`` holds it."""
        self._leases.resign(key, holder)

    def pause_task(self, task: str) -> list[PausedName]:
        """Pause a cron task (the first pause's time is kept)."""
        return _paused(self.store.fleet("pause", task))

    def resume_task(self, task: str) -> list[PausedName]:
        """Resume a cron task; answers the paused tasks after the write."""
        return _paused(self.store.fleet("resume", task))

    def paused_tasks(self) -> list[PausedName]:
        """Paused tasks sorted by name (code-point order)."""
        return _paused(self.store.fleet("paused"))
