"""Webhooks out and in, signed the Standard Webhooks way.

Outbound: ``webhook(name=...)`` declares a delivery job; ``deliver(topic,
body)`` enqueues one delivery per subscribed ``WebhookEndpoint``, inside the
caller's transaction. Inbound: ``webhook_receiver(...)`` returns a URL
pattern that verifies, dedupes and hands each request to a job or a
callable. See docs/howto/webhooks-sending.md and
docs/howto/webhooks-receiving.md.

Importing this package touches no model and no HTTP client: names load on
first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = [
    "InboundEvent",
    "StandardWebhooks",
    "WebhookHandle",
    "create_endpoint",
    "deliver",
    "mask_secret",
    "new_secret",
    "rotate_secret",
    "sign",
    "verify",
    "webhook",
    "webhook_receiver",
]

if TYPE_CHECKING:
    from .declaration import WebhookHandle, deliver, webhook
    from .endpoints import create_endpoint, rotate_secret
    from .receiver import InboundEvent, StandardWebhooks, webhook_receiver
    from .signing import mask_secret, new_secret, sign, verify

_LAZY = {
    "InboundEvent": ".receiver",
    "StandardWebhooks": ".receiver",
    "WebhookHandle": ".declaration",
    "create_endpoint": ".endpoints",
    "deliver": ".declaration",
    "mask_secret": ".signing",
    "new_secret": ".signing",
    "rotate_secret": ".endpoints",
    "sign": ".signing",
    "verify": ".signing",
    "webhook": ".declaration",
    "webhook_receiver": ".receiver",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module, __name__), name)
