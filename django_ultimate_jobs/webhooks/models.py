"""The webhook tables: endpoints, outbound deliveries, inbound deliveries.

Imported by ``django_ultimate_jobs.models`` (the app's models module), never
by ``django_ultimate_jobs.webhooks`` itself, so importing the webhooks API
touches no model. Secrets are stored (HMAC needs the key itself) and never
shown: ``__str__``, the admin and every log use
:func:`~django_ultimate_jobs.webhooks.signing.mask_secret`.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

__all__ = ["InboundDelivery", "WebhookDelivery", "WebhookEndpoint"]


class WebhookEndpoint(models.Model):
    """Where deliveries go: a URL, its signing secret and the topics it takes."""

    id = models.BigAutoField(primary_key=True)
    url = models.TextField()
    description = models.TextField(blank=True, default="")
    topics = models.JSONField(default=list, blank=True)
    """Topic names it receives; ``["*"]`` takes every topic."""
    secret = models.TextField(editable=False)
    """``whsec_...``: shown once, when made; masked everywhere after."""
    previous_secret = models.TextField(null=True, blank=True, editable=False)
    """The secret a rotation replaced; requests carry its signature too until
    ``previous_secret_until``."""
    previous_secret_until = models.DateTimeField(null=True, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    """Extra request headers; never the ones the signature owns."""
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.TextField(blank=True, default="")
    consecutive_failures = models.IntegerField(default=0)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "ultimate_jobs_webhook_endpoint"
        permissions = [
            ("rotate_webhookendpoint", "Can rotate a webhook endpoint's secret"),
            ("test_webhookendpoint", "Can send a test event to a webhook endpoint"),
        ]

    def __str__(self) -> str:
        from .addresses import display_url

        return f"endpoint {self.pk} {display_url(self.url)}"

    def __repr__(self) -> str:
        return f"<WebhookEndpoint {self.pk} {self!s}>"


class WebhookDelivery(models.Model):
    """One event to one endpoint, and every attempt at sending it.

    ``attempt_log`` holds one entry per attempt (``attempt``, ``at``,
    ``status`` or null when nothing answered, ``duration_ms``, ``error``),
    the latest 50; never the response body, which may echo the payload.
    """

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    id = models.BigAutoField(primary_key=True)
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    webhook = models.TextField()
    """The ``webhook(name=...)`` declaration whose job sends it."""
    topic = models.TextField()
    msg_id = models.TextField()
    """The ``webhook-id`` header: the same on every attempt and replay."""
    body = models.TextField()
    """The exact text signed and sent."""
    state = models.TextField(choices=State.choices, default=State.PENDING)
    attempts = models.IntegerField(default=0)
    attempt_log = models.JSONField(default=list)
    last_status = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    replays = models.IntegerField(default=0)
    job_id = models.UUIDField(null=True, blank=True)
    """The job of the latest send (a replay enqueues a new one)."""
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "ultimate_jobs_webhook_delivery"
        verbose_name_plural = "webhook deliveries"
        permissions = [("replay_webhookdelivery", "Can replay a webhook delivery")]
        constraints = [
            # One delivery of an event per endpoint: deliver(..., id=) twice
            # with one id sends once.
            models.UniqueConstraint(
                "endpoint", "msg_id", name="uj_webhook_delivery_msg_uniq"
            )
        ]
        indexes = [
            # The endpoint page's latest deliveries; retention by age.
            models.Index(fields=["endpoint", "-id"], name="uj_webhook_delivery_ep_idx"),
            models.Index("created_at", name="uj_webhook_delivery_age_idx"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.pk} {self.topic} {self.msg_id}"


class InboundDelivery(models.Model):
    """One verified inbound webhook, kept to refuse its replays."""

    id = models.BigAutoField(primary_key=True)
    receiver = models.TextField()
    """The ``webhook_receiver(name=...)`` that took it."""
    webhook_id = models.TextField()
    signed_at = models.DateTimeField()
    received_at = models.DateTimeField(db_default=Now())
    size = models.IntegerField()
    job_id = models.UUIDField(null=True, blank=True)
    """The job its ``handle`` enqueued, when ``handle`` is a job."""

    class Meta:
        db_table = "ultimate_jobs_inbound_delivery"
        verbose_name_plural = "inbound deliveries"
        constraints = [
            # The dedupe: the receiver inserts ON CONFLICT DO NOTHING on it
            # in the transaction that runs handle.
            models.UniqueConstraint(
                "receiver", "webhook_id", name="uj_inbound_delivery_uniq"
            )
        ]
        indexes = [models.Index("received_at", name="uj_inbound_delivery_age_idx")]

    def __str__(self) -> str:
        return f"{self.receiver} {self.webhook_id}"
