"""``Money``: an integer count of a currency's minor units. Never a float.

In job input (JSON) an amount is written ``{"minor": 1234, "currency":
"EUR"}`` (12.34 EUR); ``"scale"`` may be added, and must then be the ISO
4217 number of decimal places of the currency (2 for EUR, 0 for JPY).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from ..errors import LedgerEntryInvalid
from .currencies import MINOR_UNITS

__all__ = ["MAX_SAFE_MINOR", "Money"]

MAX_SAFE_MINOR = 2**53 - 1
"""The largest amount a JSON reader keeps exact (JavaScript's safe integer)."""

_FIELDS = frozenset({"minor", "currency", "scale"})
# What Money.of() reads from a string: ASCII digits, an optional sign and at
# most one decimal point. Not Decimal's grammar, which also takes spaces,
# underscores, exponents, NaN, Infinity and digits of every script.
_DECIMAL = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?")


@dataclass(frozen=True, slots=True)
class Money:
    """An amount: ``minor`` units of ``currency`` (``Money(1234, "EUR")`` is 12.34 EUR).

    Raises:
        LedgerEntryInvalid: ``minor`` is not an int (a float, a bool, a
            string) or is beyond 2**53-1, or ``currency`` is not an ISO 4217
            code with a minor unit.
    """

    minor: int
    currency: str

    def __post_init__(self) -> None:
        if type(self.minor) is not int:
            raise LedgerEntryInvalid(
                f"an amount's minor units must be an int, not {type(self.minor).__name__}"
            )
        if abs(self.minor) > MAX_SAFE_MINOR:
            raise LedgerEntryInvalid(
                "an amount is beyond 2**53-1 minor units, which JSON readers "
                "cannot keep exact",
                fix="split the amount over several postings",
            )
        if not isinstance(self.currency, str) or self.currency not in MINOR_UNITS:
            raise LedgerEntryInvalid(
                "an amount's currency is not an ISO 4217 code with a minor unit",
                meta={"currency": str(self.currency)[:8]},
            )

    @classmethod
    def stored(cls, minor: int, currency: str) -> Money:
        """An amount read back from the book, not checked again.

        Balances are sums: one may pass 2**53-1 however many lines each
        respect it, and a row written around the book (raw SQL) must not make
        every read fail. Amounts going in are always built checked.
        """
        money = object.__new__(cls)
        object.__setattr__(money, "minor", minor)
        object.__setattr__(money, "currency", currency)
        return money

    @property
    def scale(self) -> int:
        """Decimal places of the currency's minor unit (ISO 4217; 0 for a
        stored code outside the table)."""
        return MINOR_UNITS.get(self.currency, 0)

    @classmethod
    def of(cls, amount: str | Decimal | int, currency: str) -> Money:
        """``Money.of("12.34", "EUR")``: a decimal amount, refused if inexact.

        A string is ASCII digits with an optional sign and at most one
        decimal point (``"-12.34"``): no spaces, underscores, exponents or
        other scripts' digits.

        Raises:
            LedgerEntryInvalid: a float, a string of another shape, a
                Decimal that is not finite, more decimal places than the
                currency has, or more than 2**53-1 minor units.
        """
        if isinstance(amount, float | bool):
            raise LedgerEntryInvalid(
                "Money.of() takes a str, Decimal or int, never a float"
            )
        scale = cls(0, currency).scale
        if isinstance(amount, str) and not _DECIMAL.fullmatch(amount):
            raise LedgerEntryInvalid(
                "Money.of() reads a string of ASCII digits with an optional sign "
                'and one decimal point, such as "-12.34"'
            )
        try:
            number = Decimal(amount)
        except (InvalidOperation, ValueError, TypeError):
            raise LedgerEntryInvalid(
                "Money.of() was given something that is not a number"
            ) from None
        if not number.is_finite():
            raise LedgerEntryInvalid("Money.of() was given a NaN or an infinity")
        minor = number.scaleb(scale)
        if minor != minor.to_integral_value():
            raise LedgerEntryInvalid(
                f"{currency} has {scale} decimal places; the amount has more",
                meta={"currency": currency},
            )
        return cls(int(minor), currency)

    @classmethod
    def from_json(cls, value: Any) -> Money:
        """Read ``{"minor": ..., "currency": ..., ["scale": ...]}``.

        Raises:
            LedgerEntryInvalid: another shape, or a ``scale`` that is not the
                currency's ISO 4217 one.
        """
        if isinstance(value, Money):
            return value
        if (
            not isinstance(value, Mapping)
            or not {"minor", "currency"} <= set(value)
            or not set(value) <= _FIELDS
        ):
            raise LedgerEntryInvalid(
                'an amount must be {"minor": <int>, "currency": "<code>"} (and optionally "scale")'
            )
        money = cls(value["minor"], value["currency"])
        scale = value.get("scale", money.scale)
        if type(scale) is not int or scale != money.scale:
            raise LedgerEntryInvalid(
                f"{money.currency} amounts have scale {money.scale} (ISO 4217); "
                "an entry gave another",
                meta={"currency": money.currency},
            )
        return money

    def to_json(self) -> dict[str, Any]:
        """The JSON form job input carries: ``{"minor": 1234, "currency": "EUR"}``."""
        return {"minor": self.minor, "currency": self.currency}

    def __neg__(self) -> Money:
        # The negation of an amount is as valid as the amount (a stored sum
        # beyond 2**53-1 included).
        return Money.stored(-self.minor, self.currency)

    def __str__(self) -> str:
        return (
            f"{Decimal(self.minor).scaleb(-self.scale):.{self.scale}f} {self.currency}"
        )
