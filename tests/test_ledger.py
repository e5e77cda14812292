"""Ledger postings: refusals before any write, idempotency, append-only lines.

Real PostgreSQL throughout. Every refusal asserts its code and that no
posting or line exists afterwards.
"""

from __future__ import annotations

import threading
from datetime import date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_ultimate_jobs.errors import JobsError
from django_ultimate_jobs.ledger import (
    ModelBook,
    Money,
    assert_balanced_posting,
    ledger,
    model_book,
)
from django_ultimate_jobs.models import Job, LedgerLine, LedgerPosting
from django_ultimate_jobs.registry import unregister
from django_ultimate_jobs.testing import run_jobs
from tests.test_enqueue_concurrency import race, racer_count

pytestmark = pytest.mark.postgres


@pytest.fixture
def payments():
    handle = ledger(name="tests.ledger.payments", book=model_book(LedgerLine))
    yield handle
    unregister(handle.name)


def entries(*pairs):
    """``("cash", 100, "EUR"), ...`` -> the JSON entries of a posting."""
    return [
        {"account": account, "amount": {"minor": minor, "currency": currency}}
        for account, minor, currency in pairs
    ]


SALE = entries(("cash", 1000, "EUR"), ("revenue", -1000, "EUR"))


def nothing_written() -> bool:
    return not LedgerLine.objects.exists() and not LedgerPosting.objects.exists()


# -- refusals -------------------------------------------------------------------

REFUSED = {
    "unbalanced": (
        entries(("cash", 1000, "EUR"), ("revenue", -999, "EUR")),
        "X_LEDGER_UNBALANCED",
    ),
    "fx-balanced-in-one-currency-only": (
        entries(("cash", 1000, "EUR"), ("revenue", -1000, "EUR"), ("fx", 5, "USD")),
        "X_LEDGER_UNBALANCED",
    ),
    "float": (
        [
            {"account": "cash", "amount": {"minor": 10.0, "currency": "EUR"}},
            {"account": "revenue", "amount": {"minor": -10, "currency": "EUR"}},
        ],
        "X_LEDGER_ENTRY_INVALID",
    ),
    "unsafe-integer": (
        entries(("cash", 2**53, "EUR"), ("revenue", -(2**53), "EUR")),
        "X_LEDGER_ENTRY_INVALID",
    ),
    "unknown-currency": (
        entries(("cash", 1, "ABC"), ("revenue", -1, "ABC")),
        "X_LEDGER_ENTRY_INVALID",
    ),
    "no-minor-unit-currency": (
        entries(("cash", 1, "XAU"), ("revenue", -1, "XAU")),
        "X_LEDGER_ENTRY_INVALID",
    ),
    "mixed-scales": (
        [
            {
                "account": "cash",
                "amount": {"minor": 100, "currency": "EUR", "scale": 2},
            },
            {
                "account": "revenue",
                "amount": {"minor": -1000, "currency": "EUR", "scale": 3},
            },
        ],
        "X_LEDGER_ENTRY_INVALID",
    ),
    "blank-account": (
        entries(("  ", 1, "EUR"), ("revenue", -1, "EUR")),
        "X_LEDGER_ENTRY_INVALID",
    ),
    "one-entry": (entries(("cash", 0, "EUR")), "X_LEDGER_ENTRY_INVALID"),
    "no-entries": ([], "X_LEDGER_ENTRY_INVALID"),
    "more-than-1000-entries": (
        entries(*[("cash", 1, "EUR")] * 1000, ("revenue", -1000, "EUR")),
        "X_LEDGER_ENTRY_INVALID",
    ),
    "more-than-a-smallint-of-entries": (
        entries(*[("cash", 1, "EUR")] * 32767, ("revenue", -32767, "EUR")),
        "X_LEDGER_ENTRY_INVALID",
    ),
    "amount-as-string": (
        [
            {"account": "cash", "amount": {"minor": "10", "currency": "EUR"}},
            {"account": "revenue", "amount": {"minor": -10, "currency": "EUR"}},
        ],
        "X_LEDGER_ENTRY_INVALID",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_refused_posting_is_refused_at_enqueue_and_nothing_is_written(
    case, pg_driver, payments
):
    given, code = REFUSED[case]
    with pytest.raises(JobsError) as refused:
        payments.enqueue(key="p-1", entries=given)
    assert refused.value.code == code
    assert not Job.objects.exists()
    assert nothing_written()


@pytest.mark.parametrize("case", REFUSED)
def test_a_refused_posting_that_reached_the_queue_dies_in_the_job_unwritten(
    case, pg_driver, payments
):
    """A row enqueued around the check (operator, raw handle) is refused again."""
    given, code = REFUSED[case]
    pg_driver.enqueue(
        _raw_request(payments, {"key": "p-1", "entries": given, "org_id": None})
    )
    (execution,) = run_jobs()
    assert execution.error is not None and execution.error.code == code
    assert Job.objects.get().state == "dead"  # terminal: no attempt spent again
    assert nothing_written()


def _raw_request(handle, given):
    from django_ultimate_jobs.drivers.base import EnqueueRequest

    return EnqueueRequest(
        name=handle.name, input=given, queue=handle.job.queue, max_attempts=3
    )


def test_assert_balanced_posting_answers_the_normalised_posting():
    posting = assert_balanced_posting(
        {
            "key": "k",
            "entries": [
                {"account": "cash", "amount": Money.of("12.34", "EUR")},
                {"account": "revenue", "amount": {"minor": -1234, "currency": "EUR"}},
            ],
        }
    )
    assert [e.amount for e in posting.entries] == [
        Money(1234, "EUR"),
        Money(-1234, "EUR"),
    ]


@pytest.mark.parametrize("account", ["  ", "", "a\x00b", "x" * 256, 7])
def test_an_account_refusal_names_its_entry(account):
    with pytest.raises(JobsError) as refused:
        assert_balanced_posting(
            {"key": "k", "entries": entries(("cash", 1, "EUR"), (account, -1, "EUR"))}
        )
    assert refused.value.code == "X_LEDGER_ENTRY_INVALID"
    assert refused.value.meta["entry"] == 1


@pytest.mark.parametrize("org_id", ["", "a\x00b", "a\ud800", "x" * 513, 1.5, True])
def test_assert_balanced_posting_refuses_the_org_id_enqueue_refuses(
    pg_driver, payments, org_id
):
    given = {"key": "k", "entries": SALE, "org_id": org_id}
    with pytest.raises(JobsError) as asserted:
        assert_balanced_posting(given)
    with pytest.raises(JobsError) as enqueued:
        payments.enqueue(**given)
    assert asserted.value.code == enqueued.value.code == "X_LEDGER_ENTRY_INVALID"
    assert enqueued.value.cause.startswith("org_id ")
    assert not Job.objects.exists()


def test_money_is_exact_minor_units_and_never_a_float():
    assert Money.of("0.5", "KWD") == Money(500, "KWD")
    assert Money.of("120", "JPY") == Money(120, "JPY")
    assert str(Money(-1234, "EUR")) == "-12.34 EUR"
    for bad in (
        lambda: Money(1.0, "EUR"),
        lambda: Money.of(1.5, "EUR"),
        lambda: Money.of("0.001", "EUR"),
        lambda: Money(True, "EUR"),
    ):
        with pytest.raises(JobsError) as refused:
            bad()
        assert refused.value.code == "X_LEDGER_ENTRY_INVALID"


@pytest.mark.parametrize(
    "amount",
    [" 12.34 ", "1_000", "1e2", "\u0661\u0662", "NaN", "Infinity", "12.", ".5", "+-1"],
)
def test_money_of_reads_ascii_digits_a_sign_and_one_point_only(amount):
    with pytest.raises(JobsError) as refused:
        Money.of(amount, "EUR")
    assert refused.value.code == "X_LEDGER_ENTRY_INVALID"
    assert "ASCII digits" in refused.value.cause


def test_money_refuses_more_than_2_53_minus_1_minor_units():
    assert Money(2**53 - 1, "EUR").minor == 2**53 - 1
    assert Money.of("-12.34", "EUR") == Money(-1234, "EUR")
    for bad in (
        lambda: Money(2**53, "EUR"),
        lambda: Money(-(2**53), "EUR"),
        lambda: Money.of("90071992547409.92", "EUR"),
        lambda: Money.of(Decimal("NaN"), "EUR"),
    ):
        with pytest.raises(JobsError) as refused:
            bad()
        assert refused.value.code == "X_LEDGER_ENTRY_INVALID"


# -- writing, idempotency ---------------------------------------------------------


def test_a_posting_writes_its_lines_and_balances_follow(pg_driver, payments):
    payments.enqueue(key="sale-1", entries=SALE, org_id="acme")
    payments.enqueue(
        key="sale-2",
        entries=[
            {"account": "cash", "amount": Money(250, "EUR")},
            {"account": "revenue", "amount": Money(-250, "EUR")},
        ],
        org_id="acme",
    )
    assert [e.outcome for e in run_jobs()] == ["completed", "completed"]
    assert payments.balance("cash", "EUR") == Money(1250, "EUR")
    assert payments.balance("revenue", "EUR", tenant="acme") == Money(-1250, "EUR")
    assert payments.balance("cash", "EUR", tenant="other") == Money(0, "EUR")
    first = LedgerPosting.objects.get(key="sale-1")
    assert payments.balance("cash", "EUR", as_of=first.posted_at) == Money(1000, "EUR")
    assert payments.balance(
        "cash", "EUR", as_of=first.posted_at - timedelta(microseconds=1)
    ) == Money(0, "EUR")
    assert [(b.account, b.amount) for b in payments.balances()] == [
        ("cash", Money(1250, "EUR")),
        ("revenue", Money(-1250, "EUR")),
    ]


@pytest.mark.parametrize(
    ("args", "options"),
    [
        ((None, "EUR"), {}),
        (("cash", None), {}),
        (("cash\x00", "EUR"), {}),
        (("", "EUR"), {}),
        (("cash", "eur"), {}),
        (("cash", "EUR"), {"tenant": "a\x00"}),
        (("cash", "EUR"), {"as_of": datetime(2026, 1, 1)}),  # naive
        (("cash", "EUR"), {"as_of": date(2026, 1, 1)}),
        (("cash", "EUR"), {"as_of": "2026-01-01T00:00:00Z"}),
    ],
)
def test_balance_refuses_what_no_line_can_match(pg_driver, payments, args, options):
    with pytest.raises(JobsError) as refused:
        payments.balance(*args, **options)
    assert refused.value.code == "X_LEDGER_ENTRY_INVALID"


@pytest.mark.parametrize(
    "options",
    [
        {"currency": "eur"},
        {"tenant": "a\x00"},
        {"tenant": ""},
        {"as_of": datetime(2026, 1, 1)},
    ],
)
def test_balances_refuse_what_no_line_can_match(pg_driver, payments, options):
    with pytest.raises(JobsError) as refused:
        payments.balances(**options)
    assert refused.value.code == "X_LEDGER_ENTRY_INVALID"
    with pytest.raises(JobsError):
        payments.balances("a\x00b")


def test_a_replayed_posting_writes_nothing_and_another_under_its_key_conflicts(
    pg_driver, payments
):
    payments.enqueue(key="sale-1", entries=SALE)
    run_jobs()
    payments.enqueue(key="sale-1", entries=list(reversed(SALE)))  # same lines
    (replay,) = run_jobs()
    assert replay.outcome == "completed" and replay.result["created"] is False
    payments.enqueue(
        key="sale-1", entries=entries(("cash", 5, "EUR"), ("revenue", -5, "EUR"))
    )
    (conflict,) = run_jobs()
    assert conflict.error.code == "X_LEDGER_POSTING_CONFLICT"
    assert LedgerLine.objects.count() == 2
    assert payments.balance("cash", "EUR") == Money(1000, "EUR")


def test_a_key_is_unique_per_tenant(pg_driver, payments):
    payments.enqueue(key="sale-1", entries=SALE, org_id="acme")
    payments.enqueue(
        key="sale-1",
        entries=entries(("cash", 5, "EUR"), ("revenue", -5, "EUR")),
        org_id="globex",
    )
    assert [e.outcome for e in run_jobs()] == ["completed", "completed"]
    assert payments.balance("cash", "EUR", tenant="globex") == Money(5, "EUR")


def test_a_key_belongs_to_the_book_and_another_ledger_replaying_it_conflicts(
    pg_driver, payments
):
    """Two ledgers writing one book share its keys: never a silent replay."""
    refunds = ledger(name="tests.ledger.refunds", book=model_book(LedgerLine))
    try:
        payments.enqueue(key="xl-1", entries=SALE)
        refunds.enqueue(key="xl-1", entries=SALE)  # the same lines, another ledger
        first, second = run_jobs()
        assert first.outcome == "completed" and first.result["created"] is True
        assert second.error.code == "X_LEDGER_POSTING_CONFLICT"
        assert second.error.meta["ledger"] == payments.name
        assert LedgerPosting.objects.get().ledger == payments.name
        # Balances are the book's: both handles read the same figure.
        assert refunds.balance("cash", "EUR") == payments.balance("cash", "EUR")
    finally:
        unregister(refunds.name)


class _CrashAfterWrite(ModelBook):
    """A book whose first write dies after its statement ran (a crash there)."""

    crashed = False

    def write(self, posting, *, tenant, ledger):
        written = super().write(posting, tenant=tenant, ledger=ledger)
        if not self.crashed:
            type(self).crashed = True
            raise RuntimeError("the worker dies before the step commits")
        return written


def test_a_crash_mid_posting_leaves_no_line_and_the_retry_writes_once(pg_driver, clock):
    handle = ledger(name="tests.ledger.crashy", book=_CrashAfterWrite(LedgerLine))
    try:
        handle.enqueue(key="sale-1", entries=SALE)
        (crashed,) = run_jobs()
        assert crashed.outcome == "retried"
        assert nothing_written()  # the lines went with the step's transaction
        clock.advance(timedelta(hours=1))
        (retried,) = run_jobs()
        assert retried.outcome == "completed" and retried.result["created"] is True
        assert LedgerLine.objects.count() == 2
    finally:
        unregister(handle.name)


# -- the database refuses changes ------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE ultimate_jobs_ledger_line SET minor = minor + 1",
        "DELETE FROM ultimate_jobs_ledger_line",
        "UPDATE ultimate_jobs_ledger_posting SET key = 'other'",
        "DELETE FROM ultimate_jobs_ledger_posting",
    ],
)
def test_raw_update_and_delete_are_refused_by_the_database(
    statement, pg_driver, payments
):
    payments.enqueue(key="sale-1", entries=SALE)
    run_jobs()
    with (
        pytest.raises(DatabaseError, match="Cannot update or delete"),
        transaction.atomic(),
    ):
        with connection.cursor() as cursor:
            cursor.execute(statement)
    assert LedgerLine.objects.count() == 2
    assert list(
        LedgerLine.objects.values_list("minor", flat=True).order_by("line")
    ) == [1000, -1000]


def _insert_lines(posting_id, *lines):
    """Raw SQL: ``(line, account, currency, minor), ...`` in one INSERT."""
    rows = ", ".join(["(%s, 'none', %s, %s, %s, %s, now())"] * len(lines))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ultimate_jobs_ledger_line"
            " (posting_id, tenant, line, account, currency, minor, posted_at)"
            f" VALUES {rows}",
            [value for line in lines for value in (posting_id, *line)],
        )


def _raw_posting(key, *lines, line_count=None):
    """A posting written around the book: its row, then its lines."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ultimate_jobs_ledger_posting"
            " (ledger, tenant, key, fingerprint, line_count)"
            " VALUES ('raw', 'none', %s, '', %s) RETURNING id",
            [key, len(lines) if line_count is None else line_count],
        )
        (posting_id,) = cursor.fetchone()
    _insert_lines(posting_id, *lines)
    return posting_id


@pytest.mark.parametrize(
    "lines",
    [
        [(9, "cash", "eur", 1), (10, "revenue", "eur", -1)],  # lowercase
        [(9, "cash", "EURO", 1), (10, "revenue", "EURO", -1)],
        [(9, "cash", "EUR", 2**53), (10, "revenue", "EUR", -(2**53))],
        [(9, "cash", "EUR", 5), (10, "revenue", "EUR", -5)],  # into a stored posting
        [(3, "cash", "EUR", 5)],  # a third line, unbalanced
    ],
    ids=["lowercase", "four-letters", "beyond-2**53-1", "a-pair-more", "one-more"],
)
def test_the_database_refuses_lines_the_book_would_not_write(
    pg_driver, payments, lines
):
    payments.enqueue(key="sale-1", entries=SALE)
    run_jobs()
    with pytest.raises(DatabaseError), transaction.atomic():
        _insert_lines(LedgerPosting.objects.get().pk, *lines)
    assert LedgerLine.objects.count() == 2


def test_the_database_refuses_an_unbalanced_posting_written_around_the_book(
    pg_driver,
):
    with pytest.raises(DatabaseError, match="balance"), transaction.atomic():
        _raw_posting("raw-1", (1, "cash", "EUR", 5), (2, "revenue", "EUR", -4))
    with pytest.raises(DatabaseError, match="whole"), transaction.atomic():
        # Balanced, but two of its three lines: the third could come later.
        _raw_posting(
            "raw-2", (1, "cash", "EUR", 5), (2, "revenue", "EUR", -5), line_count=3
        )
    assert nothing_written()


def test_balances_and_admin_pages_read_rows_written_around_the_book(
    admin_client, pg_driver, payments
):
    """A raw posting of a currency outside the table, sums past 2**53-1: read."""
    payments.enqueue(key="sale-1", entries=SALE)
    run_jobs()
    odd = _raw_posting("raw-1", (1, "cash", "ABC", 5), (2, "revenue", "ABC", -5))
    for key in ("raw-2", "raw-3"):
        _raw_posting(key, (1, "big", "EUR", 2**53 - 1), (2, "small", "EUR", 1 - 2**53))
    assert payments.balance("big", "EUR").minor == 2 * (2**53 - 1)
    assert str(-payments.balance("big", "EUR")).startswith("-")
    assert [b.amount.currency for b in payments.balances("cash")] == ["ABC", "EUR"]
    for page, args in [
        ("ledgerline_changelist", []),
        ("ledgerline_balances", []),
        ("ledgerposting_change", [odd]),
    ]:
        url = reverse(f"admin:ultimate_jobs_{page}", args=args)
        assert admin_client.get(url).status_code == 200, page


# -- races ----------------------------------------------------------------------


@pytest.fixture
def committed_payments(committed_pg_driver, payments):
    return payments


def test_racing_writes_of_one_posting_write_its_lines_once(committed_payments):
    posting = assert_balanced_posting({"key": "sale-1", "entries": SALE})
    outcomes = race(
        min(racer_count(), 50),
        lambda: committed_payments.book.write(posting, tenant="none", ledger="t"),
    )
    assert [o for o in outcomes if isinstance(o, BaseException)] == []
    assert sorted(o.created for o in outcomes).count(True) == 1
    assert LedgerPosting.objects.count() == 1
    assert LedgerLine.objects.count() == 2


def test_racing_writes_of_different_postings_under_one_key_one_wins(committed_payments):
    count = min(racer_count(), 50)
    postings = iter(
        [
            assert_balanced_posting(
                {
                    "key": "sale-1",
                    "entries": entries(
                        ("cash", n + 1, "EUR"), ("revenue", -(n + 1), "EUR")
                    ),
                }
            )
            for n in range(count)
        ]
    )
    lock = threading.Lock()

    def write():
        with lock:
            posting = next(postings)
        return committed_payments.book.write(posting, tenant="none", ledger="t")

    outcomes = race(count, write)
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(won) == 1 and won[0].created
    assert {getattr(e, "code", repr(e)) for e in lost} == {"X_LEDGER_POSTING_CONFLICT"}
    assert len(lost) == count - 1
    assert LedgerLine.objects.count() == 2


def test_racing_enqueues_then_a_worker_write_the_lines_once(committed_payments):
    """50 enqueues of one posting and of 50 different ones under one key, run."""
    count = min(racer_count(), 50)
    race(count, lambda: committed_payments.enqueue(key="same", entries=SALE))
    amounts = iter(range(1, count + 1))
    lock = threading.Lock()

    def differing():
        with lock:
            n = next(amounts)
        return committed_payments.enqueue(
            key="differs", entries=entries(("cash", n, "EUR"), ("revenue", -n, "EUR"))
        )

    race(count, differing)
    executions = run_jobs()
    assert LedgerPosting.objects.count() == 2
    assert LedgerLine.objects.count() == 4
    differs = [e for e in executions if e.claimed.input["key"] == "differs"]
    assert len(differs) == count
    assert sorted(e.outcome for e in differs).count("completed") == 1
    assert {e.error.code for e in differs if e.error is not None} == {
        "X_LEDGER_POSTING_CONFLICT"
    }


# -- the admin ---------------------------------------------------------------------


def _two_postings(handle):
    handle.enqueue(key="sale-1", entries=SALE)
    handle.enqueue(
        key="fx-1",
        entries=entries(("cash", 500, "USD"), ("revenue", -500, "USD")),
    )
    run_jobs()


def test_admin_lists_lines_by_account_currency_and_key_and_shows_balances(
    admin_client, pg_driver, payments
):
    _two_postings(payments)
    lines = reverse("admin:ultimate_jobs_ledgerline_changelist")
    assert admin_client.get(lines).status_code == 200
    usd = admin_client.get(lines, {"currency": "USD"}).text
    assert "5.00 USD" in usd and "10.00 EUR" not in usd
    cash = admin_client.get(lines, {"account": "cash"}).text
    assert "10.00 EUR" in cash and "-10.00 EUR" not in cash
    by_key = admin_client.get(lines, {"q": "fx-1"}).text
    assert "5.00 USD" in by_key and "10.00 EUR" not in by_key
    postings = reverse("admin:ultimate_jobs_ledgerposting_changelist")
    assert "sale-1" in admin_client.get(postings, {"q": "sale-1"}).text
    posting = LedgerPosting.objects.get(key="sale-1")
    page = admin_client.get(
        reverse("admin:ultimate_jobs_ledgerposting_change", args=[posting.pk])
    ).text
    assert "-10.00 EUR" in page and 'name="_save"' not in page
    balances = admin_client.get(reverse("admin:ultimate_jobs_ledgerline_balances")).text
    for shown in ("10.00 EUR", "-10.00 EUR", "5.00 USD", "-5.00 USD"):
        assert shown in balances


def test_admin_lists_filter_without_reading_every_value_and_balances_link_them(
    admin_client, pg_driver, payments
):
    """No list enumerates its filter values (a SELECT DISTINCT over every
    line or posting on each page); the balances page links each account and
    currency to its lines, and the chosen value shows in the sidebar."""
    _two_postings(payments)
    lines = reverse("admin:ultimate_jobs_ledgerline_changelist")
    postings = reverse("admin:ultimate_jobs_ledgerposting_changelist")
    with CaptureQueriesContext(connection) as ran:
        assert admin_client.get(lines).status_code == 200
        assert admin_client.get(postings).status_code == 200
        assert admin_client.get(postings, {"tenant": "none"}).status_code == 200
    distinct = [q["sql"] for q in ran.captured_queries if "DISTINCT" in q["sql"]]
    assert distinct == []
    balances = admin_client.get(reverse("admin:ultimate_jobs_ledgerline_balances"))
    link = f"{lines}?account=cash&amp;currency=USD"
    assert link in balances.text
    cash_usd = admin_client.get(lines, {"account": "cash", "currency": "USD"}).text
    assert "5.00 USD" in cash_usd and "-5.00 USD" not in cash_usd
    assert "10.00 EUR" not in cash_usd
    assert ">cash</a>" in cash_usd  # the chosen account, in the sidebar


@pytest.mark.parametrize(
    "lookup",
    [
        {"posting__fingerprint__startswith": "a"},
        {"minor__gt": "0"},
        {"account__regex": "("},
    ],
)
def test_admin_refuses_lookups_other_than_its_filters(
    admin_client, pg_driver, payments, lookup
):
    _two_postings(payments)
    lines = reverse("admin:ultimate_jobs_ledgerline_changelist")
    assert admin_client.get(lines, lookup).status_code == 400
    postings = reverse("admin:ultimate_jobs_ledgerposting_changelist")
    assert (
        admin_client.get(postings, {"fingerprint__startswith": "a"}).status_code == 400
    )


@pytest.mark.parametrize(
    ("page", "query"),
    [
        ("ledgerline_changelist", {"account": "a\x00b"}),
        ("ledgerline_changelist", {"currency": "E\x00R"}),
        ("ledgerline_changelist", {"q": "k\x00"}),
        ("ledgerposting_changelist", {"tenant": "a\x00b"}),
        ("ledgerline_balances", {"account": "a\x00b"}),
        ("ledgerline_balances", {"tenant": "a\x00b"}),
        ("ledgerline_balances", {"currency": "eur"}),
    ],
)
def test_admin_answers_a_filter_no_row_can_hold_with_e_1(
    admin_client, pg_driver, payments, page, query
):
    _two_postings(payments)
    url = reverse(f"admin:ultimate_jobs_{page}")
    answered = admin_client.get(url, query)
    assert answered.status_code == 302
    assert answered["Location"] == f"{url}?e=1"
    assert admin_client.get(answered["Location"]).status_code == 200


def test_admin_balances_take_account_currency_and_tenant_only(
    admin_client, pg_driver, payments
):
    _two_postings(payments)
    payments.enqueue(key="sale-3", entries=SALE, org_id="acme")
    run_jobs()
    url = reverse("admin:ultimate_jobs_ledgerline_balances")
    usd = admin_client.get(url, {"currency": "USD"}).text
    assert "5.00 USD" in usd and "10.00 EUR" not in usd
    acme = admin_client.get(url, {"tenant": "acme", "account": "cash"}).text
    assert "10.00 EUR" in acme and "20.00 EUR" not in acme
    assert admin_client.get(url, {"as_of": "2026-01-01"}).status_code == 400


def test_admin_offers_no_add_change_or_delete(admin_client, pg_driver, payments):
    _two_postings(payments)
    line = LedgerLine.objects.first()
    assert (
        admin_client.get(reverse("admin:ultimate_jobs_ledgerline_add")).status_code
        == 403
    )
    delete = reverse("admin:ultimate_jobs_ledgerline_delete", args=[line.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert LedgerLine.objects.count() == 4
