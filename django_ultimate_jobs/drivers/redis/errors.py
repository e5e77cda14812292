"""The Redis driver's coded errors (registered on definition)."""

from __future__ import annotations

from ...errors import JobsError, RetryClass

__all__ = ["RedisClientMissing", "RedisQueuePinned"]


class RedisClientMissing(JobsError):
    """``DRIVER = "redis"`` without the ``redis`` package installed."""

    code = "X_REDIS_CLIENT_MISSING"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = 'pip install "django-ultimate-jobs[redis]"'


class RedisQueuePinned(JobsError):
    """A keyed or capped job enqueued to a second queue on the Redis driver.

    On Redis an idempotency key and a concurrency cap are enforced inside
    one queue's hash slot (one Lua script, atomic); a job name whose keyed
    or capped rows went to two queues would have two namespaces, so the
    first queue such a row of the name goes to is its queue for good.
    """

    code = "X_REDIS_QUEUE_PINNED"
    retry_class = RetryClass.NOT_IN_JOB
