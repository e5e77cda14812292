"""Declaring jobs: ``@job`` options, refusals, durations, retry policy, errors.

Nothing here touches the database: a declaration is checked in full at
import, and the retry decision and error types are pure.
"""

from __future__ import annotations

import json
import pickle
import random
from dataclasses import dataclass
from datetime import timedelta

import pytest

from django_ultimate_jobs import Concurrency, Retry, job
from django_ultimate_jobs import errors as errors_module
from django_ultimate_jobs.durations import MAX_DURATION_MS, parse_duration_ms
from django_ultimate_jobs.errors import (
    DurationInvalid,
    ErrorCodeDuplicate,
    JobDeclarationInvalid,
    JobDuplicate,
    JobInputInvalid,
    JobsError,
    JobTimeout,
    RateLimited,
    RetryAfter,
    RetryClass,
    Terminal,
    code_of,
    register_error_code,
    register_error_retry,
    registered_codes,
    retry_class_of,
)
from django_ultimate_jobs.registry import get_job, registered_jobs, unregister
from django_ultimate_jobs.retry import backoff_delay_ms, decide_retry, retry_schedule_ms

NAN = float("nan")
INF = float("inf")


@pytest.fixture(autouse=True)
def forget_declared_jobs():
    """Unregister every job a test declares, so names can be reused."""
    before = {handle.name for handle in registered_jobs()}
    yield
    for handle in registered_jobs():
        if handle.name not in before:
            unregister(handle.name)


@pytest.fixture
def isolated_error_codes(monkeypatch):
    """A private copy of the error-code table for tests that register codes."""
    monkeypatch.setattr(errors_module, "_REGISTRY", dict(errors_module._REGISTRY))


class FixedDraw:
    """A ``random.Random`` stand-in whose every draw is ``value``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def declare(**options):
    """Declare a valid handler under ``options`` and return the handle."""

    def handler(ctx, *, invoice_id: int, org_id: str = "acme"):
        return None

    options.setdefault("name", "tests.declaration.subject")
    return job(**options)(handler)


# -- a valid declaration -----------------------------------------------------


class InvoiceSchema:
    """A pydantic-like schema (only ``model_validate`` is looked for)."""

    @classmethod
    def model_validate(cls, data):
        return data


def test_every_option_of_the_spec_is_accepted_and_kept_on_the_handle():
    """The SPEC §1 example declares, and the handle carries each option."""
    by_invoice = lambda input: str(input["invoice_id"])  # noqa: E731
    charge_key = lambda input: f"charge:{input['invoice_id']}"  # noqa: E731
    org = lambda input: input["org_id"]  # noqa: E731

    def settled(*args, **kwargs):
        return None

    policy = Retry(
        attempts=5,
        backoff="exponential",
        delay="1s",
        max_delay="1h",
        jitter="equal",
        dead_letter=True,
    )

    @job(
        name="tests.declaration.charge",
        queue="billing",
        retry=policy,
        timeout="5m",
        step_timeout="30s",
        idempotency_key=charge_key,
        tenant=org,
        concurrency=Concurrency(limit=1, key=by_invoice, when_busy="wait"),
        priority=7,
        input_schema=InvoiceSchema,
        on_settled=settled,
    )
    def charge(ctx, *, invoice_id: int, org_id: str) -> dict:
        """Charge one invoice."""
        return {}

    assert charge.name == "tests.declaration.charge"
    assert charge.queue == "billing"
    assert charge.retry is policy
    assert (charge.timeout_ms, charge.step_timeout_ms) == (300_000, 30_000)
    assert charge.idempotency_key is charge_key
    assert charge.tenant is org
    assert charge.concurrency == Concurrency(limit=1, key=by_invoice, when_busy="wait")
    assert charge.priority == 7
    assert charge.input_schema is InvoiceSchema
    assert charge.on_settled is settled
    assert charge.__doc__ == "Charge one invoice."
    assert charge.idempotency_key_for({"invoice_id": 9, "org_id": "a"}) == "charge:9"
    assert charge.tenant_for({"invoice_id": 9, "org_id": "a"}) == "a"
    assert get_job("tests.declaration.charge") is charge
    described = charge.describe()
    assert json.loads(json.dumps(described)) == described
    assert described["retry_delays_ms"] == [1000, 2000, 4000, 8000]
    assert described["concurrency"] == {"limit": 1, "when_busy": "wait"}


def test_bare_decorator_uses_the_defaults():
    """Bare ``@job``: queue "default", 3 attempts, priority 0, no ceilings."""

    @job
    def handler(ctx):
        return None

    assert handler.queue == "default"
    assert handler.retry == Retry()
    assert handler.retry.attempts == 3
    assert handler.priority == 0
    assert (handler.timeout_ms, handler.step_timeout_ms) == (None, None)
    assert handler.concurrency is None
    assert handler.is_async is False


def test_default_name_is_module_and_qualname():
    """Without ``name=`` the durable name is ``<module>.<qualname>``."""

    @job
    def handler(ctx):
        return None

    expected = f"{__name__}.test_default_name_is_module_and_qualname.<locals>.handler"
    assert handler.name == expected
    assert get_job(expected) is handler


def test_an_int_concurrency_is_a_fleet_wide_cap():
    """``concurrency=3`` is ``Concurrency(limit=3)`` with no key, waiting when busy."""
    handle = declare(concurrency=3)
    assert handle.concurrency == Concurrency(limit=3, key=None, when_busy="wait")


def test_a_queue_function_is_asked_at_each_use():
    """``queue=<function>`` follows what it answers; a bad answer is refused."""
    answers = ["reports"]
    handle = declare(queue=lambda: answers[0])
    assert (handle.queue, handle.describe()["queue"]) == ("reports", "reports")
    answers[0] = "reports-2"
    assert handle.using().request({"invoice_id": 1, "org_id": "o"}).queue == "reports-2"
    answers[0] = " "
    with pytest.raises(JobDeclarationInvalid, match="queue= function of"):
        handle.enqueue(invoice_id=1, org_id="o")


def test_an_async_handler_is_declared_async():
    """An ``async def`` handler is accepted and flagged for the executor."""

    @job(name="tests.declaration.async")
    async def handler(ctx, *, n: int):
        return n

    assert handler.is_async is True


def test_a_handle_cannot_be_called_inline():
    """The handle is enqueued, never called: the worker is the only execution path."""
    handle = declare()
    with pytest.raises(TypeError):
        handle(None, invoice_id=1)


@pytest.mark.parametrize(
    ("priority"), [-100, 0, 100], ids=["lowest", "zero", "highest"]
)
def test_priority_bounds_are_inclusive(priority):
    """-100 and 100 are valid priorities."""
    assert declare(priority=priority).priority == priority


# -- handler signatures ------------------------------------------------------


def test_keyword_parameters_after_ctx_become_the_input_shape():
    """Required and optional keywords are read from the signature."""

    @job(name="tests.declaration.shape")
    def handler(ctx, invoice_id, *, org_id: str, amount: int = 0):
        return None

    assert handler.shape.required == {"invoice_id", "org_id"}
    assert handler.shape.optional == {"amount"}
    assert handler.shape.open is False


def test_var_keyword_handler_accepts_any_input():
    """A ``**input`` handler is open: any keyword is accepted."""

    @job(name="tests.declaration.open")
    def handler(ctx, **input):
        return None

    assert handler.shape.open is True


def no_parameters():
    return None


def ctx_keyword_only(*, ctx):
    return None


def star_args_only(*args):
    return None


def positional_only_input(ctx, invoice_id, /):
    return None


def star_args_input(ctx, *invoice_ids):
    return None


@pytest.mark.parametrize(
    ("handler", "fragment"),
    [
        (no_parameters, "job context as its first parameter"),
        (ctx_keyword_only, "job context as its first parameter"),
        (star_args_only, "job context as its first parameter"),
        (positional_only_input, "positional input (invoice_id)"),
        (star_args_input, "positional input (invoice_ids)"),
    ],
    ids=lambda value: getattr(value, "__name__", None),
)
def test_a_handler_shape_that_cannot_take_keyword_input_is_refused(handler, fragment):
    """No ``ctx`` first, or positional-only / ``*args`` input: refused."""
    with pytest.raises(JobDeclarationInvalid) as caught:
        job(name="tests.declaration.shape-refused")(handler)
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert fragment in str(caught.value)
    assert get_job("tests.declaration.shape-refused") is None


# -- refusals at declaration -------------------------------------------------


@dataclass
class InvoiceInput:
    invoice_id: int


BAD_OPTIONS = [
    # name and queue: non-empty, trimmed, printable, at most 200 characters
    ({"name": ""}, "name must be a non-empty string"),
    ({"name": " padded"}, "name must be written without surrounding spaces"),
    ({"name": "two\nlines"}, "name holds the non-printable character U+000A"),
    ({"name": "n" * 201}, "name must be at most 200 characters, not 201"),
    ({"name": 7}, "name must be a non-empty string"),
    ({"queue": ""}, "queue must be a non-empty string"),
    ({"queue": "billing\t"}, "queue must be written without surrounding spaces"),
    ({"queue": "bill\x00ing"}, "queue holds a NUL character"),
    ({"queue": None}, "queue must be a non-empty string"),
    # priority: a whole number in -100..100, never a bool
    ({"priority": 101}, "priority must be a whole number from -100 to 100"),
    ({"priority": -101}, "priority must be a whole number from -100 to 100"),
    ({"priority": True}, "priority must be a whole number from -100 to 100"),
    ({"priority": 1.5}, "priority must be a whole number from -100 to 100"),
    ({"priority": "5"}, "priority must be a whole number from -100 to 100"),
    # derivers and the hook must be callables
    ({"idempotency_key": "charge:1"}, "idempotency_key must be a callable"),
    ({"tenant": "acme"}, "tenant must be a callable"),
    ({"on_settled": 1}, "on_settled must be a callable"),
    # concurrency: a whole number >= 1, or a well-formed Concurrency
    ({"concurrency": 0}, "concurrency must be a whole number of at least 1"),
    ({"concurrency": -2}, "concurrency must be a whole number of at least 1"),
    ({"concurrency": 1.5}, "concurrency must be a whole number of at least 1"),
    ({"concurrency": NAN}, "concurrency must be a whole number of at least 1"),
    ({"concurrency": INF}, "concurrency must be a whole number of at least 1"),
    ({"concurrency": True}, "concurrency must be a whole number of at least 1"),
    ({"concurrency": "2"}, "concurrency must be a whole number of at least 1"),
    # an int, as the docs say: 2.0 was accepted as 2
    ({"concurrency": 2.0}, "concurrency must be a whole number of at least 1 (an int)"),
    (
        {"concurrency": Concurrency(limit=2.0)},  # type: ignore[arg-type]
        "concurrency must be a whole number of at least 1 (an int), got 2.0",
    ),
    (
        {"concurrency": Concurrency(limit=True)},
        "concurrency must be a whole number of at least 1 (an int), got True",
    ),
    # at most MAX_CONCURRENCY: the row's integer column held no more, and a
    # larger limit failed the enqueue with a raw DataError
    ({"concurrency": 10**12}, "concurrency must be at most 1_000_000"),
    ({"concurrency": 2**31}, "concurrency must be at most 1_000_000"),
    ({"concurrency": 1_000_001}, "concurrency must be at most 1_000_000"),
    (
        {"concurrency": Concurrency(limit=10**12)},
        "concurrency must be at most 1_000_000",
    ),
    (
        {"concurrency": Concurrency(limit=0)},
        "concurrency must be a whole number of at least 1",
    ),
    (
        {"concurrency": Concurrency(limit=2, when_busy="drop")},  # type: ignore[arg-type]
        "when_busy=...) must be 'wait' or 'fail'",
    ),
    (
        {"concurrency": Concurrency(limit=1, key="invoice_id")},  # type: ignore[arg-type]
        "Concurrency(key=...) must be a callable",
    ),
    # ceilings: finite, more than zero, a known format
    ({"timeout": 0}, "timeout must be more than zero"),
    ({"timeout": -1}, "timeout must be more than zero"),
    ({"timeout": INF}, "timeout must be an int of milliseconds, not a float"),
    ({"timeout": NAN}, "timeout must be an int of milliseconds, not a float"),
    ({"timeout": "0s"}, "timeout must be more than zero"),
    ({"timeout": timedelta(0)}, "timeout must be more than zero"),
    ({"timeout": timedelta(seconds=-1)}, "timeout must be more than zero"),
    ({"timeout": "soon"}, "is not a duration like"),
    ({"timeout": "5 minutes"}, "is not a duration like"),
    ({"timeout": ""}, "is not a duration like"),
    ({"timeout": True}, "timeout must be a duration, not a bool"),
    ({"timeout": [5]}, "timeout must be a duration, not list"),
    ({"step_timeout": 0}, "step_timeout must be more than zero"),
    ({"step_timeout": -5}, "step_timeout must be more than zero"),
    ({"step_timeout": INF}, "step_timeout must be an int of milliseconds, not a float"),
    ({"step_timeout": NAN}, "step_timeout must be an int of milliseconds, not a float"),
    ({"step_timeout": "a while"}, "is not a duration like"),
    # input_schema: a pydantic model, a dataclass or a callable
    ({"input_schema": 42}, "input_schema of"),
    ({"input_schema": "InvoiceInput"}, "input_schema of"),
    ({"input_schema": InvoiceInput(invoice_id=1)}, "input_schema of"),
    # retry: a Retry(...)
    ({"retry": 3}, "retry must be a Retry(...)"),
]


@pytest.mark.parametrize(
    ("options", "fragment"), BAD_OPTIONS, ids=[repr(o) for o, _ in BAD_OPTIONS]
)
def test_a_bad_option_is_refused_at_declaration(options, fragment):
    """A bad option: ``X_JOB_DECLARATION_INVALID`` naming it; nothing registers."""
    name = options.get("name", "tests.declaration.refused")
    with pytest.raises(JobDeclarationInvalid) as caught:
        declare(**{"name": "tests.declaration.refused", **options})
    error = caught.value
    assert error.code == "X_JOB_DECLARATION_INVALID"
    assert fragment in error.cause
    assert error.meta["problems"]
    assert error.fix == JobDeclarationInvalid.default_fix
    if isinstance(name, str):
        assert get_job(name) is None


def test_every_problem_of_a_declaration_is_listed_in_one_error():
    """Ten problems at once: one ``X_JOB_DECLARATION_INVALID`` listing all ten."""
    with pytest.raises(JobDeclarationInvalid) as caught:

        @job(
            name="tests.declaration.many-problems",
            queue=" ",
            priority=500,
            timeout="soon",
            step_timeout=0,
            concurrency=0,
            idempotency_key="charge:1",
            tenant=42,
            on_settled="notify",
            input_schema=7,
        )
        def handler(*, invoice_id):
            return None

    error = caught.value
    assert error.code == "X_JOB_DECLARATION_INVALID"
    problems = error.meta["problems"]
    expected_starts = [
        "queue must be",
        "priority must be",
        "timeout 'soon'",
        "step_timeout must be",
        "idempotency_key must be",
        "tenant must be",
        "on_settled must be",
        "concurrency must be",
        "the handler of tests.declaration.many-problems must take the job context",
        "input_schema of",
    ]
    assert len(problems) == len(expected_starts), problems
    for start in expected_starts:
        assert sum(p.startswith(start) for p in problems) == 1, (start, problems)
        assert start in str(error)
    assert error.meta["job"] == "tests.declaration.many-problems"
    assert get_job("tests.declaration.many-problems") is None


# -- registration --------------------------------------------------------------


def test_two_declarations_of_one_name_are_refused():
    """Another function under a taken name: ``X_JOB_DUPLICATE``; the first stays."""

    @job(name="tests.declaration.taken")
    def first(ctx):
        return None

    def second(ctx):
        return None

    with pytest.raises(JobDuplicate) as caught:
        job(name="tests.declaration.taken")(second)
    assert caught.value.code == "X_JOB_DUPLICATE"
    assert caught.value.meta == {"name": "tests.declaration.taken"}
    assert "first" in caught.value.cause and "second" in caught.value.cause
    assert get_job("tests.declaration.taken") is first


def test_redeclaring_the_same_function_is_accepted():
    """The same module and qualname declared again (a re-import) replaces quietly."""
    handles = []
    for _ in range(2):

        @job(name="tests.declaration.reimported")
        def handler(ctx):
            return None

        handles.append(handler)

    assert handles[0] is not handles[1]
    assert handles[0].origin == handles[1].origin
    assert get_job("tests.declaration.reimported") is handles[1]


# -- durations -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("3d", 259_200_000),
        ("1.5s", 1_500),
        (1_500, 1_500),
        (timedelta(seconds=30), 30_000),
        (timedelta(milliseconds=250), 250),
    ],
    ids=repr,
)
def test_durations_parse_to_milliseconds(value, ms):
    """Strings with a unit, ints of ms and timedeltas all parse to whole ms."""
    assert parse_duration_ms(value) == ms


def test_declared_ceilings_accept_every_duration_form():
    """``timeout``/``step_timeout`` take a string, an int of ms or a timedelta."""
    assert declare(timeout="2h").timeout_ms == 7_200_000
    assert declare(timeout=1_500).timeout_ms == 1_500
    assert declare(step_timeout=timedelta(minutes=1)).step_timeout_ms == 60_000


@pytest.mark.parametrize(
    "value",
    [0, -1, -0.5, NAN, INF, -INF, "0s", "-5s", "5", "5 s s", "5M", "five", True, None],
    ids=repr,
)
def test_a_ceiling_that_is_not_a_finite_positive_duration_is_refused(value):
    """Zero, negatives, non-finite, bools and garbage: ``X_DURATION_INVALID``."""
    with pytest.raises(DurationInvalid) as caught:
        parse_duration_ms(value, what="timeout")
    assert caught.value.code == "X_DURATION_INVALID"
    assert "timeout" in caught.value.cause


def test_zero_is_a_valid_delay_but_not_a_ceiling():
    """``allow_zero`` admits 0 for delays; ceilings refuse it."""
    assert parse_duration_ms(0, allow_zero=True) == 0
    assert parse_duration_ms("0s", allow_zero=True) == 0
    with pytest.raises(DurationInvalid):
        parse_duration_ms(-1, allow_zero=True)


@pytest.mark.parametrize("value", ["0.4ms", timedelta(microseconds=100), 0.2], ids=repr)
def test_a_positive_ceiling_below_one_millisecond_is_refused(value):
    """A ceiling that rounds to 0 ms is refused, never turned into a zero ceiling."""
    try:
        parsed = parse_duration_ms(value, what="timeout")
    except DurationInvalid:
        return
    pytest.fail(
        f"BUG: parse_duration_ms({value!r}) returned {parsed} ms for a ceiling; "
        "a positive value that rounds to 0 must raise X_DURATION_INVALID"
    )


def test_an_integer_too_large_for_a_float_is_refused_with_a_code():
    """``10**400`` ms raises ``X_DURATION_INVALID``, not a bare ``OverflowError``."""
    try:
        parse_duration_ms(10**400, what="timeout")
    except DurationInvalid as error:
        assert error.code == "X_DURATION_INVALID"
    except OverflowError as error:
        pytest.fail(
            f"BUG: parse_duration_ms(10**400) raised OverflowError ({error}); "
            "an out-of-range duration must raise X_DURATION_INVALID"
        )
    else:
        pytest.fail("parse_duration_ms(10**400) was accepted")


@pytest.mark.parametrize(
    "value",
    [" 5s ", "5 s", "5s\n", "\u0665s", "1.5", 1.5, 2_000.0, "1e3s", "+5s"],
    ids=repr,
)
def test_a_duration_outside_the_documented_grammar_is_refused(value):
    """Digits in ASCII and a unit, no spaces; an int (never a float) of ms.

    ``" 5s "``, ``"5 s"`` or an Arabic-Indic ``"\u0665s"`` would otherwise be
    read as five seconds, and ``1.5`` as 2 ms.
    """
    with pytest.raises(DurationInvalid) as caught:
        parse_duration_ms(value, what="delay", allow_zero=True)
    assert "delay" in caught.value.cause


def test_the_longest_duration_is_36500_days():
    """``"36500d"`` (100 years) is the bound, in every form; a day more is refused."""
    assert parse_duration_ms("36500d") == MAX_DURATION_MS == 36_500 * 86_400_000
    assert parse_duration_ms(timedelta(days=36_500)) == MAX_DURATION_MS
    for value in (
        "36501d",
        MAX_DURATION_MS + 1,
        timedelta.max,
        10**20,
        "9" * 400 + "d",
    ):
        with pytest.raises(DurationInvalid) as caught:
            parse_duration_ms(value, what="delay", allow_zero=True)
        assert "at most 36500d (100 years)" in caught.value.cause
        assert "36500d" in caught.value.fix


@pytest.mark.parametrize(
    "declaring",
    [
        lambda: declare(timeout="99999999d"),
        lambda: declare(step_timeout=10**20),
        lambda: Retry(max_delay="36501d"),
        lambda: Retry(delay=timedelta.max),
    ],
    ids=["timeout", "step_timeout", "max_delay", "delay"],
)
def test_a_declared_duration_past_the_bound_is_a_declaration_error(declaring):
    """A ceiling or a retry delay over 36500d: ``X_JOB_DECLARATION_INVALID`` at import."""
    with pytest.raises(JobsError) as caught:
        declaring()
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert "at most 36500d" in caught.value.cause


# -- the Retry policy ----------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"attempts": 0}, "Retry(attempts=...) must be a whole count of at least 1"),
        ({"attempts": -3}, "Retry(attempts=...) must be a whole count of at least 1"),
        ({"attempts": 1.5}, "Retry(attempts=...) must be a whole count of at least 1"),
        ({"attempts": True}, "Retry(attempts=...) must be a whole count of at least 1"),
        ({"attempts": "3"}, "Retry(attempts=...) must be a whole count of at least 1"),
        ({"attempts": 2.0}, "Retry(attempts=...) must be a whole count of at least 1"),
        # the row's integer column: 2**31 failed every enqueue with a DataError
        ({"attempts": 2**31}, "Retry(attempts=...) must be at most 1_000_000"),
        ({"attempts": 1_000_001}, "Retry(attempts=...) must be at most 1_000_000"),
        ({"backoff": "quadratic"}, "Retry(backoff=...) must be exponential"),
        ({"jitter": "random"}, "Retry(jitter=...) must be equal, full or none"),
        ({"jitter": True}, "Retry(jitter=...) must be equal, full or none"),
        ({"delay": "soon"}, "Retry(delay=...) 'soon' is not a duration"),
        ({"delay": -1}, "Retry(delay=...) must be zero or more"),
        (
            {"delay": NAN},
            "Retry(delay=...) must be an int of milliseconds, not a float",
        ),
        (
            {"delay": INF},
            "Retry(delay=...) must be an int of milliseconds, not a float",
        ),
        ({"delay": True}, "Retry(delay=...) must be a duration, not a bool"),
        ({"max_delay": 0}, "Retry(max_delay=...) must be more than zero"),
        ({"max_delay": "0s"}, "Retry(max_delay=...) must be more than zero"),
        ({"max_delay": "later"}, "Retry(max_delay=...) 'later' is not a duration"),
    ],
    ids=repr,
)
def test_a_bad_retry_policy_is_refused_when_built(options, fragment):
    """``Retry(...)`` checks itself: a bad field raises ``X_JOB_DECLARATION_INVALID``.

    Durations included: SPEC §1 says a non-finite or non-positive ceiling is
    ``X_JOB_DECLARATION_INVALID``, as ``timeout=`` already reports it.
    """
    with pytest.raises(JobsError) as caught:
        Retry(**options)
    assert fragment in caught.value.cause
    assert caught.value.code == "X_JOB_DECLARATION_INVALID", (
        f"BUG: Retry({options!r}) raised {caught.value.code}; a refused Retry "
        "field must carry X_JOB_DECLARATION_INVALID like every declaration refusal"
    )


def test_a_zero_base_delay_is_allowed():
    """``Retry(delay=0)`` retries at once; ``attempts=1`` never retries."""
    assert retry_schedule_ms(Retry(attempts=3, delay=0)) == [0, 0]
    assert retry_schedule_ms(Retry(attempts=1)) == []


@pytest.mark.parametrize(
    ("backoff", "max_delay", "expected"),
    [
        ("exponential", "1h", [1_000, 2_000, 4_000, 8_000, 16_000, 32_000]),
        ("exponential", "10s", [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]),
        ("linear", "1h", [1_000, 2_000, 3_000, 4_000, 5_000, 6_000]),
        ("linear", "2500ms", [1_000, 2_000, 2_500, 2_500, 2_500, 2_500]),
        ("fixed", "1h", [1_000] * 6),
        ("fixed", "500ms", [500] * 6),
    ],
)
def test_retry_schedule_follows_the_backoff_curve_capped_by_max_delay(
    backoff, max_delay, expected
):
    """Exponential doubles, linear adds, fixed repeats; ``max_delay`` caps each."""
    policy = Retry(attempts=7, backoff=backoff, delay="1s", max_delay=max_delay)
    assert retry_schedule_ms(policy) == expected


def test_retry_schedule_ignores_jitter():
    """The schedule lists every delay with jitter off, whatever the policy's jitter."""
    for jitter in ("equal", "full", "none"):
        policy = Retry(attempts=5, delay="1s", jitter=jitter)
        assert retry_schedule_ms(policy) == [1_000, 2_000, 4_000, 8_000]


def test_a_huge_attempt_number_is_capped_without_overflow():
    """Attempt 10,000 of an exponential curve waits exactly ``max_delay``."""
    policy = Retry(attempts=20_000, delay="1s", max_delay="1h", jitter="none")
    assert backoff_delay_ms(policy, 10_000) == 3_600_000


@pytest.mark.parametrize("attempt", [1, 3, 8])
def test_equal_jitter_waits_between_half_and_all_of_the_capped_delay(attempt):
    """Equal jitter: draw 0 gives capped/2, a draw near 1 gives about capped."""
    policy = Retry(attempts=10, delay="1s", max_delay="1m", jitter="equal")
    capped = min(1_000 * 2 ** (attempt - 1), 60_000)
    assert backoff_delay_ms(policy, attempt, rng=FixedDraw(0.0)) == capped / 2
    assert backoff_delay_ms(policy, attempt, rng=FixedDraw(0.999999)) == round(
        capped / 2 + capped / 2 * 0.999999
    )
    draws = [
        backoff_delay_ms(policy, attempt, rng=random.Random(seed))
        for seed in range(500)
    ]
    assert all(capped / 2 <= d <= capped for d in draws)
    assert min(draws) < capped * 0.6 and max(draws) > capped * 0.9


@pytest.mark.parametrize("attempt", [1, 3, 8])
def test_full_jitter_waits_between_zero_and_the_capped_delay(attempt):
    """Full jitter: anywhere in [0, capped]."""
    policy = Retry(attempts=10, delay="1s", max_delay="1m", jitter="full")
    capped = min(1_000 * 2 ** (attempt - 1), 60_000)
    assert backoff_delay_ms(policy, attempt, rng=FixedDraw(0.0)) == 0
    draws = [
        backoff_delay_ms(policy, attempt, rng=random.Random(seed))
        for seed in range(500)
    ]
    assert all(0 <= d <= capped for d in draws)
    assert min(draws) < capped * 0.1 and max(draws) > capped * 0.9


def test_no_jitter_waits_exactly_the_capped_delay():
    """``jitter="none"`` ignores the random source."""
    policy = Retry(attempts=10, delay="1s", max_delay="5s", jitter="none")
    for draw in (0.0, 0.5, 0.999):
        assert [
            backoff_delay_ms(policy, n, rng=FixedDraw(draw)) for n in (1, 2, 3, 4)
        ] == [
            1_000,
            2_000,
            4_000,
            5_000,
        ]


# -- the retry decision ----------------------------------------------------------


POLICY = Retry(attempts=5, delay="1s", max_delay="1m", jitter="equal")


def test_terminal_stops_now_without_spending_the_remaining_attempts():
    """``Terminal`` on attempt 1 of 5: no retry, stopped by ``terminal``."""
    decision = decide_retry(POLICY, 1, Terminal("the card was declined"))
    assert (decision.retry, decision.stopped_by) == (False, "terminal")


def test_terminal_on_the_final_attempt_is_still_reported_as_terminal():
    """Terminal wins over exhaustion in the stop reason."""
    assert decide_retry(POLICY, 5, Terminal()).stopped_by == "terminal"


def test_retry_after_waits_the_stated_delay():
    """``RetryAfter(30)`` retries in exactly 30 s and still counts the attempt."""
    decision = decide_retry(POLICY, 1, RetryAfter(30), rng=FixedDraw(0.9))
    assert (decision.retry, decision.delay_ms, decision.counts_as_attempt) == (
        True,
        30_000,
        True,
    )


def test_retry_after_is_capped_by_max_delay():
    """A stated two hours under a one-minute ``max_delay`` waits one minute."""
    assert decide_retry(POLICY, 2, RetryAfter(7_200)).delay_ms == 60_000


@pytest.mark.parametrize("seconds", [NAN, INF, -5.0], ids=repr)
def test_a_stated_delay_not_finite_or_negative_still_gives_a_bounded_wait(seconds):
    """``RetryAfter(nan|inf|-5)`` retries within [0, max_delay] and never raises."""
    try:
        decision = decide_retry(POLICY, 1, RetryAfter(seconds))
    except (ValueError, OverflowError) as error:
        pytest.fail(
            f"BUG: decide_retry raised {type(error).__name__} ({error}) for "
            f"RetryAfter({seconds!r}); the classifier must not crash on a stated delay"
        )
    assert decision.retry is True
    assert 0 <= decision.delay_ms <= POLICY.max_delay_ms, (
        f"BUG: RetryAfter({seconds!r}) gave delay_ms={decision.delay_ms}, "
        f"outside [0, {POLICY.max_delay_ms}]"
    )


def test_rate_limited_is_not_counted_and_waits_at_least_the_stated_delay():
    """``RateLimited(20)``: uncounted, waits >= 20 s (a floor, never capped)."""
    for draw in (0.0, 0.5, 0.999):
        decision = decide_retry(POLICY, 2, RateLimited(20), rng=FixedDraw(draw))
        assert decision.retry is True
        assert decision.counts_as_attempt is False
        assert 20_000 <= decision.delay_ms <= 30_000
    long = decide_retry(POLICY, 2, RateLimited(600), rng=FixedDraw(0.0))
    assert long.delay_ms == 600_000


@pytest.mark.parametrize("error", [RateLimited(1e20), RetryAfter(1e20)], ids=repr)
def test_a_stated_delay_past_100_years_falls_back_to_the_backoff(error):
    """``RateLimited(1e20)`` would be a run time PostgreSQL cannot store (and a
    settle that fails every time): a stated delay over 36500 days is ignored."""
    decision = decide_retry(POLICY, 2, error, rng=FixedDraw(0.0))
    assert decision.retry is True
    assert decision.delay_ms <= POLICY.max_delay_ms * 2, decision


def test_rate_limited_on_the_final_attempt_still_retries():
    """An uncounted deferral does not hit the attempt limit."""
    decision = decide_retry(POLICY, 5, RateLimited(1))
    assert (decision.retry, decision.counts_as_attempt) == (True, False)


def test_rate_limited_without_a_stated_delay_waits_at_least_the_backoff():
    """No stated delay: the jitter-free backoff of this attempt is the floor."""
    decision = decide_retry(POLICY, 3, RateLimited(), rng=FixedDraw(0.0))
    assert decision.delay_ms == 4_000
    assert decision.counts_as_attempt is False


class AppError(Exception):
    """An app's own exception carrying an ``X_`` code."""

    def __init__(self, code: str, meta: dict | None = None) -> None:
        super().__init__(code)
        self.code = code
        self.meta = meta or {}


@pytest.mark.parametrize(
    "error",
    [
        ValueError("boom"),
        AppError("X_APP_NEVER_REGISTERED"),
        JobTimeout("the attempt ran past its timeout"),
        AppError("X_OVERLOADED"),  # retry-after class, but no stated delay
    ],
    ids=[
        "plain-exception",
        "unregistered-app-code",
        "retryable-code",
        "no-stated-delay",
    ],
)
def test_other_errors_follow_the_backoff_schedule(error):
    """Unknown, unclassified and retryable errors wait the jittered backoff."""
    low = decide_retry(POLICY, 2, error, rng=FixedDraw(0.0))
    high = decide_retry(POLICY, 2, error, rng=FixedDraw(0.999999))
    assert (low.retry, low.counts_as_attempt, low.stopped_by) == (True, True, None)
    assert (low.delay_ms, high.delay_ms) == (1_000, 2_000)


def test_an_app_code_registered_terminal_stops_now(isolated_error_codes):
    """``register_error_retry(code, "terminal")`` makes that app code terminal."""
    register_error_retry("X_APP_CARD_DECLINED", RetryClass.TERMINAL)
    decision = decide_retry(POLICY, 1, AppError("X_APP_CARD_DECLINED"))
    assert (decision.retry, decision.stopped_by) == (False, "terminal")


def test_an_app_code_registered_retry_after_waits_its_stated_delay(
    isolated_error_codes,
):
    """A retry-after app code uses ``meta["retry_after_seconds"]``."""
    register_error_retry("X_APP_BUSY", "retry-after")
    error = AppError("X_APP_BUSY", {"retry_after_seconds": 12})
    assert decide_retry(POLICY, 1, error).delay_ms == 12_000


@pytest.mark.parametrize(
    "error", [ValueError("boom"), RetryAfter(5), JobTimeout("slow")], ids=repr
)
def test_exhausted_attempts_stop(error):
    """On the last attempt any counted failure stops with ``attempts-exhausted``."""
    decision = decide_retry(POLICY, 5, error)
    assert (decision.retry, decision.stopped_by) == (False, "attempts-exhausted")


# -- the errors module -------------------------------------------------------------


def test_an_error_renders_code_cause_and_fix():
    """``render()`` is ``CODE: cause (fix: ...)`` and is the exception's text."""
    error = JobInputInvalid("the input is not JSON-safe", meta={"job": "tests.noop"})
    assert error.code == "X_JOB_INPUT_INVALID"
    assert error.cause == "the input is not JSON-safe"
    assert error.fix == JobInputInvalid.default_fix
    assert error.meta == {"job": "tests.noop"}
    assert error.render() == (
        f"X_JOB_INPUT_INVALID: the input is not JSON-safe (fix: {error.fix})"
    )
    assert str(error) == error.render()


def test_an_error_without_a_fix_renders_code_and_cause_only():
    """No fix: no ``(fix: ...)`` suffix."""
    assert JobsError("something broke").render() == "X_JOBS_ERROR: something broke"


def test_an_explicit_fix_and_code_override_the_defaults():
    """``fix=`` and ``code=`` given to an instance win over the class values."""
    error = Terminal("declined", fix="ask for another card", code="X_APP_DECLINED")
    assert (error.code, error.fix) == ("X_APP_DECLINED", "ask for another card")
    assert code_of(error) == "X_APP_DECLINED"


def test_meta_is_copied_from_the_caller():
    """Mutating the caller's dict afterwards does not change the error."""
    meta = {"job": "a"}
    error = JobsError("x", meta=meta)
    meta["job"] = "b"
    assert error.meta == {"job": "a"}


@pytest.mark.parametrize(
    "error",
    [
        JobDuplicate("a live job holds the key", meta={"holder": "0190-abc"}),
        Terminal("declined", code="X_APP_DECLINED", meta={"card": "last4"}),
        RetryAfter(30),
        RateLimited(),
        JobDeclarationInvalid("bad", meta={"problems": ["a", "b"]}),
    ],
    ids=lambda e: type(e).__name__,
)
def test_pickling_keeps_class_code_cause_fix_and_meta(error):
    """An error crossing a process boundary arrives whole."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (copy.code, copy.cause, copy.fix, copy.meta) == (
        error.code,
        error.cause,
        error.fix,
        error.meta,
    )
    assert str(copy) == str(error)


def test_retry_after_carries_its_delay_in_meta():
    """``RetryAfter(s)`` states ``retry_after_seconds``; ``RateLimited()`` none."""
    assert RetryAfter(2.5).meta == {"retry_after_seconds": 2.5}
    assert RateLimited(3).meta == {"retry_after_seconds": 3.0}
    assert RateLimited().meta == {}


def test_registering_a_code_twice_with_different_classes_is_refused(
    isolated_error_codes,
):
    """Same code, same class: accepted; another class: ``X_ERROR_CODE_DUPLICATE``."""
    register_error_code("X_TEST_DECL_ONCE", RetryClass.TERMINAL)
    register_error_code("X_TEST_DECL_ONCE", "terminal")
    with pytest.raises(ErrorCodeDuplicate) as caught:
        register_error_code("X_TEST_DECL_ONCE", RetryClass.RETRYABLE)
    assert caught.value.code == "X_ERROR_CODE_DUPLICATE"
    assert caught.value.meta == {"code": "X_TEST_DECL_ONCE"}
    assert retry_class_of("X_TEST_DECL_ONCE") is RetryClass.TERMINAL


def test_a_subclass_claiming_a_taken_code_with_another_class_is_refused(
    isolated_error_codes,
):
    """Defining an error class with a registered code and another retry class raises."""
    with pytest.raises(ErrorCodeDuplicate):

        class Clash(JobsError):
            code = "X_JOB_DUPLICATE"
            retry_class = RetryClass.TERMINAL


def test_register_error_retry_may_reclassify(isolated_error_codes):
    """Apps reclassify their own codes with ``register_error_retry``."""
    register_error_retry("X_TEST_DECL_RECLASS", "retryable")
    register_error_retry("X_TEST_DECL_RECLASS", "terminal")
    assert retry_class_of("X_TEST_DECL_RECLASS") is RetryClass.TERMINAL


@pytest.mark.parametrize("code", ["lower_case", "JOB_DUPLICATE", "X_HAS SPACE"])
def test_a_malformed_code_is_refused(code, isolated_error_codes):
    """Codes look like ``X_UPPER_SNAKE``."""
    with pytest.raises(ValueError):
        register_error_code(code, "terminal")


def test_the_built_in_codes_carry_their_retry_classes():
    """The table the worker's classifier reads."""
    codes = registered_codes()
    assert codes["X_JOB_DECLARATION_INVALID"] is RetryClass.NOT_IN_JOB
    assert codes["X_JOB_INPUT_INVALID"] is RetryClass.TERMINAL
    assert codes["X_JOB_TERMINAL"] is RetryClass.TERMINAL
    assert codes["X_RATE_LIMITED"] is RetryClass.RETRY_AFTER
    assert codes["X_JOB_TIMEOUT"] is RetryClass.RETRYABLE
    assert codes["X_JOB_DUPLICATE"] is RetryClass.UNCLASSIFIED
    assert list(codes) == sorted(codes)


def test_code_of_reads_any_exception_with_an_x_code():
    """App exceptions count when ``code`` is a string starting with ``X_``."""
    assert code_of(AppError("X_APP_ANYTHING")) == "X_APP_ANYTHING"
    assert code_of(AppError("NOT_AN_X_CODE")) is None
    assert code_of(ValueError("boom")) is None
    assert retry_class_of(None) is RetryClass.UNCLASSIFIED
    assert retry_class_of("X_NEVER_REGISTERED_ANYWHERE") is RetryClass.UNCLASSIFIED
