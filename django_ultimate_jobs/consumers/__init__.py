"""Stream consumers: read an external stream after a stored cursor.

``consumer(name=, fetch=, handle=)`` declares a job and a supervisor cron
task. Each run fetches ``Batch(items, cursor)`` after the stored cursor
and commits ``handle(items)``'s writes with the cursor's move in one
transaction: at least once per batch, effects once when they live in the
same database. A cursor that goes backwards halts the consumer with
``X_CONSUMER_CURSOR_BACKWARDS``. The row is
``django_ultimate_jobs.models.Consumer``.
"""

from __future__ import annotations

from .control import (
    pause_consumer,
    resume_consumer,
    run_consumer,
    set_consumer_cursor,
)
from .declaration import (
    CONSUMER_JOB_PREFIX,
    Batch,
    ConsumerSpec,
    consumer,
    get_consumer,
    registered_consumers,
    unregister_consumer,
)

__all__ = [
    "CONSUMER_JOB_PREFIX",
    "Batch",
    "ConsumerSpec",
    "consumer",
    "get_consumer",
    "pause_consumer",
    "registered_consumers",
    "resume_consumer",
    "run_consumer",
    "set_consumer_cursor",
    "unregister_consumer",
]
