"""The shop's background jobs (autodiscovered by django_ultimate_jobs).

An order goes through a chain: checkout enqueues ``shop.reserve_stock``
(and the receipt); each link enqueues the next one in the transaction of its
own writes, so the next job exists if and only if this one's work committed.

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

from django_ultimate_jobs import JobsError, Retry, RetryClass, Terminal, job

from .models import Order, PaymentProvider, Product

logger = logging.getLogger(__name__)


class PaymentProviderDown(JobsError):
    """The payment provider did not answer: a later try may get through."""

    code = "X_PAYMENT_PROVIDER_DOWN"
    retry_class = RetryClass.RETRYABLE
    default_fix = (
        "bring the payment provider back up (the switch on the shop's pages), "
        "then retry the job"
    )


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
    """Take the order's stock, then queue its charge; fail if there is too little."""
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
        order.status = Order.Status.RESERVED
        order.save(update_fields=["status"])
        # Same transaction: the charge exists if and only if the stock is taken.
        charge_payment.enqueue(order_id=order.pk)


@job(
    name="shop.charge_payment",
    # Seconds between tries, so a demo visitor sees the job dead-lettered
    # within moments; against a real provider's outage, give it minutes.
    retry=Retry(attempts=3, delay="1s"),
    idempotency_key=lambda i: f"charge:{i['order_id']}",
)
def charge_payment(ctx, *, order_id: int):
    """Charge the order, mark it paid and queue its shipping."""
    if PaymentProvider.current().down:
        # Stands in for a provider call that timed out. Retryable: after its
        # last attempt the job waits in the admin's Dead letters.
        raise PaymentProviderDown(
            f"the payment provider did not answer for order #{order_id}"
        )
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        if order.status != Order.Status.RESERVED:
            return
        # A real provider call would pass the order id as its idempotency
        # key, so a second run (a lapsed lease) cannot charge twice.
        order.status = Order.Status.PAID
        order.save(update_fields=["status"])
        ship_order.using(delay="30s").enqueue(order_id=order.pk)


@job(name="shop.ship_order", queue="default")
def ship_order(ctx, *, order_id: int):
    """Mark a paid order shipped."""
    # A conditional update: a second run finds nothing to change.
    Order.objects.filter(pk=order_id, status=Order.Status.PAID).update(
        status=Order.Status.SHIPPED
    )
