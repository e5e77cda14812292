"""A minimal catalogue and its orders. Prices are whole cents, never floats."""

import uuid

from django.db import models
from django.urls import reverse
from django.utils import timezone

from django_ultimate_jobs import partitioned


class Product(models.Model):
    name = models.CharField(max_length=100, unique=True)
    price_cents = models.PositiveIntegerField()
    stock = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class PaymentProvider(models.Model):
    """The demo's payment provider: one row, up or down.

    A stand-in for a real provider's outage. The shop's pages have a switch
    for it, so a visitor can make ``shop.charge_payment`` fail for real, find
    it in the admin's Dead letters, fix the cause and retry it.
    """

    down = models.BooleanField(default=False)

    def __str__(self):
        return "payment provider (down)" if self.down else "payment provider (up)"

    @classmethod
    def current(cls):
        provider, _ = cls.objects.get_or_create(pk=1)
        return provider


class Order(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        # shop.reserve_stock has taken the stock; the charge is next.
        RESERVED = "reserved"
        PAID = "paid"
        SHIPPED = "shipped"

    created_at = models.DateTimeField(auto_now_add=True)
    email = models.EmailField()
    total_cents = models.PositiveIntegerField()
    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.PENDING
    )
    receipt_sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"Order #{self.pk} ({self.status})"

    def get_absolute_url(self):
        return reverse("shop:order_detail", args=[self.pk])


class OrderLine(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")
    product = models.ForeignKey(Product, on_delete=models.PROTECT)
    quantity = models.PositiveIntegerField()
    # The price when ordered: a later price change must not rewrite history.
    price_cents = models.PositiveIntegerField()

    def __str__(self):
        return f"{self.quantity} x {self.product}"


class PageView(models.Model):
    """One view of a product page: a high-volume, append-only table.

    Range-partitioned by month on ``viewed_at`` (migration 0002 creates it
    with ``CreatePartitionedModel``): dropping a month of old views is a
    ``DROP TABLE`` of one partition, not a million-row ``DELETE``. The
    partition key must be part of the primary key, hence the composite key.
    """

    pk = models.CompositePrimaryKey("view_id", "viewed_at")
    view_id = models.UUIDField(default=uuid.uuid4)
    viewed_at = models.DateTimeField(default=timezone.now)
    product = models.ForeignKey(Product, on_delete=models.CASCADE, related_name="+")

    def __str__(self):
        return f"{self.product_id} viewed at {self.viewed_at}"


# The current month and the next 3 exist ahead of time; months older than
# 12 are dropped, by the daily ultimate_jobs.partitions job or
# `manage.py maintain_partitions` (run it once right after migrate).
partitioned(PageView, by="viewed_at", interval="month", ahead=3, retain=12)
