"""The shop's background jobs (autodiscovered by django_ultimate_jobs).

Two rules hold for every handler here:

- Input is ids, never model instances: the row is read fresh when the job
  runs, which may be seconds or hours after checkout.
- Handlers are idempotent. Delivery is at-least-once: a worker can die after
  the work is done but before the job is marked done, and the job then runs
  again. Each handler checks the order's state before acting, so a second
  run changes nothing.
"""

import logging

from django.db import transaction
from django.utils import timezone

from django_ultimate_jobs import Retry, RetryAfter, Terminal, job

from .models import Order, Product

logger = logging.getLogger(__name__)


@job(
    name="shop.send_receipt",
    queue="emails",
    retry=Retry(attempts=5, delay="2s"),
    # One live receipt job per order, however many times it is enqueued.
    idempotency_key=lambda i: f"receipt:{i['order_id']}",
)
def send_receipt(ctx, *, order_id: int):
    """Email the order's receipt once (here: log it)."""
    with transaction.atomic():
        # The lock keeps a second run (a lapsed lease re-taken by another
        # worker) from sending while this one is between send and mark.
        order = Order.objects.select_for_update().get(pk=order_id)
        if order.receipt_sent_at is not None:
            return
        # Stands in for an email. A crash between this and the save sends
        # the receipt twice, which is the right failure for a receipt: at
        # least once beats at most once.
        logger.info(
            "Receipt for order #%s: %s, total %s cents",
            order.pk,
            order.email,
            order.total_cents,
        )
        order.receipt_sent_at = timezone.now()
        order.save(update_fields=["receipt_sent_at"])


@job(name="shop.reserve_stock")
def reserve_stock(ctx, *, order_id: int):
    """Take the order's stock and mark it paid, or fail if there is too little."""
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        # The status moves in the same transaction as the stock, so it is
        # the record that this order's stock was already taken.
        if order.status != Order.Status.PENDING:
            return
        lines = list(order.lines.all())
        # Lock in id order so two orders for the same products cannot
        # deadlock each other.
        ids = [line.product_id for line in lines]
        locked = Product.objects.select_for_update().filter(pk__in=ids).order_by("pk")
        products = {product.pk: product for product in locked}
        for line in lines:
            product = products[line.product_id]
            if product.stock < line.quantity:
                # Retrying does not make stock appear: fail now, visibly.
                raise Terminal(f"not enough stock of product {product.pk}")
            product.stock -= line.quantity
        Product.objects.bulk_update(products.values(), ["stock"])
        order.status = Order.Status.PAID
        order.save(update_fields=["status"])


@job(name="shop.ship_order", queue="default")
def ship_order(ctx, *, order_id: int):
    """Mark a paid order shipped."""
    order = Order.objects.get(pk=order_id)
    if order.status == Order.Status.PENDING:
        # Enqueued 30 s after checkout, normally long after the stock job;
        # if that one is still retrying, wait for it rather than ship.
        raise RetryAfter(10, "stock not reserved yet")
    # A conditional update: a second run finds nothing to change.
    Order.objects.filter(pk=order_id, status=Order.Status.PAID).update(
        status=Order.Status.SHIPPED
    )
