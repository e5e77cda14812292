"""Drivers: where jobs are stored. Internal; the contract is ``drivers.base``.

``ULTIMATE_JOBS["DRIVER"]`` names the driver class by dotted path, or by
one of the aliases in :data:`ALIASES`; :func:`get_driver` builds it once
per process from the settings (``DriverClass.from_settings``). A driver
class may live outside this package: see docs/howto/writing-a-driver.md.

Layout: ``base`` (the records and the :class:`~.base.JobDriver` contract),
``basedriver`` (:class:`~.basedriver.BaseDriver`, the shared defaults),
``features`` (capability flags), the roles' records and protocols
(``steps``, ``leases``, ``cron``, ``maintenance``, ``sessions``), the
process's ``outage`` tracker and ``djangodb`` (Django connection hygiene),
then one package per shipped driver: ``postgres``, ``memory`` and ``redis``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from ..conf import jobs_settings, use_driver_keys

if TYPE_CHECKING:
    from ..conf import Kind
    from .base import JobDriver
    from .basedriver import BaseDriver

__all__ = [
    "ALIASES",
    "driver_class",
    "get_driver",
    "is_driver",
    "reset_driver",
    "set_driver",
]

ALIASES = {
    "postgres": "django_ultimate_jobs.drivers.postgres.PostgresDriver",
    "memory": "django_ultimate_jobs.drivers.memory.MemoryDriver",
    "redis": "django_ultimate_jobs.drivers.redis.RedisDriver",
}
"""Short names ``ULTIMATE_JOBS["DRIVER"]`` accepts for the shipped drivers."""

_installed: JobDriver | None = None


@cache
def driver_class(name: str) -> type[BaseDriver]:
    """The driver class ``name`` names: an alias or a dotted path.

    Raises:
        SettingsInvalid: ``name`` cannot be imported (or its module raises),
            or is not a concrete :class:`~.basedriver.BaseDriver` subclass
            keeping the contract (see :mod:`.loading`).
    """
    from .loading import load_driver_class

    return load_driver_class(name, ALIASES.get(name, name))


def _driver_keys(name: str) -> Mapping[str, Kind]:
    """The ``ULTIMATE_JOBS`` keys the driver ``name`` declares (conf asks)."""
    return driver_class(name).settings_keys


def get_driver() -> JobDriver:
    """Return the process's driver, built from settings on first use.

    Raises:
        SettingsInvalid: ``ULTIMATE_JOBS["DRIVER"]`` names no driver class,
            or the driver cannot be built (``from_settings`` raised).
    """
    global _installed
    if _installed is None:
        from .loading import build_driver

        configured = jobs_settings()
        cls = driver_class(configured.driver)
        _installed = build_driver(configured.driver, cls, configured)
    return _installed


def set_driver(driver: JobDriver | None) -> JobDriver | None:
    """Install ``driver`` for this process (``None`` = back to settings).

    Returns the driver that was installed before, so tests can restore it.
    """
    global _installed
    previous, _installed = _installed, driver
    return previous


def reset_driver() -> None:
    """Forget the installed driver; the next use builds it from settings."""
    set_driver(None)


def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "ULTIMATE_JOBS":
        reset_driver()


def _connect() -> None:
    from django.core.signals import setting_changed

    # conf reads the keys a driver declares (it may not import drivers).
    use_driver_keys(_driver_keys)
    setting_changed.connect(_settings_changed, dispatch_uid="ultimate_jobs_driver")


_connect()


def is_driver(candidate: object) -> bool:
    """Whether ``candidate`` is a driver object (a name string or a driver
    class is not): what an API taking ``driver=`` checks before using it."""
    from .basedriver import BaseDriver

    return isinstance(candidate, BaseDriver)
