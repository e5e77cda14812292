"""What a driver can do: declared capability flags (``driver.features``).

A caller that needs to know whether a driver can do something reads one of
these flags; it never probes the driver for an attribute, nor asks which
class it is. Like Django's ``DatabaseFeatures``: each driver class declares
one frozen :class:`DriverFeatures` (a class attribute, so the system checks
can read it before any driver is built).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DriverFeatures"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DriverFeatures:
    """Capability flags; the defaults describe a store with none of them."""

    wake_listener: bool = False
    """``driver.wake_listener()`` answers a listener that turns the store's
    notifications into wake hints (LISTEN/NOTIFY on PostgreSQL); without
    it a worker polls (and in-process writes wake it through ``wake_hub``)."""
    joins_caller_transaction: bool = False
    """An enqueue inside ``transaction.atomic()`` on ``driver.alias``
    commits or rolls back with the caller (else only the outbox gives that,
    SPEC §1/§7)."""
    atomic_steps: bool = False
    """``ctx.step.run(..., atomic=True)`` works: a step's record is written in
    the caller's Django transaction on ``driver.alias``."""
    transactional_events: bool = False
    """``publish_event()`` inside ``transaction.atomic()`` on ``driver.alias``
    commits or rolls back with the caller."""
    slot_handover: bool = False
    """``ack_many_handover()`` hands a settled capped row's slot to its key's
    next ready row in the same write (else it settles like ``ack_many``)."""
    orm_tables: bool = False
    """The rows are the Django models of this app (``models.py``) in the
    database ``driver.alias``: admin pages that read models show them."""
    django_database: bool = False
    """The rows live in the Django database named by
    ``ULTIMATE_JOBS["DATABASE"]``: the system checks look at that alias
    (defined, PostgreSQL, not behind a transaction pooler) and the jobs and
    outbox databases are compared."""
    shared_across_processes: bool = False
    """Several processes (``runjobs``, web servers, other hosts) see the same
    rows; without it only this process does (``runjobs`` is refused)."""
