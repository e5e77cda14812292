"""Error codes of the webhooks package (see docs/reference/errors.md).

Secrets, signatures and URL query strings never appear in a ``cause``,
``fix`` or ``meta``: a URL is reduced to its origin and path first
(:func:`django_ultimate_jobs.webhooks.addresses.display_url`).
"""

from __future__ import annotations

from ..errors import JobsError, RetryClass

__all__ = [
    "WebhookClientMissing",
    "WebhookDeclarationInvalid",
    "WebhookDeliveryFailed",
    "WebhookDeliveryRejected",
    "WebhookDeliveryThrottled",
    "WebhookEndpointDisabled",
    "WebhookEndpointInvalid",
    "WebhookEventInvalid",
    "WebhookEventUnknown",
    "WebhookReceiverInvalid",
    "WebhookSignatureInvalid",
    "WebhookSignatureMissing",
    "WebhookSignatureStale",
]


class WebhookDeclarationInvalid(JobsError):
    """A ``webhook(...)`` declaration is invalid (raised where it is made)."""

    code = "X_WEBHOOK_DECLARATION_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "correct the webhook(...) arguments named in the message"


class WebhookClientMissing(JobsError):
    """The sender needs the ``webhooks`` extra (urllib3), which is not installed."""

    code = "X_WEBHOOK_CLIENT_MISSING"
    retry_class = RetryClass.RETRYABLE
    default_fix = 'pip install "django-ultimate-jobs[webhooks]" on every worker'


class WebhookEndpointInvalid(JobsError):
    """The endpoint cannot be delivered to: bad URL, scheme, secret or address.

    A refused address is named by its class (loopback, private, ...),
    never by the address itself.
    """

    code = "X_WEBHOOK_ENDPOINT_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "point the endpoint at a public https:// URL; for an internal receiver, "
        "list its network in ULTIMATE_JOBS['WEBHOOK_ALLOW_NETWORKS']"
    )


class WebhookEndpointDisabled(JobsError):
    """The endpoint is disabled (by an operator, or after consecutive failures)."""

    code = "X_WEBHOOK_ENDPOINT_DISABLED"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "fix the receiver, enable the endpoint in the admin, then replay the "
        "deliveries it missed"
    )


class WebhookEventUnknown(JobsError):
    """The delivery row this job was enqueued for no longer exists."""

    code = "X_WEBHOOK_EVENT_UNKNOWN"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "nothing to retry: the delivery was deleted (its endpoint was deleted, "
        "or retention swept it)"
    )


class WebhookEventInvalid(JobsError):
    """``deliver()`` was given a topic, id or body it cannot send; nothing written."""

    code = "X_WEBHOOK_EVENT_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "pass a topic and id of 1-200 printable ASCII characters without spaces, "
        "and a body (str, or a JSON-safe value) of at most 1 MiB"
    )


class WebhookDeliveryFailed(JobsError):
    """No response (connect error, timeout, DNS), or 429/5xx without Retry-After."""

    code = "X_WEBHOOK_DELIVERY_FAILED"
    retry_class = RetryClass.RETRYABLE
    default_fix = "nothing to do: the delivery is retried on the job's backoff"


class WebhookDeliveryThrottled(JobsError):
    """429 or 5xx with ``Retry-After``: retried after that delay."""

    code = "X_WEBHOOK_DELIVERY_THROTTLED"
    retry_class = RetryClass.RETRY_AFTER
    default_fix = "nothing to do: the delivery is retried after the stated delay"


class WebhookDeliveryRejected(JobsError):
    """The receiver answered a status that is never retried (a 4xx, a redirect)."""

    code = "X_WEBHOOK_DELIVERY_REJECTED"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "fix the receiver (a redirect means the endpoint URL moved: update it), "
        "then replay the delivery from the admin"
    )


class WebhookReceiverInvalid(JobsError):
    """A ``webhook_receiver(...)`` declaration is invalid (raised where it is made)."""

    code = "X_WEBHOOK_RECEIVER_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "pass name=, a relative path= (no leading '/'), verify= (secrets or a "
        "verifier), handle= (a job or a callable) and 1 <= max_bytes <= 64 MiB"
    )


class WebhookSignatureMissing(JobsError):
    """An inbound request lacks a ``webhook-id``, ``-timestamp`` or ``-signature`` header (400)."""

    code = "X_WEBHOOK_SIGNATURE_MISSING"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "send the three Standard Webhooks headers"


class WebhookSignatureInvalid(JobsError):
    """An inbound signature is malformed or matches no secret (401)."""

    code = "X_WEBHOOK_SIGNATURE_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "sign id.timestamp.body with HMAC-SHA256 under a secret the receiver "
        "holds (v1,<base64>)"
    )


class WebhookSignatureStale(JobsError):
    """An inbound timestamp is outside the receiver's tolerance (401)."""

    code = "X_WEBHOOK_SIGNATURE_STALE"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "sign with the current time; check the sender's clock"
