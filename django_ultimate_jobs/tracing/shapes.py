"""The fields the spans read, as protocols.

This package sits below the drivers (it depends on the settings only), so
it names the enqueue request and the claimed job by the fields it reads;
``drivers.base.EnqueueRequest`` and ``ClaimedJob`` have them.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar
from uuid import UUID

__all__ = ["Claimed", "Request", "RequestT", "Sent"]


class Request(Protocol):
    """A job about to be written (``EnqueueRequest``, a frozen dataclass)."""

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def traceparent(self) -> str | None: ...


RequestT = TypeVar("RequestT", bound=Request)


class Sent(Protocol):
    """What an enqueue answered (``Enqueued``)."""

    @property
    def id(self) -> UUID: ...

    @property
    def deduped(self) -> bool: ...


class Claimed(Protocol):
    """A claimed job (``ClaimedJob``)."""

    @property
    def id(self) -> UUID: ...

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def run_id(self) -> Any: ...

    @property
    def attempt(self) -> int: ...

    @property
    def max_attempts(self) -> int: ...

    @property
    def claims(self) -> int: ...

    @property
    def claimed_by(self) -> str: ...

    @property
    def enqueued_by(self) -> str | None: ...

    @property
    def traceparent(self) -> str | None: ...
