"""A minimal catalogue and its orders. Prices are whole cents, never floats."""

from django.db import models
from django.urls import reverse


class Product(models.Model):
    name = models.CharField(max_length=100, unique=True)
    price_cents = models.PositiveIntegerField()
    stock = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Order(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        # No payment provider in this demo: an order counts as paid once
        # shop.reserve_stock has taken its stock.
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
