"""The Redis driver's coded errors (registered on definition)."""

from __future__ import annotations

from ...errors import JobsError, RetryClass

__all__ = ["RedisClientMissing", "RedisNotReplicated", "RedisQueuePinned"]


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


class RedisNotReplicated(JobsError):
    """A write fewer replicas confirmed than ``REDIS_WAIT_REPLICAS`` asks.

    The primary has it (Redis cannot take a write back): the job may run,
    or be lost if the primary fails before a replica copies it. Raised by
    ``enqueue()`` and by a worker's claim (which then runs nothing it
    claimed: the leases lapse and the jobs are claimed again).
    """

    code = "X_REDIS_NOT_REPLICATED"
    retry_class = RetryClass.RETRYABLE
    default_fix = (
        "check the replicas (INFO replication); enqueue with an idempotency key "
        "to retry without a second job"
    )
