"""Models of the test app: the effects table the acceptance tier measures, and
a partitioned table for the maintenance tests."""

import uuid

import pgtrigger
from django.db import models
from django.db.models.functions import Now

from django_ultimate_jobs import partitioned
from django_ultimate_jobs.subjects import personal_data


class Effect(models.Model):
    """One "external" effect of a test job, written in autocommit.

    ``claims`` is the claim ordinal of the attempt that wrote it (the lease
    token's counter), ``at`` the database clock at the write (I-CLOCK), so
    effects of one job can be ordered against its claims.
    """

    job_id = models.UUIDField(db_index=True)
    attempt = models.IntegerField()
    claims = models.IntegerField()
    worker = models.TextField()
    at = models.DateTimeField(db_default=Now())
    kind = models.TextField(default="run")

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.job_id} claim={self.claims} by {self.worker}"


class Visit(models.Model):
    """A range-partitioned table (one partition per UTC day), for maintenance tests.

    The partition key must be in every unique constraint, the primary key
    included: hence the composite key.
    """

    pk = models.CompositePrimaryKey("visit_id", "at")
    visit_id = models.UUIDField(default=uuid.uuid4)
    at = models.DateTimeField()
    path = models.TextField(default="/")

    def __str__(self) -> str:
        return f"{self.path} at {self.at}"


partitioned(Visit, by="at", interval="day", ahead=3, retain=7)


class BackfillItem(models.Model):
    """A row the backfill tests walk; ``handled`` counts the handler's visits.

    ``grp`` splits the table so one test can run passes of different sizes
    over it (each backfill's source filters on its own group).
    """

    grp = models.SmallIntegerField()
    handled = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"item {self.pk} (group {self.grp}, handled {self.handled})"


class Invoice(models.Model):
    """A row a lock protects: its writers store their fencing token with it."""

    status = models.TextField(default="draft")
    lock_token = models.BigIntegerField(null=True)

    def __str__(self) -> str:
        return f"invoice {self.pk} {self.status} (token {self.lock_token})"


class SlotRun(models.Model):
    """One body run of a capped test job: when it started and ended (DB clock).

    The concurrency acceptance tests count overlapping runs per ``key``: the
    body writes its start after the claim took its slot and its end before
    the settle frees it, so the runs of a key never overlap more than its
    limit. A run whose worker was SIGKILLed has no end.
    """

    job_id = models.UUIDField()
    key = models.TextField()
    worker = models.TextField()
    started_at = models.DateTimeField(db_default=Now())
    ended_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"{self.key} run of {self.job_id} by {self.worker}"


# -- data subjects (tests/test_subjects.py, the erase acceptance test) ---------

# Each UPDATE or DELETE of a subject table's row writes one Touch row, in
# the statement's own transaction: a page erased twice would show twice.
_TOUCH = (
    "INSERT INTO jobsapp_touch (tbl, row_id, op) "
    "VALUES (TG_TABLE_NAME, OLD.id, TG_OP); RETURN NULL;"
)


def _touch_trigger(table: str) -> pgtrigger.Trigger:
    return pgtrigger.Trigger(
        name=f"{table}_touch",
        level=pgtrigger.Row,
        when=pgtrigger.After,
        operation=pgtrigger.Update | pgtrigger.Delete,
        func=_TOUCH,
    )


class Customer(models.Model):
    """A data subject's own row."""

    email = personal_data(models.EmailField(unique=True), kind="contact")
    name = personal_data(models.TextField(), kind="identity")
    phone = personal_data(models.TextField(null=True, blank=True), kind="contact")
    plan = models.TextField(default="free")

    class Meta:
        triggers = [_touch_trigger("customer")]

    def __str__(self) -> str:
        return f"customer {self.pk}"


class Order(models.Model):
    """A row that belongs to a customer (anonymised on erase, kept)."""

    customer = models.ForeignKey(
        Customer, on_delete=models.PROTECT, related_name="orders"
    )
    shipping_address = personal_data(models.TextField())
    total = models.IntegerField(default=0)

    class Meta:
        triggers = [_touch_trigger("order")]

    def __str__(self) -> str:
        return f"order {self.pk}"


class Review(models.Model):
    """A row that belongs to a customer (deleted on erase)."""

    author = models.ForeignKey(
        Customer, on_delete=models.CASCADE, related_name="reviews"
    )
    body = personal_data(models.TextField())

    class Meta:
        triggers = [_touch_trigger("review")]

    def __str__(self) -> str:
        return f"review {self.pk}"


class Touch(models.Model):
    """One UPDATE or DELETE of a Customer, Order or Review row (by trigger)."""

    tbl = models.TextField()
    row_id = models.BigIntegerField()
    op = models.TextField()

    def __str__(self) -> str:
        return f"{self.op} {self.tbl} {self.row_id}"


# -- stream consumers (tests/test_consumers.py, the consumer acceptance test) --


class StreamEvent(models.Model):
    """An item of the "external" stream the test consumers read (cursor: id)."""

    payload = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"event {self.pk}"


class StreamEffect(models.Model):
    """One item handled by a consumer; no unique key, so a repeat would show."""

    consumer = models.TextField()
    event_id = models.BigIntegerField(db_index=True)

    def __str__(self) -> str:
        return f"{self.consumer} handled {self.event_id}"


class Article(models.Model):
    """A row the reindex tests index (tests/test_reindex.py, the acceptance tier).

    ``grp`` splits the table so tests of different sizes share it (each
    reindex's source filters on its own group).
    """

    grp = models.SmallIntegerField(default=0)
    title = models.TextField(default="")
    body = models.TextField(default="")
    published = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"article {self.pk} {self.title!r}"


class IndexWrite(models.Model):
    """How often a counting index wrote each document: what the crash test counts."""

    index_name = models.TextField()
    object_id = models.TextField()
    writes = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                "index_name", "object_id", name="jobsapp_index_write"
            )
        ]

    def __str__(self) -> str:
        return f"{self.index_name} {self.object_id}: {self.writes} writes"


class ItemFields(models.Model):
    """Every export column type: ``ExportItem`` and its import target share them."""

    grp = models.SmallIntegerField(default=0)
    name = models.CharField(max_length=200, default="")
    note = models.TextField(null=True, blank=True)
    amount = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    ratio = models.FloatField(null=True, blank=True)
    flag = models.BooleanField(default=False)
    at = models.DateTimeField(null=True, blank=True)
    day = models.DateField(null=True, blank=True)
    span = models.DurationField(null=True, blank=True)
    uid = models.UUIDField(null=True, blank=True)
    data = models.JSONField(null=True, blank=True)
    owner = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL
    )

    class Meta:
        abstract = True


class ExportItem(ItemFields):
    """A row the export tests write (tests/test_exports.py, the acceptance tier)."""

    def __str__(self) -> str:
        return f"export item {self.pk} {self.name!r}"


class ExportItemCopy(ItemFields):
    """Where the import tests load ``ExportItem`` rows: the same columns."""

    def __str__(self) -> str:
        return f"imported item {self.pk} {self.name!r}"
