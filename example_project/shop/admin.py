from django.contrib import admin

from .models import Order, OrderLine, PaymentProvider, Product


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["name", "price_cents", "stock"]
    search_fields = ["name"]


class OrderLineInline(admin.TabularInline):
    model = OrderLine
    extra = 0


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "email", "status", "total_cents", "created_at"]
    list_filter = ["status"]
    search_fields = ["email"]
    readonly_fields = ["created_at", "receipt_sent_at"]
    inlines = [OrderLineInline]


@admin.register(PaymentProvider)
class PaymentProviderAdmin(admin.ModelAdmin):
    """The demo's outage switch, also on every shop page."""

    list_display = ["__str__", "down"]
    list_editable = ["down"]
