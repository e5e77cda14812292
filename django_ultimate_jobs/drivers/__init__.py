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
from typing import TYPE_CHECKING, Any, cast

from django.utils.module_loading import import_string

from ..conf import jobs_settings, use_driver_keys
from ..errors import SettingsInvalid

if TYPE_CHECKING:
    from ..conf import Kind
    from .base import JobDriver
    from .basedriver import BaseDriver

__all__ = ["ALIASES", "driver_class", "get_driver", "reset_driver", "set_driver"]

ALIASES = {
    "postgres": "django_ultimate_jobs.drivers.postgres.PostgresDriver",
    "memory": "django_ultimate_jobs.drivers.memory.MemoryDriver",
    "redis": "django_ultimate_jobs.drivers.redis.RedisDriver",
}
"""Short names ``ULTIMATE_JOBS["DRIVER"]`` accepts for the shipped drivers."""

_DRIVER_FIX = (
    'set ULTIMATE_JOBS["DRIVER"] to "postgres", "memory", "redis" or the dotted path '
    "of a BaseDriver subclass (docs/howto/writing-a-driver.md)"
)

_installed: JobDriver | None = None


@cache
def driver_class(name: str) -> type[BaseDriver]:
    """The driver class ``name`` names: an alias or a dotted path.

    Raises:
        SettingsInvalid: ``name`` cannot be imported, or is not a
            :class:`~.basedriver.BaseDriver` subclass.
    """
    from .basedriver import BaseDriver

    path = ALIASES.get(name, name)
    try:
        found = import_string(path)
    except ImportError as error:
        raise SettingsInvalid(
            f"ULTIMATE_JOBS['DRIVER'] names {name!r}, which cannot be imported "
            f"({error})",
            fix=_DRIVER_FIX,
            meta={"driver": name},
        ) from error
    if not (isinstance(found, type) and issubclass(found, BaseDriver)):
        raise SettingsInvalid(
            f"ULTIMATE_JOBS['DRIVER'] names {name!r}, which is not a driver "
            "class (a subclass of django_ultimate_jobs.drivers.basedriver.BaseDriver)",
            fix=_DRIVER_FIX,
            meta={"driver": name},
        )
    return found


def _driver_keys(name: str) -> Mapping[str, Kind]:
    """The ``ULTIMATE_JOBS`` keys the driver ``name`` declares (conf asks)."""
    return driver_class(name).settings_keys


def get_driver() -> JobDriver:
    """Return the process's driver, built from settings on first use.

    Raises:
        SettingsInvalid: ``ULTIMATE_JOBS["DRIVER"]`` names no driver class.
    """
    global _installed
    if _installed is None:
        configured = jobs_settings()
        built = driver_class(configured.driver).from_settings(configured)
        # Every BaseDriver subclass keeps the contract (the conformance
        # suite proves it); mypy cannot see the verbs an ABC leaves abstract.
        _installed = cast("JobDriver", built)
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
