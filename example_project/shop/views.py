from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST, require_safe

from django_ultimate_jobs.models import Job

from .forms import CheckoutForm
from .jobs import reserve_stock, send_receipt, ship_order
from .models import Order, OrderLine, Product


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
        ship_order.using(delay="30s", actor=actor).enqueue(order_id=order.pk)
    return redirect(order)


@require_safe
def order_detail(request, pk):
    order = get_object_or_404(Order, pk=pk)
    # Fine for a demo; input has no index, so a real app would keep the job
    # ids it was handed by enqueue() instead of searching by input.
    jobs = Job.objects.filter(input__order_id=order.pk).order_by("created_at")
    context = {"order": order, "lines": order.lines.select_related("product")}
    return render(request, "shop/order_detail.html", {**context, "jobs": jobs})


def _product_list(request, form):
    context = {"products": Product.objects.all(), "form": form}
    return render(request, "shop/product_list.html", context)
