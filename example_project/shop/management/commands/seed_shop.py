from django.core.management.base import BaseCommand

from shop.models import Product

PRODUCTS = [
    ("Coffee mug", 1200, 50),
    ("Notebook", 800, 100),
    ("Sticker pack", 300, 500),
    ("T-shirt", 2500, 30),
    ("Poster", 1500, 5),
]


class Command(BaseCommand):
    help = "Create the demo products. Safe to run again: existing ones are kept."

    def handle(self, *args, **options):
        created = 0
        for name, price_cents, stock in PRODUCTS:
            _, is_new = Product.objects.get_or_create(
                name=name, defaults={"price_cents": price_cents, "stock": stock}
            )
            created += is_new
        self.stdout.write(f"{created} product(s) created, {len(PRODUCTS)} in the seed.")
