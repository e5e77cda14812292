"""``BaseDriver``: what every driver shares, written once.

A driver is a subclass that stores job rows its own way and declares the
rest (like Django's ``BaseDatabaseWrapper``):

- ``name`` and ``features`` (a :class:`~.features.DriverFeatures`), class
  attributes, so the system checks read them before any driver is built;
- ``settings_keys``: the ``ULTIMATE_JOBS`` keys the driver reads beyond the
  common ones (each with its :class:`~django_ultimate_jobs.conf.Kind`);
  :meth:`from_settings` builds the driver from the parsed settings;
- the role objects ``steps``, ``events``, ``leases``, ``cron`` and
  ``maintenance``, set by the subclass's ``__init__``; ``sessions``,
  ``alias`` and ``clock`` have defaults for a store held in this process.

What the contract's verbs share is here: one-row verbs answered by their
batch verbs, ``now()`` from the clock, no wake listener, no slot hand-over.
The contract itself is :class:`~.base.JobDriver`; the conformance suite
(``django_ultimate_jobs.testing.conformance``) proves a driver keeps it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, ClassVar, Self
from uuid import UUID

from ..clock import Clock, system_clock
from .base import (
    AckRequest,
    ClaimedJob,
    ClaimIdentity,
    Enqueued,
    EnqueueRequest,
    Handover,
    Renewed,
    WakeCallback,
)
from .features import DriverFeatures
from .sessions import Connectivity, LocalConnectivity, WakeListener

if TYPE_CHECKING:
    from ..conf import JobsSettings, Kind
    from .cron import CronStore
    from .leases import LeaseStore
    from .maintenance import MaintenanceStore
    from .steps import EventStore, StepStore

__all__ = ["BaseDriver"]


class BaseDriver(ABC):
    """The shared defaults of every driver (see the module docstring)."""

    name: ClassVar[str] = "base"
    features: ClassVar[DriverFeatures] = DriverFeatures()
    settings_keys: ClassVar[Mapping[str, Kind]] = {}
    """``ULTIMATE_JOBS`` keys this driver reads beyond the common ones, each
    with how it is checked; any other unknown key is still refused. The
    parsed values reach :meth:`from_settings` in ``settings.driver_options``."""

    alias: str | None = None
    clock: Clock = system_clock
    sessions: Connectivity = LocalConnectivity()
    steps: StepStore
    events: EventStore
    leases: LeaseStore
    cron: CronStore
    maintenance: MaintenanceStore

    @classmethod
    def from_settings(cls, settings: JobsSettings) -> Self:
        """The driver ``ULTIMATE_JOBS`` describes (default: ``cls()``)."""
        return cls()

    def now(self) -> datetime:
        """The clock's instant in UTC (a store in this process has no other)."""
        return self.clock.now().astimezone(UTC)

    def wake_listener(
        self,
        on_wake: WakeCallback,
        *,
        worker_id: str,
        on_live: Callable[[bool], None] | None = None,
    ) -> WakeListener | None:
        """``None``: no listener (``features.wake_listener`` is False)."""
        return None

    @abstractmethod
    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """Insert many jobs; answers in request order (see ``JobDriver``)."""

    @abstractmethod
    def ack_many(self, requests: Sequence[AckRequest]) -> list[bool]:
        """Settle many successful attempts; answers in order (see ``JobDriver``)."""

    @abstractmethod
    def heartbeat_many(
        self, held: Iterable[tuple[UUID, ClaimIdentity | None]], *, visibility_ms: int
    ) -> Renewed:
        """Extend many leases; answers the ids that landed (see ``JobDriver``)."""

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        """Insert one job: :meth:`enqueue_many` of one."""
        return self.enqueue_many([request])[0]

    def ack(self, request: AckRequest) -> bool:
        """Settle one successful attempt: :meth:`ack_many` of one."""
        return self.ack_many([request])[0]

    def ack_many_handover(
        self, requests: Sequence[AckRequest], handover: Handover | None
    ) -> tuple[list[bool], list[ClaimedJob]]:
        """:meth:`ack_many`, claiming no heir (``features.slot_handover`` is False)."""
        return self.ack_many(requests), []

    def heartbeat(
        self, job_id: UUID, *, visibility_ms: int, identity: ClaimIdentity | None
    ) -> bool:
        """Extend one lease: :meth:`heartbeat_many` of one. False: stop the run."""
        landed = self.heartbeat_many([(job_id, identity)], visibility_ms=visibility_ms)
        return job_id in landed

    def close(self) -> None:  # noqa: B027  (a default, not an abstract verb)
        """Release what the driver holds (nothing by default)."""
