"""``ledger(...)``: a job that writes one balanced posting, once.

The input is ``{"key": str, "entries": [{"account": str, "amount":
{"minor": int, "currency": str}}, ...], "org_id": optional}``. It is
checked at enqueue and again in the job before anything is written; the
lines are then written in one atomic step through the book.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..drivers.base import DEFAULT_QUEUE, Enqueued
from ..jobs import BoundEnqueue, JobHandle, _call_deriver, _checked_text, job
from ..retry import Retry
from .book import ModelBook
from .posting import Posting, assert_balanced_posting

__all__ = ["LedgerHandle", "ledger"]

Tenant = Callable[[Mapping[str, Any]], str]
FINGERPRINT_CHARS = 16
"""Fingerprint characters in the job's idempotency key (``<key>#<fp>``)."""


def _default_tenant(posting: Mapping[str, Any]) -> str:
    org_id = posting.get("org_id")
    return "none" if org_id is None else str(org_id)


class LedgerHandle:
    """A declared ledger: enqueue postings, read balances. Built by :func:`ledger`.

    ``balances()`` and ``balance()`` are the book's (:class:`ModelBook`).
    """

    def __init__(self, *, name: str, tenant: Tenant, book: ModelBook) -> None:
        self.name = name
        self.tenant = tenant
        self.book = book
        self.job: JobHandle[dict[str, Any]] = None  # type: ignore[assignment]
        # The book's one query helper, reachable from the handle.
        self.balances = book.balances
        self.balance = book.balance

    def __repr__(self) -> str:
        return f"<LedgerHandle {self.name} {self.book!r}>"

    def check(self, given: Mapping[str, Any]) -> tuple[Posting, str]:
        """Check a posting (see :func:`assert_balanced_posting`); return it and its tenant."""
        posting = assert_balanced_posting(given)
        tenant = _call_deriver(self.name, "tenant", self.tenant, posting.to_json())
        return posting, _checked_text(self.name, "tenant", tenant)

    def enqueue(
        self,
        *,
        key: str,
        entries: Sequence[Mapping[str, Any]],
        org_id: str | int | None = None,
    ) -> Enqueued:
        """Enqueue the posting: checked first, nothing written when refused.

        ``amount`` may be a :class:`Money` or its JSON form. The same
        posting enqueued again while its job is live is deduplicated onto
        it; a posting under a stored key with other lines fails its job
        with ``X_LEDGER_POSTING_CONFLICT``.

        Raises:
            LedgerEntryInvalid: see :func:`assert_balanced_posting`.
            LedgerUnbalanced: some currency does not sum to zero.
        """
        return self.using().enqueue(key=key, entries=entries, org_id=org_id)

    def enqueue_many(self, postings: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
        """Enqueue many postings in one round trip; every one is checked first."""
        return self.using().enqueue_many(postings)

    def using(self, **options: Any) -> _LedgerEnqueue:
        """Per-call options, as :meth:`JobHandle.using` (``run_at``, ``queue``...)."""
        bound = self.job.using(**options)
        return _LedgerEnqueue(bound.handle, bound.options, ledger=self)

    # -- the job -----------------------------------------------------------------

    def run(self, ctx: Any, given: Mapping[str, Any]) -> dict[str, Any]:
        """The job body: check again, then write in one atomic, fenced step."""
        posting, tenant = self.check(given)
        return ctx.step.run("post", self._write, posting, tenant, atomic=True)

    def _write(self, posting: Posting, tenant: str) -> dict[str, Any]:
        written = self.book.write(posting, tenant=tenant, ledger=self.name)
        return {"posting_id": written.posting_id, "created": written.created}

    def _job_key(self, given: Mapping[str, Any]) -> str:
        # The fingerprint is part of the key: the same posting dedupes onto
        # its live job, another posting under the key gets a job of its own,
        # which the book then refuses (never silently folded into the first).
        posting = assert_balanced_posting(given)
        return f"{posting.key}#{posting.fingerprint[:FINGERPRINT_CHARS]}"


class _LedgerEnqueue(BoundEnqueue):
    """A bound enqueue that checks postings and writes Money as JSON."""

    __slots__ = ("ledger",)

    def __init__(
        self, handle: JobHandle[Any], options: Any, *, ledger: LedgerHandle
    ) -> None:
        super().__init__(handle, options)
        self.ledger = ledger

    def request(self, given: Mapping[str, Any]) -> Any:
        """Check the posting (ledger codes), then build the job request."""
        posting, _ = self.ledger.check(given)
        return super().request(posting.to_json())


def ledger(
    *,
    name: str,
    book: ModelBook,
    tenant: Tenant | None = None,
    queue: str = DEFAULT_QUEUE,
    retry: Retry | None = None,
) -> LedgerHandle:
    """Declare a posting job.

    Args:
        name: the job's durable name.
        book: where lines go: ``model_book(LedgerLine)``.
        tenant: ``posting -> str``; postings are unique per (tenant, key).
            Default: ``str(org_id)``, or ``"none"`` without one.
        queue: the queue its jobs go to.
        retry: the retry policy for database trouble (refusals are terminal).

    Raises:
        JobDeclarationInvalid: as :func:`job` does.
    """
    handle = LedgerHandle(name=name, tenant=tenant or _default_tenant, book=book)

    def post(
        ctx: Any,
        *,
        key: str,
        entries: list[dict[str, Any]],
        org_id: str | int | None = None,
    ) -> dict[str, Any]:
        return handle.run(ctx, {"key": key, "entries": entries, "org_id": org_id})

    post.__doc__ = f"Write one balanced posting to the {name} ledger."
    handle.job = job(
        post,
        name=name,
        queue=queue,
        retry=retry,
        idempotency_key=handle._job_key,
        tenant=lambda given: handle.check(given)[1],
    )
    return handle
