"""A dead job, made through the driver's claim and nack (the admin tests)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.urls import reverse

from django_ultimate_jobs.drivers.base import ClaimOptions, NackRequest
from tests.jobsapp.jobs import noop

__all__ = ["dead_job", "press_confirmed"]


def dead_job(
    driver: Any, error: str | None = "X_BOOM: the card was declined", **input: Any
) -> UUID:
    """A dead ``tests.noop`` job whose last error is ``error`` (``None``: no
    error). Its input is ``input``, or ``n=1`` and a password to redact."""
    enqueued = noop.enqueue(**(input or {"n": 1, "password": "hunter2"}))
    (claimed,) = driver.claim(
        ClaimOptions(queues=["default"], limit=1, worker_id="w", visibility_ms=30_000)
    ).claimed
    assert claimed.id == enqueued.id, "another job was due first"
    assert driver.nack(
        NackRequest(
            job_id=claimed.id,
            identity=claimed.identity,
            dead_letter=True,
            error=error,
            stack="Traceback: line 1",
        )
    )
    return enqueued.id


def press_confirmed(client: Any, group: dict[str, str]) -> Any:
    """Retry a dead-letter ``group`` as an operator does: the confirmation,
    then its form (the ids it pinned, ``confirmed=yes``)."""
    url = reverse("admin:ultimate_jobs_job_dead_letter")
    confirm = client.post(url, group)
    pinned = list(confirm.context["selected"])
    data = {**group, "_selected_action": pinned, "confirmed": "yes"}
    return client.post(url, data, follow=True)
