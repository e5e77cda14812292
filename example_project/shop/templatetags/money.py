from django import template

register = template.Library()


@register.filter
def money(cents):
    """Format whole cents as dollars: 1999 -> "$19.99"."""
    return f"${cents // 100}.{cents % 100:02d}"
