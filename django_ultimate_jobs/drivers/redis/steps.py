"""Steps and events on Redis (``driver.steps``, ``driver.events``).

A run's steps live in its queue's slot beside the job row (``st:<run>``),
so a fenced put is one script that checks the claim and writes the step.
Events live in the events' slot (``{e}``, ``lua/events.lua``) with one
publish sequence: a wait's snapshot is that sequence when it began, and
the events it owns are the ones published after. A run parked on an event
is listed under the event's name; a publish stores the event, then makes
each listed run due in its own queue's slot. Those are separate scripts:
the event is stored first, and a wait parks before it checks for events
(``wake_waiting``), so whichever comes second finds the other.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ...errors import JobLeaseLost
from ...ids import uuid7
from ..steps import (
    EventListing,
    EventRecord,
    MatchedWait,
    StepFence,
    StepRecord,
    WaitMark,
)
from .rows import from_us, opt, pairs, to_us

if TYPE_CHECKING:
    from datetime import datetime

    from .store import RedisStore

__all__ = ["RedisEvents", "RedisSteps"]


def _us(instant: datetime | None) -> int | None:
    return None if instant is None else to_us(instant)


def _time(value: int | None) -> datetime | None:
    return None if value is None else from_us(value)


def encode(record: StepRecord) -> tuple[str, str]:
    """The step as stored: its start (us) and its JSON (times in us)."""
    body = {
        "status": record.status,
        "output": record.output,
        "error": record.error,
        "completed_at": _us(record.completed_at),
        "wake_at": _us(record.wake_at),
        "event": record.event,
        "correlation_key": record.correlation_key,
        "snapshot": record.snapshot,
        "cursor_at": _us(record.cursor_at),
        "cursor_id": None if record.cursor_id is None else str(record.cursor_id),
    }
    return str(to_us(record.started_at)), json.dumps(body, allow_nan=False)


def decode(run_id: UUID, name: str, value: str) -> StepRecord:
    """A stored step value (``attempts|started|json``) as a record."""
    attempts, started, text = value.split("|", 2)
    body = json.loads(text)
    return StepRecord(
        run_id=run_id,
        name=name,
        status=body["status"],
        started_at=from_us(started),
        output=body["output"],
        error=body["error"],
        attempts=int(attempts),
        completed_at=_time(body["completed_at"]),
        wake_at=_time(body["wake_at"]),
        event=body["event"],
        correlation_key=body["correlation_key"],
        snapshot=body["snapshot"],
        cursor_at=_time(body["cursor_at"]),
        cursor_id=None if body["cursor_id"] is None else UUID(body["cursor_id"]),
    )


class RedisSteps:
    """Step records of runs, in their queue's slot."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store

    def list(self, run_id: UUID) -> dict[str, StepRecord]:
        """Every step of ``run_id`` by name (one script)."""
        queue = self.store.locate_run(run_id)
        if queue is None:
            return {}
        flat = self.store.run(
            "steps", self.store.layout.queue(queue), ["list", str(run_id)]
        )
        return {
            name: decode(run_id, name, value) for name, value in pairs(flat).items()
        }

    def put(self, record: StepRecord, fence: StepFence | None) -> None:
        """Write ``record`` for the attempt behind ``fence`` (one script).

        Raises:
            JobLeaseLost: the attempt no longer holds the job; nothing written.
        """
        store = self.store
        started, text = encode(record)
        if fence is not None:
            queue = store.locate(fence.job_id)
            args = [
                "put",
                str(fence.job_id),
                fence.identity.worker_id,
                fence.identity.claim,
            ]
        else:
            queue = store.locate_run(record.run_id)
            args = ["put", "", "", ""]
        landed = queue is not None and store.run(
            "steps",
            store.layout.queue(queue),
            [*args, str(record.run_id), record.name, started, text],
        )
        if not landed:
            raise JobLeaseLost(
                f"step {record.name!r} was not recorded: this attempt no "
                "longer holds the job (cancelled or re-claimed)"
            )
        assert queue is not None
        store.runs.put(record.run_id, queue)
        if record.status == "waiting" and record.event is not None and fence:
            # Listed under the event, so a publish finds the parked run.
            entry = f"{queue}\n{fence.job_id}\n{record.name}"
            store.run("events", store.layout.events, ["wait", record.event, entry])
        elif record.status == "completed" and record.cursor_id is not None:
            # Listed under the event it took: the events page's matched waits.
            taken = f"{record.run_id}\n{record.name}"
            store.run(
                "events", store.layout.events, ["took", str(record.cursor_id), taken]
            )


class RedisEvents:
    """Published events and the waits that match them."""

    def __init__(self, store: RedisStore, steps: RedisSteps) -> None:
        self.store = store
        self.steps = steps

    def _events(self, verb: str, *args: Any) -> Any:
        store = self.store
        return store.run("events", store.layout.events, [verb, store.now_arg(), *args])

    def mark(self) -> WaitMark:
        """A wait begins after the last published event."""
        seq, now = self._events("mark")
        return WaitMark(str(seq), from_us(now))

    def publish(
        self, name: str, payload: Any, key: str | None, ttl_ms: int
    ) -> EventRecord:
        """Store an event, then make the suspended runs waiting on it due now."""
        text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        event_id = uuid7()
        answer = self._events("publish", str(event_id), name, text, opt(key), ttl_ms)
        _seq, published, expires, *waiters = answer
        store = self.store
        for entry in waiters:
            queue, job_id, step = entry.split("\n", 2)
            woke = store.run(
                "steps",
                store.layout.queue(queue),
                [
                    "wake",
                    store.now_arg(),
                    store.layout.channel,
                    job_id,
                    step,
                    name,
                    opt(key),
                ],
            )
            if woke == "stale":
                store.run("events", store.layout.events, ["unwait", name, entry])
        return EventRecord(
            id=event_id,
            name=name,
            payload=json.loads(text),
            correlation_key=key,
            published_at=from_us(published),
            expires_at=from_us(expires),
        )

    def find(self, step: StepRecord) -> EventRecord | None:
        """The first event (publish order) the waiting ``step`` matches."""
        found = self._events(
            "find",
            step.event or "",
            opt(step.correlation_key),
            int(step.snapshot or 0),
            to_us(step.started_at),
            opt(_us(step.cursor_at)),
            opt(None if step.cursor_id is None else str(step.cursor_id)),
        )
        if not found:
            return None
        event_id, payload, key, published, expires = found
        return EventRecord(
            id=UUID(event_id),
            name=step.event or "",
            payload=json.loads(payload),
            correlation_key=key or None,
            published_at=from_us(published),
            expires_at=from_us(expires),
        )

    def wake_waiting(self, job_id: UUID, step: str) -> bool:
        """Make a job parked on ``step`` due now if an event already matches."""
        store = self.store
        queue = store.locate(job_id)
        if queue is None:
            return False
        prefix = store.layout.queue(queue)
        value = store.run(
            "steps", prefix, ["waiting", store.now_arg(), str(job_id), step]
        )
        if not value:
            return False
        waiting = decode(job_id, step, value)
        if waiting.status != "waiting" or waiting.event is None:
            return False
        event = self.find(waiting)
        if event is None:
            return False
        woke = store.run(
            "steps",
            prefix,
            [
                "wake",
                store.now_arg(),
                store.layout.channel,
                str(job_id),
                step,
                waiting.event,
                opt(event.correlation_key),
            ],
        )
        return bool(woke == "woke")

    def purge_expired(self) -> int:
        """Delete expired events; answers how many."""
        return self.purge(None, limit=10_000_000)

    def listing(self, *, name: str | None, limit: int) -> list[EventListing]:
        """The newest ``limit`` events (of ``name``), each with its matched waits."""
        listed = []
        for event_id, event, payload, key, published, expires, took in self._events(
            "list", opt(name), limit
        ):
            waits = []
            for entry in took:
                run_id, step = entry.split("\n", 1)
                waits.append(MatchedWait(UUID(run_id), step))
            record = EventRecord(
                id=UUID(event_id),
                name=event,
                payload=json.loads(payload),
                correlation_key=key or None,
                published_at=from_us(published),
                expires_at=from_us(expires),
            )
            order = sorted(waits, key=lambda w: (str(w.run_id), w.step))
            listed.append(EventListing(record, tuple(order)))
        return listed

    def purge(self, now: datetime | None, *, limit: int) -> int:
        """Delete up to ``limit`` events expired at ``now`` (``None``: the store's now)."""
        store = self.store
        moment = store.now_arg() if now is None else str(to_us(now))
        return int(store.run("events", store.layout.events, ["purge", moment, limit]))
