"""Double-entry ledger postings: ``ledger()``, ``Money``, balances.

Declare a posting job with ``ledger(name=..., book=model_book(LedgerLine))``
(``LedgerLine`` is in ``django_ultimate_jobs.models``). Importing this
module touches no model.
"""

from __future__ import annotations

from .book import Balance, ModelBook, Written, model_book
from .currencies import MINOR_UNITS
from .job import LedgerHandle, ledger
from .money import MAX_SAFE_MINOR, Money
from .posting import MAX_ENTRIES, Entry, Posting, assert_balanced_posting

__all__ = [
    "MAX_ENTRIES",
    "MAX_SAFE_MINOR",
    "MINOR_UNITS",
    "Balance",
    "Entry",
    "LedgerHandle",
    "ModelBook",
    "Money",
    "Posting",
    "Written",
    "assert_balanced_posting",
    "ledger",
    "model_book",
]
