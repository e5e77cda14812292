"""The Redis driver (``ULTIMATE_JOBS["DRIVER"] = "redis"``).

Importing this package never imports ``redis``: the client is the
optional extra ``django-ultimate-jobs[redis]``, imported when the driver
is built (``X_REDIS_CLIENT_MISSING`` without it). See docs/howto/redis.md.
"""

from .driver import RedisDriver

__all__ = ["RedisDriver"]
