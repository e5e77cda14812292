from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST, require_safe

from django_ultimate_jobs.models import Job

from .forms import CheckoutForm
from .jobs import reserve_stock, send_receipt
from .models import Order, OrderLine, PaymentProvider, Product


@require_safe
def product_list(request):
    return _product_list(request, CheckoutForm())


@require_POST
def checkout(request):
    form = CheckoutForm(request.POST)
    if not form.is_valid():
        return _product_list(request, form)
    product = form.cleaned_data["product"]
    quantity = form.cleaned_data["quantity"]
    actor = request.user if request.user.is_authenticated else None
    # One transaction for the order and its jobs: if anything below fails,
    # there is neither an order nor a job, and a worker can never pick up a
    # job for an order that was rolled back (or miss one that committed).
    with transaction.atomic():
        order = Order.objects.create(
            email=form.cleaned_data["email"],
            total_cents=product.price_cents * quantity,
        )
        OrderLine.objects.create(
            order=order,
            product=product,
            quantity=quantity,
            price_cents=product.price_cents,
        )
        # Jobs get the order's id, never the instance: see shop/jobs.py.
        reserve_stock.using(actor=actor).enqueue(order_id=order.pk)
        send_receipt.using(actor=actor).enqueue(order_id=order.pk)
    return redirect(order)


@require_safe
def order_detail(request, pk):
    order = get_object_or_404(Order, pk=pk)
    # Fine for a demo; input has no index, so a real app would keep the job
    # ids it was handed by enqueue() instead of searching by input.
    jobs = list(Job.objects.filter(input__order_id=order.pk).order_by("created_at"))
    context = {
        "order": order,
        "lines": order.lines.select_related("product"),
        "jobs": jobs,
        "dead": [job for job in jobs if job.state == "dead"],
    }
    return _render(request, "shop/order_detail.html", context)


@require_POST
def payment_provider(request):
    """The demo's outage switch: take the payment provider down, or back up."""
    provider = PaymentProvider.current()
    provider.down = request.POST.get("down") == "1"
    provider.save(update_fields=["down"])
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = "shop:product_list"
    return redirect(back)


def _product_list(request, form):
    context = {"products": Product.objects.all(), "form": form}
    return _render(request, "shop/product_list.html", context)


def _render(request, template, context):
    # Every shop page shows the payment provider switch (base.html).
    return render(request, template, {**context, "provider": PaymentProvider.current()})
