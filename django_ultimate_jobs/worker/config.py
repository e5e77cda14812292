"""The knobs of one worker process, from settings plus command-line overrides."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..conf import MAX_CLAIM_BATCH, MAX_CONCURRENCY, jobs_settings
from ..durations import is_count
from ..errors import SettingsInvalid
from ..validation import NAME_RULE, name_problem
from .limits import LimitConfig

__all__ = ["WorkerConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerConfig:
    """Every number is refused, not clamped, when it is not a finite count
    (or, for ``concurrency`` and ``claim_batch``, when it passes 1,000)."""

    queues: tuple[str, ...]
    concurrency: int = 8
    visibility_ms: int = 30_000
    heartbeat_ms: int = 10_000
    poll_ms: int = 250
    idle_max_ms: int = 2_000
    woken_idle_max_ms: int = 5_000
    claim_batch: int = 64
    shutdown_deadline_ms: int = 25_000
    connect_wait_ms: int = 30_000
    """With ``burst``: how long the worker waits for storage it has never
    reached before it gives up (``BURST_CONNECT_WAIT``)."""
    stuck_slots_max: int = 4
    unknown_park_ms: int = 30_000
    max_jobs: int | None = None
    burst: bool = False
    wake: bool = True
    limits: LimitConfig = field(default_factory=LimitConfig)
    """In-process limits (``ULTIMATE_JOBS["LIMITS"]``, worker/limits.py)."""
    scheduler: bool = False
    """Run the cron scheduler role in this process (``runjobs`` does, unless
    ``--no-scheduler``); it starts only if a task is declared."""

    def __post_init__(self) -> None:
        if not self.queues:
            raise SettingsInvalid("a worker needs at least one queue name")
        for queue in self.queues:
            problem = name_problem(queue)
            if problem is not None:
                raise SettingsInvalid(
                    f"the worker queue {queue!r:.80} {problem}",
                    fix=f"name each queue as {NAME_RULE}",
                )
        for name in (
            "concurrency",
            "visibility_ms",
            "heartbeat_ms",
            "poll_ms",
            "idle_max_ms",
            "woken_idle_max_ms",
            "claim_batch",
            "shutdown_deadline_ms",
            "connect_wait_ms",
            "stuck_slots_max",
            "unknown_park_ms",
        ):
            _require_count(name, getattr(self, name))
        _require_at_most(
            "concurrency",
            self.concurrency,
            MAX_CONCURRENCY,
            fix=f"run at most {MAX_CONCURRENCY} slots per process; for more, "
            "run more processes (runjobs --processes N) or hosts",
        )
        _require_at_most(
            "claim_batch",
            self.claim_batch,
            MAX_CLAIM_BATCH,
            fix=f"set ULTIMATE_JOBS['CLAIM_BATCH'] to {MAX_CLAIM_BATCH} or less",
        )
        if self.max_jobs is not None:
            _require_count("max_jobs", self.max_jobs)
        if self.heartbeat_ms >= self.visibility_ms:
            raise SettingsInvalid(
                "the heartbeat must be shorter than the visibility timeout"
            )

    @classmethod
    def from_settings(cls, **overrides: Any) -> WorkerConfig:
        """Build from ``ULTIMATE_JOBS``; ``None`` overrides are ignored."""
        settings = jobs_settings()
        config = cls(
            queues=settings.queues,
            concurrency=settings.concurrency,
            visibility_ms=settings.visibility_timeout_ms,
            heartbeat_ms=settings.heartbeat_interval_ms,
            poll_ms=settings.poll_interval_ms,
            idle_max_ms=settings.idle_poll_max_ms,
            woken_idle_max_ms=settings.woken_idle_poll_max_ms,
            claim_batch=settings.claim_batch,
            shutdown_deadline_ms=settings.shutdown_deadline_ms,
            connect_wait_ms=settings.burst_connect_wait_ms,
            stuck_slots_max=settings.stuck_slots_max,
            unknown_park_ms=settings.unknown_job_park_ms,
            wake=settings.wake,
            limits=settings.limits,
        )
        given = {key: value for key, value in overrides.items() if value is not None}
        return replace(config, **given) if given else config


def _require_count(name: str, value: Any) -> None:
    if not is_count(value):
        raise SettingsInvalid(
            f"worker option {name} must be a whole number >= 1, got {value!r}"
        )


def _require_at_most(name: str, value: int, maximum: int, *, fix: str) -> None:
    if value > maximum:
        raise SettingsInvalid(
            f"worker option {name} must be at most {maximum}, got {value!r}",
            fix=fix,
            meta={name: value, "maximum": maximum},
        )
