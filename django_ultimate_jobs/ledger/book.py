"""The book: where postings are written and balances read.

``model_book(LedgerLine)`` binds the shipped tables. A write is one
statement inside one transaction; its idempotency is the unique
``(tenant, key)`` constraint of the postings table, not a read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, LiteralString, cast

import psycopg
from django.db import connections, router
from django.db.models import Sum

from ..drivers.postgres.prepare import prepare_explicit_only
from ..drivers.postgres.sql import query
from ..errors import JobDeclarationInvalid, LedgerEntryInvalid, LedgerPostingConflict
from ..validation import MAX_KEY_BYTES
from .money import Money
from .posting import MAX_ACCOUNT_BYTES, Posting, checked_text

if TYPE_CHECKING:
    from .models import LedgerLine

__all__ = ["Balance", "ModelBook", "model_book"]

_LINE_FIELDS = {
    "posting",
    "tenant",
    "line",
    "account",
    "currency",
    "minor",
    "posted_at",
}
_POSTING_FIELDS = {
    "ledger",
    "tenant",
    "key",
    "org_id",
    "fingerprint",
    "line_count",
    "posted_at",
}


@dataclass(frozen=True, slots=True)
class Balance:
    """The sum of one account's lines in one currency."""

    account: str
    amount: Money


@dataclass(frozen=True, slots=True)
class Written:
    """What a write did: ``created`` is False when the key was stored already."""

    posting_id: int
    created: bool


class ModelBook:
    """A book over a line model and the posting model its ``posting`` FK names."""

    def __init__(self, line_model: type[LedgerLine]) -> None:
        self.line_model = line_model

    def __repr__(self) -> str:
        return f"<ModelBook {self.line_model._meta.label}>"

    @cached_property
    def _statements(self) -> dict[str, LiteralString]:
        connection = connections[self.using]
        postings = self.line_model._meta.get_field("posting").related_model
        assert postings is not None and not isinstance(postings, str)
        names = {
            "postings": connection.ops.quote_name(postings._meta.db_table),
            "lines": connection.ops.quote_name(self.line_model._meta.db_table),
        }
        # The templates ship in the package and the names come from model
        # metadata: as trusted as source code.
        return {
            name: cast(LiteralString, query(name, "ledger.sql").format(**names))
            for name in ("ledger_post", "ledger_posting_fingerprint")
        }

    @property
    def using(self) -> str:
        """The database alias the line model is written to."""
        return router.db_for_write(self.line_model)

    def write(self, posting: Posting, *, tenant: str, ledger: str) -> Written:
        """Write ``posting`` once under ``(tenant, posting.key)``: all lines or none.

        One statement writes the posting row and its lines, so it is atomic
        on its own; inside the caller's ``transaction.atomic()`` it commits
        or rolls back with it. A replay of the same posting writes nothing
        and answers ``created=False``.

        Raises:
            LedgerPostingConflict: the key is stored with other lines,
                another org_id or by another ledger; nothing was written.
        """
        params: dict[str, Any] = {
            "ledger": ledger,
            "tenant": tenant,
            "key": posting.key,
            "org_id": None if posting.org_id is None else str(posting.org_id),
            "fingerprint": posting.fingerprint,
            "count": len(posting.entries),
            "accounts": [e.account for e in posting.entries],
            "currencies": [e.amount.currency for e in posting.entries],
            "minors": [e.amount.minor for e in posting.entries],
        }
        inserted = self._rows("ledger_post", params)
        if inserted:
            return Written(posting_id=inserted[0][0], created=True)
        # The key was stored by a transaction that has committed (ON
        # CONFLICT waited for it), and a stored posting never changes: this
        # read answers its fingerprint in any transaction.
        ((posting_id, stored, by),) = self._rows("ledger_posting_fingerprint", params)
        if by != ledger:
            # Keys belong to the book: another ledger's posting is never
            # answered as this one's replay.
            raise LedgerPostingConflict(
                f"the posting key is already stored by the ledger {by!r}",
                meta={"posting_id": posting_id, "ledger": by},
            )
        if stored != params["fingerprint"]:
            raise LedgerPostingConflict(
                "the posting key is already stored with other lines",
                meta={"posting_id": posting_id},
            )
        return Written(posting_id=posting_id, created=False)

    def _rows(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        # As the Postgres driver does: a server-binding cursor on Django's
        # own connection, in the caller's transaction, prepared once per
        # connection (Django's client-binding cursors cannot prepare).
        connection = connections[self.using]
        connection.ensure_connection()
        connection.validate_no_broken_transaction()
        raw = connection.connection
        prepare_explicit_only(raw)
        with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
            cursor.execute(self._statements[name], params, prepare=True)
            return cursor.fetchall()

    def balances(
        self,
        account: str | None = None,
        *,
        currency: str | None = None,
        tenant: str | None = None,
        as_of: datetime | None = None,
    ) -> list[Balance]:
        """Sum lines per (account, currency), ordered by account then currency.

        Args:
            account: one account (default: every account).
            currency: one currency (default: every currency).
            tenant: one tenant (default: every tenant).
            as_of: only lines posted at or before this aware datetime.

        Raises:
            LedgerEntryInvalid: an argument no line can match: a blank
                account or tenant, one holding a NUL, a currency outside ISO
                4217 (``"eur"``), an ``as_of`` that is not an aware datetime.
        """
        _check_query(account, currency, tenant, as_of)
        lines = self.line_model._default_manager.using(self.using).all()
        if account is not None:
            lines = lines.filter(account=account)
        if currency is not None:
            lines = lines.filter(currency=currency)
        if tenant is not None:
            lines = lines.filter(tenant=tenant)
        if as_of is not None:
            lines = lines.filter(posted_at__lte=as_of)
        rows = (
            lines.values("account", "currency")
            .annotate(total=Sum("minor"))
            .order_by("account", "currency")
        )
        return [
            Balance(row["account"], Money.stored(int(row["total"]), row["currency"]))
            for row in rows
        ]

    def balance(
        self,
        account: str,
        currency: str,
        *,
        tenant: str | None = None,
        as_of: datetime | None = None,
    ) -> Money:
        """One account's balance in one currency (zero when it has no lines).

        Raises:
            LedgerEntryInvalid: as :meth:`balances`; ``account`` and
                ``currency`` are required (``None`` is refused, not read as
                "every account").
        """
        if account is None or currency is None:
            raise LedgerEntryInvalid(
                "balance() needs an account and a currency",
                fix="use balances() for every account or currency",
            )
        found = self.balances(account, currency=currency, tenant=tenant, as_of=as_of)
        return found[0].amount if found else Money(0, currency)


def _check_query(account: Any, currency: Any, tenant: Any, as_of: Any) -> None:
    # Refused with a code, not a DataError from the driver nor an empty
    # answer that reads as a zero balance.
    if account is not None:
        checked_text(account, "the account", MAX_ACCOUNT_BYTES)
    if tenant is not None:
        checked_text(tenant, "the tenant", MAX_KEY_BYTES)
    if currency is not None:
        Money(0, currency)  # refuses a code outside ISO 4217 ("eur")
    if as_of is not None and (
        not isinstance(as_of, datetime) or as_of.utcoffset() is None
    ):
        raise LedgerEntryInvalid(
            "as_of must be an aware datetime",
            fix="pass e.g. django.utils.timezone.now() or a datetime with tzinfo",
        )


def model_book(line_model: type[LedgerLine]) -> ModelBook:
    """A book writing ``line_model`` rows and their ``posting`` rows.

    Raises:
        JobDeclarationInvalid: the model lacks the fields a book needs (those
            of ``django_ultimate_jobs.models.LedgerLine`` and its posting).
    """
    try:
        fields = {f.name for f in line_model._meta.get_fields()}
        postings = line_model._meta.get_field("posting").related_model
        posting_fields = {f.name for f in postings._meta.get_fields()}  # type: ignore[union-attr]
    except Exception:
        fields, posting_fields = set(), set()
    missing = sorted((_LINE_FIELDS - fields) | (_POSTING_FIELDS - posting_fields))
    if missing:
        raise JobDeclarationInvalid(
            f"model_book() needs a line model shaped like LedgerLine; missing: {', '.join(missing)}",
            fix="pass django_ultimate_jobs.models.LedgerLine",
        )
    return ModelBook(line_model)
