"""``partitioned(...)`` declarations and the maintenance that keeps them.

An app range-partitions one of its own high-volume tables by a date or
datetime column (the parent table is created by
:class:`~.operations.CreatePartitionedModel` in its migration) and declares
it with :func:`partitioned`. :func:`maintain_partitions` then creates the
current partition plus ``ahead`` future ones, and drops every partition
that ended more than ``retain`` periods before the current one began.

Periods are UTC days, ISO weeks (Monday) or calendar months. A partition
this module manages is named ``<table>_pYYYYMMDD`` after the first day it
holds; partitions under other names (a DEFAULT partition, say) are never
touched. Every DDL statement runs in its own transaction under
``SET LOCAL lock_timeout`` (``PARTITION_LOCK_TIMEOUT``): creating or
dropping a partition takes an ACCESS EXCLUSIVE lock on the parent, and
queueing behind a long transaction would block every reader queued after
it. A timeout raises ``X_DB_LOCK_TIMEOUT`` (retryable) and leaves what was
done in place; a rerun picks up from there.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from django.db import OperationalError, connections, models, transaction

from ..conf import jobs_settings
from ..drivers.postgres.sql import query
from ..durations import is_count
from ..errors import DbLockTimeout, PartitionInvalid
from .instant import maintenance_now, require_aware
from .periods import INTERVALS, Interval, period_start, shift

__all__ = [
    "Partition",
    "PartitionPlan",
    "PartitionSpec",
    "maintain_partitions",
    "partitioned",
    "plan_partitions",
    "registered_partitions",
]

logger = logging.getLogger("django_ultimate_jobs")

_POSTGRES_NAME_MAX = 63
_SUFFIX = "_pYYYYMMDD"
_LOCK_NOT_AVAILABLE = "55P03"


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionSpec:
    """One ``partitioned(...)`` declaration."""

    model: type[models.Model]
    by: str
    column: str
    interval: Interval
    ahead: int
    retain: int
    dates: bool
    """The key is a DateField (bounds are dates, not instants)."""

    @property
    def table(self) -> str:
        """The parent table's name."""
        return self.model._meta.db_table

    def partition_name(self, start: date) -> str:
        """The name of the partition whose period starts on ``start``."""
        return f"{self.table}_p{start:%Y%m%d}"


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition: its name and its period ``[start, end)``."""

    name: str
    start: date
    end: date


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionPlan:
    """What one maintenance pass does (did, unless a dry run) to one table."""

    table: str
    create: list[Partition] = field(default_factory=list)
    drop: list[Partition] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        """Whether the pass creates or drops anything."""
        return bool(self.create or self.drop)


_lock = threading.Lock()
_specs: dict[str, PartitionSpec] = {}


def partitioned(
    model: type[models.Model],
    *,
    by: str,
    interval: Interval = "month",
    ahead: int = 3,
    retain: int = 12,
) -> type[models.Model]:
    """Declare ``model``'s table range-partitioned by ``by``, for maintenance.

    Call it after the model class (in ``models.py``); it returns the model.

    Args:
        model: a concrete model whose table is partitioned by range on
            ``by`` (see :class:`CreatePartitionedModel`).
        by: the name of a ``DateField`` or ``DateTimeField``: the key.
        interval: one partition per ``"day"``, ``"week"`` or ``"month"``
            (UTC; weeks start on Monday).
        ahead: partitions kept ready past the current one (0 or more).
        retain: past periods kept; older partitions are dropped (1 or more).

    Raises:
        PartitionInvalid: listing every problem, before anything is kept.
    """
    spec = _checked_spec(model, by, interval, ahead, retain)
    key = model._meta.label_lower
    with _lock:
        existing = _specs.get(key)
        # A re-import (the autoreloader) repeats the same declaration.
        if existing is not None and existing != spec:
            raise PartitionInvalid(
                f"{model._meta.label} is declared partitioned twice, differently",
                meta={"model": model._meta.label},
            )
        _specs[key] = spec
    return model


def registered_partitions() -> list[PartitionSpec]:
    """Every declaration, sorted by table name."""
    with _lock:
        return sorted(_specs.values(), key=lambda spec: spec.table)


def plan_partitions(
    spec: PartitionSpec,
    now: datetime,
    existing: set[str],
    *,
    backfill_from: datetime | None = None,
) -> PartitionPlan:
    """The partitions to create and drop for ``spec`` as of ``now`` (pure).

    With ``backfill_from`` every period back to the one holding it is
    created too, and nothing is dropped (run it before copying old rows in).
    """
    current = period_start(now.astimezone(UTC).date(), spec.interval)
    first = current
    if backfill_from is not None:
        first = min(
            first, period_start(backfill_from.astimezone(UTC).date(), spec.interval)
        )
    wanted: list[Partition] = []
    start = first
    last = shift(current, spec.interval, spec.ahead)
    while start <= last:
        wanted.append(_partition(spec, start))
        start = shift(start, spec.interval, 1)
    create = [p for p in wanted if p.name not in existing]
    drop: list[Partition] = []
    if backfill_from is None:
        oldest_kept = shift(current, spec.interval, -spec.retain)
        pattern = re.compile(rf"{re.escape(spec.table)}_p(\d{{8}})")
        for name in sorted(existing):
            match = pattern.fullmatch(name)
            if match is None:
                continue
            try:
                begins = datetime.strptime(match.group(1), "%Y%m%d").date()
            except ValueError:
                continue
            if begins < oldest_kept:
                drop.append(_partition(spec, begins))
    return PartitionPlan(table=spec.table, create=create, drop=drop)


def maintain_partitions(
    now: datetime | None = None,
    *,
    backfill_from: datetime | None = None,
    dry_run: bool = False,
    specs: list[PartitionSpec] | None = None,
) -> list[PartitionPlan]:
    """Create and drop partitions of every declared table as of ``now``.

    Idempotent: a second pass at the same instant plans nothing.

    Args:
        now: the instant to plan for (default: the driver's clock).
        backfill_from: also create every period back to this instant, and
            drop nothing.
        dry_run: plan only; no DDL.
        specs: the declarations to maintain (default: all of them).

    Raises:
        JobInputInvalid: ``now`` or ``backfill_from`` has no timezone.
        PartitionInvalid: a declared table is missing or not range-partitioned.
        DbLockTimeout: a DDL statement waited past PARTITION_LOCK_TIMEOUT.
    """
    require_aware(now)
    require_aware(backfill_from, "backfill_from")
    instant = now if now is not None else maintenance_now()
    plans = []
    for spec in specs if specs is not None else registered_partitions():
        plan = plan_partitions(
            spec, instant, existing_partitions(spec), backfill_from=backfill_from
        )
        if not dry_run:
            apply_plan(spec, plan)
        plans.append(plan)
    return plans


def existing_partitions(spec: PartitionSpec) -> set[str]:
    """The names of ``spec``'s table's partitions.

    Raises:
        PartitionInvalid: the table is missing or not range-partitioned.
    """
    using = _database(spec)
    with connections[using].cursor() as cursor:
        qualified = connections[using].ops.quote_name(spec.table)
        cursor.execute(query("partition_list", "maintenance.sql"), {"table": qualified})
        rows = cursor.fetchall()
    if not rows or rows[0][0] != "r":
        raise PartitionInvalid(
            f"table {spec.table} is not partitioned by range",
            fix="create it with CreatePartitionedModel in the app's migration, then migrate",
            meta={"table": spec.table},
        )
    if rows[0][1] != spec.column:
        raise PartitionInvalid(
            f"table {spec.table} is partitioned on another key than "
            f"column {spec.column!r} (by={spec.by!r})",
            fix="declare partitioned(..., by=...) with the field the table is partitioned on",
            meta={"table": spec.table},
        )
    return {name for _, _, name in rows if name is not None}


def apply_plan(spec: PartitionSpec, plan: PartitionPlan) -> None:
    """Run ``plan``'s DDL, one statement per transaction under lock_timeout."""
    using = _database(spec)
    quote = connections[using].ops.quote_name
    for partition in plan.create:
        # Identifiers are quoted and bounds are dates this module formatted:
        # DDL cannot take bind parameters for either.
        _ddl(
            using,
            f"CREATE TABLE IF NOT EXISTS {quote(partition.name)} "
            f"PARTITION OF {quote(spec.table)} FOR VALUES "
            f"FROM ({_bound(spec, partition.start)}) TO ({_bound(spec, partition.end)})",
        )
        logger.info(
            "jobs.partitions.created",
            extra={"table": spec.table, "partition": partition.name},
        )
    for partition in plan.drop:
        _ddl(using, f"DROP TABLE IF EXISTS {quote(partition.name)}")
        logger.info(
            "jobs.partitions.dropped",
            extra={"table": spec.table, "partition": partition.name},
        )


def _ddl(using: str, statement: str) -> None:
    timeout_ms = jobs_settings().partition_lock_timeout_ms
    try:
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = {int(timeout_ms)}")
            cursor.execute(statement)
    except OperationalError as error:
        if getattr(error.__cause__, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
            raise
        raise DbLockTimeout(
            f"partition maintenance waited more than {timeout_ms} ms for a lock",
            meta={"lock_timeout_ms": timeout_ms},
        ) from error


def _bound(spec: PartitionSpec, day: date) -> str:
    return f"'{day.isoformat()}'" if spec.dates else f"'{day.isoformat()} 00:00:00+00'"


def _partition(spec: PartitionSpec, start: date) -> Partition:
    return Partition(spec.partition_name(start), start, shift(start, spec.interval, 1))


def _database(spec: PartitionSpec) -> str:
    from django.db import router

    return router.db_for_write(spec.model) or "default"


def _checked_spec(
    model: Any, by: Any, interval: Any, ahead: Any, retain: Any
) -> PartitionSpec:
    if not (isinstance(model, type) and issubclass(model, models.Model)):
        raise PartitionInvalid(f"partitioned() needs a model class, not {model!r}")
    label = model._meta.label
    problems: list[str] = []
    if model._meta.abstract or model._meta.proxy:
        problems.append(f"{label} is abstract or a proxy: it has no table of its own")
    key: Any = None
    try:
        key = model._meta.get_field(by) if isinstance(by, str) else None
    except Exception:
        key = None
    if not isinstance(key, models.DateField):
        problems.append(f"by={by!r} must name a DateField or DateTimeField of {label}")
    if interval not in INTERVALS:
        problems.append(f"interval must be one of {INTERVALS}, not {interval!r}")
    if not is_count(ahead, minimum=0) or isinstance(ahead, float):
        problems.append(f"ahead must be a whole number of 0 or more, not {ahead!r}")
    if not is_count(retain, minimum=1) or isinstance(retain, float):
        problems.append(f"retain must be a whole number of 1 or more, not {retain!r}")
    if len(model._meta.db_table) + len(_SUFFIX) > _POSTGRES_NAME_MAX:
        problems.append(
            f"table name {model._meta.db_table!r} leaves no room for the partition "
            f"suffix {_SUFFIX} within PostgreSQL's {_POSTGRES_NAME_MAX} characters"
        )
    if problems:
        raise PartitionInvalid(
            f"partitioned({label}) is invalid: " + "; ".join(problems),
            meta={"model": label, "problems": problems},
        )
    assert key is not None
    return PartitionSpec(
        model=model,
        by=by,
        column=key.column,
        interval=interval,
        ahead=int(ahead),
        retain=int(retain),
        dates=not isinstance(key, models.DateTimeField),
    )
