"""Posting validation: pure, refuses before anything is written.

:func:`assert_balanced_posting` is the one check, run at enqueue and again
in the job body; it answers a normalised :class:`Posting`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import LedgerEntryInvalid, LedgerUnbalanced
from ..validation import MAX_KEY_BYTES, text_problem
from .money import Money

__all__ = [
    "MAX_ENTRIES",
    "MAX_POSTING_KEY_BYTES",
    "Entry",
    "Posting",
    "assert_balanced_posting",
]

MAX_POSTING_KEY_BYTES = 255
"""A posting key's limit: it and a fingerprint form the job's idempotency key."""
MAX_ACCOUNT_BYTES = 255
MIN_ENTRIES = 2
MAX_ENTRIES = 1000
"""The most entries a posting may have: one statement writes them all, and a
line's number is a smallint."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of a posting: ``amount`` on ``account`` (positive = debit)."""

    account: str
    amount: Money


@dataclass(frozen=True, slots=True)
class Posting:
    """A checked, balanced posting."""

    key: str
    entries: tuple[Entry, ...]
    org_id: str | int | None = None

    @property
    def fingerprint(self) -> str:
        """sha256 of the lines and org_id, the order of entries aside.

        Two postings under one key are the same posting when their
        fingerprints match; otherwise the second is a conflict.
        """
        lines = sorted(
            (e.account, e.amount.currency, e.amount.minor) for e in self.entries
        )
        text = json.dumps([lines, self.org_id], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        """The job input form: ``{key, entries: [{account, amount}], org_id}``."""
        return {
            "key": self.key,
            "entries": [
                {"account": e.account, "amount": e.amount.to_json()}
                for e in self.entries
            ],
            "org_id": self.org_id,
        }


def assert_balanced_posting(posting: Mapping[str, Any] | Posting) -> Posting:
    """Check a posting and return it normalised; raise before any write.

    ``posting`` is ``{"key": str, "entries": [{"account": str, "amount":
    Money or {"minor": int, "currency": str}}, ...], "org_id": optional}``.

    Raises:
        LedgerEntryInvalid: an org_id that is not a non-empty string or int
            of at most 512 bytes (the default tenant), a blank key or account, fewer than two entries
            or more than :data:`MAX_ENTRIES`,
            an amount that is a float or beyond 2**53-1 minor units, an
            unknown currency, or a scale other than the currency's.
        LedgerUnbalanced: some currency's entries do not sum to zero (each
            currency balances on its own: an FX posting balances in both).
    """
    if isinstance(posting, Posting):
        posting = posting.to_json()
    if not isinstance(posting, Mapping):
        raise LedgerEntryInvalid("a posting must be a mapping with key and entries")
    key = checked_text(posting.get("key"), "the posting key", MAX_POSTING_KEY_BYTES)
    org_id = _org_id(posting.get("org_id"))
    raw = posting.get("entries")
    if not isinstance(raw, list | tuple) or not MIN_ENTRIES <= len(raw) <= MAX_ENTRIES:
        raise LedgerEntryInvalid(
            f"a posting needs from {MIN_ENTRIES} to {MAX_ENTRIES} entries",
            fix=f"split a posting of more than {MAX_ENTRIES} entries into several",
            meta={"entries": len(raw) if isinstance(raw, list | tuple) else None},
        )
    entries = tuple(_entry(index, item) for index, item in enumerate(raw))
    _check_balanced(entries)
    return Posting(key=key, entries=entries, org_id=org_id)


def _org_id(org_id: Any) -> str | int | None:
    # The default tenant is str(org_id), checked as enqueue checks a tenant:
    # refused here in org_id's own words, so assert and enqueue agree.
    if org_id is None:
        return None
    if isinstance(org_id, bool) or not isinstance(org_id, str | int):
        raise LedgerEntryInvalid("org_id must be a string, an int or None")
    problem = text_problem(str(org_id), max_bytes=MAX_KEY_BYTES)
    if problem is not None:
        raise LedgerEntryInvalid(
            f"org_id {problem}",
            fix=f"pass a non-empty org_id of at most {MAX_KEY_BYTES} UTF-8 bytes",
        )
    return org_id


def _entry(index: int, item: Any) -> Entry:
    if not isinstance(item, Mapping) or set(item) != {"account", "amount"}:
        raise LedgerEntryInvalid(
            f'entry {index} must be {{"account": ..., "amount": ...}}',
            meta={"entry": index},
        )
    account = checked_text(
        item["account"], f"entry {index}'s account", MAX_ACCOUNT_BYTES, entry=index
    )
    try:
        amount = Money.from_json(item["amount"])
    except LedgerEntryInvalid as error:
        raise LedgerEntryInvalid(
            f"entry {index}: {error.cause}", meta={**error.meta, "entry": index}
        ) from None
    return Entry(account=account, amount=amount)


def checked_text(
    value: Any, what: str, max_bytes: int, entry: int | None = None
) -> str:
    """``value`` if PostgreSQL can store it as a non-blank name or key.

    Raises:
        LedgerEntryInvalid: it cannot; ``meta["entry"]`` names the entry
            when the text is an entry's.
    """
    problem = text_problem(value, max_bytes=max_bytes)
    if problem is None and isinstance(value, str) and not value.strip():
        problem = "is blank"
    if problem is not None:
        meta = {} if entry is None else {"entry": entry}
        raise LedgerEntryInvalid(f"{what} {problem}", meta=meta)
    assert isinstance(value, str)
    return value


def _check_balanced(entries: tuple[Entry, ...]) -> None:
    totals: dict[str, int] = {}
    for entry in entries:
        currency = entry.amount.currency
        totals[currency] = totals.get(currency, 0) + entry.amount.minor
    off = {currency: total for currency, total in totals.items() if total}
    if off:
        raise LedgerUnbalanced(
            "the entries of " + ", ".join(sorted(off)) + " do not sum to zero",
            meta={"imbalance_minor": off},
        )
