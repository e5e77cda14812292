"""Drivers: where jobs are stored. Internal; see ``drivers.base``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import JobDriver

__all__ = ["get_driver", "reset_driver", "set_driver"]

_installed: JobDriver | None = None


def get_driver() -> JobDriver:
    """Return the process's driver, built from settings on first use."""
    global _installed
    if _installed is None:
        from ..conf import jobs_settings

        configured = jobs_settings()
        if configured.driver == "memory":
            from .memory import MemoryDriver

            _installed = MemoryDriver()
        else:
            from .postgres import PostgresDriver

            _installed = PostgresDriver(
                using=configured.database, prepare=configured.prepare
            )
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
