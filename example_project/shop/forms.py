from django import forms

from .models import Product


class CheckoutForm(forms.Form):
    product = forms.ModelChoiceField(queryset=Product.objects.all())
    quantity = forms.IntegerField(min_value=1, max_value=20, initial=1)
    email = forms.EmailField()

    def clean(self):
        cleaned = super().clean()
        product, quantity = cleaned.get("product"), cleaned.get("quantity")
        # A courtesy check for the buyer. It can race another checkout, so
        # shop.reserve_stock re-checks under a row lock and has the last word.
        if product and quantity and quantity > product.stock:
            raise forms.ValidationError(f"Only {product.stock} {product} left.")
        return cleaned
