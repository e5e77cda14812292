"""JSON columns on the admin's model pages, shown through ``redact()``.

A model page would print a JSON column as stored; each of the app's model
admins excludes its JSON columns and shows them with :func:`redacted_block`
instead (the job page renders ``operator.show``, redacted already).
"""

from __future__ import annotations

from typing import Any

from django.utils.html import format_html

from ..redaction import redacted_json

__all__ = ["redacted_block"]


def redacted_block(value: Any) -> str:
    """``value`` redacted, as indented JSON in a ``<pre>`` (escaped)."""
    return format_html('<pre class="uj-pre">{}</pre>', redacted_json(value))
