"""Jobs the test suite enqueues (autodiscovered like an app's jobs.py)."""

import os
import time

from django_ultimate_jobs import Retry, backfill, job
from django_ultimate_jobs.drivers import get_driver
from django_ultimate_jobs.drivers.base import ClaimIdentity
from django_ultimate_jobs.errors import Aborted
from django_ultimate_jobs.webhooks import webhook


@job(name="tests.noop")
def noop(ctx, **input):
    return None


@job(
    name="tests.charge",
    queue="billing",
    retry=Retry(attempts=5, delay="1s"),
    idempotency_key=lambda input: f"charge:{input['invoice_id']}",
    tenant=lambda input: input["org_id"],
)
def charge(ctx, *, invoice_id: int, org_id: str, amount: int = 0):
    return {"charged": invoice_id}


# -- jobs of the acceptance tier (tests/acceptance) ---------------------------
#
# Each records "external" effects in the effects table (autocommit), tagged
# with the claim that wrote them (ctx.claim, ctx.worker_id).


def _claim_of(ctx) -> tuple[int, str]:
    return ctx.claim, ctx.worker_id


def _record(ctx, kind: str) -> None:
    from tests.jobsapp.models import Effect

    claims, worker = _claim_of(ctx)
    Effect.objects.create(
        job_id=ctx.job_id, attempt=ctx.attempt, claims=claims, worker=worker, kind=kind
    )


@job(name="tests.effect", retry=Retry(attempts=5, delay="100ms"))
def effect(ctx, *, sleep_ms: int = 0, tag: str | None = None, progress: bool = False):
    """Record one effect, then (optionally) report progress (a write to the
    job store from the body's thread) and wait cooperatively."""
    _record(ctx, "run")
    if progress:
        ctx.progress(1, 1)
    if sleep_ms:
        ctx.cancellation.wait(sleep_ms / 1000)
        ctx.cancellation.raise_if_cancelled()


@job(name="tests.fan_out", retry=Retry(attempts=3, delay="100ms"))
def fan_out(ctx, *, tags: list[str]):
    """Enqueue an ``effect`` per tag in one transaction; answer their ids.

    On a driver that cannot join the transaction (Redis) the children go
    through the outbox, published by this worker's relay after the commit.
    """
    from django.db import transaction

    with transaction.atomic():
        children = [effect.enqueue(tag=tag) for tag in tags]
    return [str(child.id) for child in children]


@job(name="tests.slow", retry=Retry(attempts=3, delay="100ms"))
def slow(ctx, *, seconds: float = 30.0, flag: str | None = None):
    """Record a start, then wait up to ``seconds``; cooperative.

    Ends early when ``flag`` (a file path) is removed; a cancellation (a
    drain, a lost lease) is raised, so a drained run is handed back.
    """
    _record(ctx, "start")
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        if flag is not None and not os.path.exists(flag):
            break
        if ctx.cancellation.wait(min(0.05, remaining)):
            break
    ctx.cancellation.raise_if_cancelled()
    _record(ctx, "end")


def _hang(ctx, flag: str, probe: bool) -> None:
    """Record a start, then block while ``flag`` exists, ignoring cancellation.

    With ``probe``, after waking: report progress, then try a FENCED write
    (``record_progress`` with this attempt's claim identity) and write its
    answer to ``<flag>.fence.<claim>``; the "after" effect is recorded only
    when the fenced write landed (the attempt still owned the row).
    """
    _record(ctx, "start")
    while os.path.exists(flag):
        time.sleep(0.05)  # a job body that ignores cancellation (not a test wait)
    if not probe:
        return
    claims, _worker = _claim_of(ctx)
    try:
        ctx.progress(1, 1, note=f"claim {claims}")
    except Aborted:
        pass
    # The fenced write a stalled attempt must not land: the same statement
    # as ctx.progress, called directly so its answer can be recorded.
    landed = get_driver().record_progress(
        ctx.job_id,
        ClaimIdentity(ctx.worker_id, ctx.claim),
        {"done": 1, "total": 1, "note": f"fenced {claims}"},
    )
    with open(f"{flag}.fence.{claims}", "w") as answer:
        answer.write(str(bool(landed)))
    if landed:
        _record(ctx, "after")


@job(name="tests.hang", retry=Retry(attempts=3, delay="100ms"))
def hang(ctx, *, flag: str, probe: bool = False):
    """Block while ``flag`` exists (for SIGKILL / SIGSTOP); 3 attempts."""
    _hang(ctx, flag, probe)


@job(name="tests.hang_two", retry=Retry(attempts=2, delay="100ms"))
def hang_two(ctx, *, flag: str):
    """Like ``tests.hang`` with 2 attempts (the final-attempt crash test)."""
    _hang(ctx, flag, False)


@job(name="tests.fail_once", retry=Retry(attempts=3, delay="100ms", jitter="none"))
def fail_once(ctx, **input):
    """Fail the first attempt, succeed afterwards."""
    _record(ctx, "run")
    if ctx.attempt == 1:
        raise RuntimeError("tests.fail_once fails its first attempt")
    return {"attempt": ctx.attempt}


@job(
    name="tests.retry_in_a_second",
    retry=Retry(attempts=2, delay="1s", jitter="none"),
)
def retry_in_a_second(ctx, **input):
    """Fail the first attempt: the retry falls due one second after it."""
    _record(ctx, "run")
    if ctx.attempt == 1:
        raise RuntimeError("tests.retry_in_a_second fails its first attempt")


class AppBroken(Exception):
    """An app's own coded error: any exception with an ``X_...`` code counts."""

    code = "X_APP_BROKEN"


@job(name="tests.always_fail", retry=Retry(attempts=2, delay="100ms", jitter="none"))
def always_fail(ctx, **input):
    """Fail every attempt with a coded error (two attempts, then dead)."""
    raise AppBroken("the gateway said no\nsecond line")


@job(name="tests.atomic_steps", retry=Retry(attempts=5, delay="100ms"))
def atomic_steps(ctx, *, order: str):
    """Two atomic steps, each writing effect rows in its own transaction."""

    def write(kind: str) -> str:
        from tests.jobsapp.models import Effect

        Effect.objects.create(
            job_id=ctx.job_id,
            attempt=ctx.attempt,
            claims=ctx.claim,
            worker=ctx.worker_id,
            kind=kind,
        )
        return kind

    first = ctx.step.run("reserve", write, f"reserve:{order}", atomic=True)
    second = ctx.step.run("charge", write, f"charge:{order}", atomic=True)
    return [first, second]


class CardDeclined(Exception):
    """An app's own coded error (``code_of`` reads any ``X_`` code).

    Not ``X_CARD_DECLINED``: the browser tests declare that code terminal, and
    a code's retry class holds for the whole test process."""

    code = "X_CARD_SOFT_DECLINED"


@job(name="tests.traced_steps", retry=Retry(attempts=3, delay="100ms", jitter="none"))
def traced_steps(ctx, *, order: str):
    """A step, then a failure on the first attempt; the retry replays the
    step and runs a second one (tests/test_tracing.py, acceptance/test_traces.py)."""
    ctx.step.run("reserve", lambda: f"reserve:{order}")
    if ctx.attempt == 1:
        raise CardDeclined(f"card declined for {order} (first attempt)")
    ctx.step.run("charge", lambda: f"charge:{order}")
    return {"attempt": ctx.attempt}


# -- a cron task for the scheduler's acceptance tests ---------------------------
#
# Declared only in runjobs subprocesses started with UJ_CRON_TASK=1, so every
# other worker of the suite runs with no task (and so no scheduler thread).

if os.environ.get("UJ_CRON_TASK"):
    from django_ultimate_jobs import task

    task(name="tests.cron.hourly", cron="@hourly", tz="Europe/Paris", job=noop)


# -- a poison job and its healthy neighbours (reliability round) ---------------


@job(name="tests.poison", retry=Retry(attempts=3, delay="100ms"))
def poison(ctx):
    """Kill the worker process from inside the body (a segfault, an OOM kill)."""
    os._exit(137)


@job(
    name="tests.tenant_start",
    retry=Retry(attempts=3, delay="100ms"),
    tenant=lambda input: input["tenant"],
)
def tenant_start(ctx, *, tenant: str, sleep_ms: int = 20):
    """Record its start (kind ``start:<tenant>``), then wait ``sleep_ms``."""
    _record(ctx, f"start:{tenant}")
    ctx.cancellation.wait(sleep_ms / 1000)


@job(name="tests.steady", retry=Retry(attempts=3, delay="100ms"))
def steady(ctx, *, sleep_ms: int = 100):
    """Record a run, then take ``sleep_ms`` (cooperatively)."""
    _record(ctx, "run")
    ctx.cancellation.wait(sleep_ms / 1000)
    ctx.cancellation.raise_if_cancelled()


@job(name="tests.write_after", retry=Retry(attempts=3, delay="100ms"))
def write_after(ctx, *, sleep_ms: int):
    """Record a start, wait ``sleep_ms``, then write again (needs the database)."""
    _record(ctx, "start")
    ctx.cancellation.wait(sleep_ms / 1000)
    ctx.cancellation.raise_if_cancelled()
    _record(ctx, "end")


@job(name="tests.locked", retry=Retry(attempts=3, delay="100ms"))
def locked(ctx, *, key: str, sleep_ms: int):
    """Hold ``lock(key)`` (renewed by the lock keeper) for ``sleep_ms``."""
    from django_ultimate_jobs import lock

    with lock(key, ttl="2s"):
        _record(ctx, "locked")
        ctx.cancellation.wait(sleep_ms / 1000)


# -- backfills (tests/test_backfills.py, tests/acceptance/test_backfill_crash.py)


def _items(group: int):
    from tests.jobsapp.models import BackfillItem

    def source():
        return BackfillItem.objects.filter(grp=group).only("id")

    return source


def _mark_handled(rows) -> None:
    # Inside the page's atomic step: "handled == 1" on every row after the
    # pass proves each page was handled exactly once.
    from django.db.models import F

    from tests.jobsapp.models import BackfillItem

    BackfillItem.objects.filter(pk__in=[row.pk for row in rows]).update(
        handled=F("handled") + 1
    )


BACKFILL_GROUPS = {"tests.items_small": 1, "tests.items_big": 2}

for _name, _group in BACKFILL_GROUPS.items():
    backfill(
        name=_name,
        source=_items(_group),
        handle=_mark_handled,
        batch=2000,
        rate=40,
    )


# -- reindex, export, import (tests/test_reindex.py, tests/test_exports.py and
# the crash tests of tests/acceptance)

from django.core.files.storage import FileSystemStorage  # noqa: E402

from django_ultimate_jobs.exports import export_rows, import_rows  # noqa: E402
from django_ultimate_jobs.search import PostgresSearchIndex, reindex  # noqa: E402


def exports_dir() -> str:
    """Where the tests' exports go: one folder per test database, shared by
    the test process and the workers it starts (same environment)."""
    import tempfile

    database = os.environ.get("ULTIMATE_JOBS_TEST_DB", "test_ultimate_jobs")
    return os.path.join(tempfile.gettempdir(), f"uj-exports-{database}")


def exports_storage() -> FileSystemStorage:
    return FileSystemStorage(location=exports_dir())


class CountingIndex(PostgresSearchIndex):
    """The PostgreSQL index, counting each document's writes in ``IndexWrite``.

    The count is written in the statement's transaction, the page's: after a
    crash, ``writes == 1`` on every row means each page was written once.
    """

    def upsert(self, index, documents):
        from django.db.models import F

        from tests.jobsapp.models import IndexWrite

        super().upsert(index, documents)
        ids = sorted({doc.id for doc in documents})
        IndexWrite.objects.bulk_create(
            [IndexWrite(index_name=index, object_id=id_) for id_ in ids],
            ignore_conflicts=True,
        )
        IndexWrite.objects.filter(index_name=index, object_id__in=ids).update(
            writes=F("writes") + 1
        )


def _articles():
    from tests.jobsapp.models import Article

    return Article.objects.filter(grp=1, published=True)


def _export_items(group: str = "1"):
    from tests.jobsapp.models import ExportItem

    return ExportItem.objects.filter(grp=int(group))


ITEM_FIELDS = [
    "id",
    "grp",
    "name",
    "note",
    "amount",
    "ratio",
    "flag",
    "at",
    "day",
    "span",
    "uid",
    "data",
    "owner",
]

reindex(
    name="tests.articles",
    model="jobsapp.Article",
    index=CountingIndex(config="english"),
    fields={"title": "A", "body": "B"},
    source=_articles,
    version="updated_at",
    batch=1000,
    rate=200,
)
export_rows(
    name="tests.items",
    model="jobsapp.ExportItem",
    fields=ITEM_FIELDS,
    source=_export_items,
    storage=exports_storage,
    batch=2000,
)
import_rows(
    name="tests.items",
    model="jobsapp.ExportItemCopy",
    storage=exports_storage,
    batch=1000,
)


if os.environ.get("UJ_LIMIT_JOBS"):
    # The capped jobs, for the workers of the concurrency acceptance tests.
    from . import limit_jobs  # noqa: F401


# -- a data subject over the test app's customers -------------------------------


def _declare_customer_subject() -> None:
    from django_ultimate_jobs.subjects import (
        DELETE,
        EMPTY,
        NULL,
        REDACT,
        anonymize,
        subject,
        table,
    )

    from .models import Customer, Order, Review

    subject(
        name="tests.customer",
        tables=[
            table(Review, by="author", erase=DELETE),
            table(Order, by="customer", erase=anonymize(shipping_address=REDACT)),
            table(
                Customer,
                by="pk",
                erase=anonymize(email=REDACT, name=EMPTY, phone=NULL),
                export=["email", "name", "phone", "plan"],
            ),
        ],
        batch=500,
    )


_declare_customer_subject()

if os.environ.get("UJ_STREAM_JOBS"):
    # The stream consumer, for the workers of the consumer acceptance test.
    from . import stream_jobs  # noqa: F401


# -- the webhook fault tests' sender (tests/acceptance/test_webhook_faults.py) --
#
# Short retries, so an endpoint that comes back is reached within seconds;
# never disabled, so a downtime loses nothing; a request timeout longer
# than the tests' hold, so a worker is killed while it waits for the answer.
faults_webhook = webhook(
    name="tests.webhook.faults",
    retry=Retry(attempts=60, delay="100ms", max_delay="1s"),
    disable_after=1_000_000,
    timeout="30s",
)
