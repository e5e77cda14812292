"""Loading a driver class by name, and refusing one that breaks the contract.

A driver may live outside this package (docs/howto/writing-a-driver.md), so
everything about it is checked here, at load, with a coded
:class:`~django_ultimate_jobs.errors.SettingsInvalid`
(``X_SETTINGS_INVALID``; ``ultimate_jobs.E001`` from the system check):
never a raw traceback at the first call of a missing verb.

The verbs and roles required are read from the contract itself
(:class:`~.base.JobDriver`): :data:`CONTRACT_VERBS` and
:data:`CONTRACT_ROLES`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from ..conf import SETTINGS
from ..errors import JobsError, SettingsInvalid
from .base import JobDriver
from .basedriver import BaseDriver
from .features import DriverFeatures

if TYPE_CHECKING:
    from ..conf import JobsSettings

__all__ = [
    "CONTRACT_ROLES",
    "CONTRACT_VERBS",
    "build_driver",
    "load_driver_class",
]

CONTRACT_VERBS: tuple[str, ...] = tuple(
    name
    for name, member in vars(JobDriver).items()
    if not name.startswith("_") and inspect.isfunction(member)
)
"""Every method :class:`~.base.JobDriver` declares: a driver class has each."""

CONTRACT_ROLES: tuple[str, ...] = tuple(
    name
    for name, member in vars(JobDriver).items()
    if not name.startswith("_") and isinstance(member, property)
)
"""Every attribute :class:`~.base.JobDriver` declares (``name``,
``features``, the role objects ``steps``, ``events``, ``leases``, ``cron``,
``maintenance``, ``sessions``, ...): a built driver has each."""

DRIVER_FIX = (
    'set ULTIMATE_JOBS["DRIVER"] to "postgres", "memory", "redis" or the dotted path '
    "of a BaseDriver subclass (docs/howto/writing-a-driver.md)"
)


BUILD_FIX = (
    "make the driver's from_settings() answer an instance of its class with "
    "every role set (its store reachable, its settings right), or set "
    'ULTIMATE_JOBS["DRIVER"] to another driver (docs/howto/writing-a-driver.md)'
)


def _refused(
    name: str, why: str, *, fix: str = DRIVER_FIX, **meta: Any
) -> SettingsInvalid:
    return SettingsInvalid(
        f"ULTIMATE_JOBS['DRIVER'] names {name!r}, {why}",
        fix=fix,
        meta={"driver": name, **meta},
    )


def _import(name: str, path: str) -> object:
    if path.startswith("."):
        raise _refused(name, "a relative path (write the full dotted path)")
    try:
        return import_string(path)
    except ImportError as error:
        raise _refused(name, f"which cannot be imported ({error})") from error
    except Exception as error:  # (a driver module's own failure)
        # The driver's module raised while it was imported (a SyntaxError,
        # a RuntimeError at module level): its author needs the cause.
        raise _refused(
            name,
            f"whose module raised while it was imported "
            f"({type(error).__name__}: {error})",
        ) from error


def _check_settings_keys(name: str, keys: object) -> None:
    if not isinstance(keys, Mapping):
        raise _refused(
            name,
            f"whose settings_keys is a {type(keys).__name__}, not a mapping of "
            "key -> Kind",
        )
    clash = sorted(key for key in keys if key in SETTINGS)
    if clash:
        raise _refused(
            name,
            f"whose settings_keys redeclares common ULTIMATE_JOBS keys: "
            f"{', '.join(clash)} (they would be silently ignored)",
            keys=clash,
        )


def load_driver_class(name: str, path: str) -> type[BaseDriver]:
    """The driver class at ``path`` (``name`` is what the settings say).

    Raises:
        SettingsInvalid: it cannot be imported (or its module raises), is
            not a concrete :class:`~.basedriver.BaseDriver` subclass, lacks a
            verb of the contract, or declares ``features`` / ``settings_keys``
            of the wrong type.
    """
    found = _import(name, path)
    if not (isinstance(found, type) and issubclass(found, BaseDriver)):
        raise _refused(
            name,
            "which is not a driver class (a subclass of "
            "django_ultimate_jobs.drivers.basedriver.BaseDriver)",
        )
    if inspect.isabstract(found):
        abstract = sorted(found.__abstractmethods__)
        raise _refused(
            name,
            f"an abstract class: it does not define {', '.join(abstract)}",
            missing=abstract,
        )
    missing = [
        verb for verb in CONTRACT_VERBS if not callable(getattr(found, verb, None))
    ]
    if missing:
        raise _refused(
            name,
            f"whose class lacks verbs of the driver contract: {', '.join(missing)}",
            missing=missing,
        )
    if not isinstance(found.features, DriverFeatures):
        raise _refused(
            name,
            f"whose features is a {type(found.features).__name__}, not a "
            "DriverFeatures instance",
        )
    _check_settings_keys(name, found.settings_keys)
    return found


def build_driver(name: str, cls: type[BaseDriver], settings: JobsSettings) -> JobDriver:
    """``cls.from_settings(settings)``, checked: a driver with every role.

    Raises:
        SettingsInvalid: ``from_settings`` raised (the cause is named), or
            answered something that is not a ``cls`` with every role. A
            :class:`~django_ultimate_jobs.errors.JobsError` it raises
            (``DriverUnavailable``...) goes through with its own code.
    """
    try:
        built: object = cls.from_settings(settings)
    except JobsError:
        raise  # already coded by the driver (X_DRIVER_UNAVAILABLE, ...)
    except Exception as error:  # (the driver's own failure)
        raise _refused(
            name,
            f"which cannot be built: from_settings raised "
            f"{type(error).__name__}: {error}",
            fix=BUILD_FIX,
        ) from error
    if not isinstance(built, cls):
        raise _refused(
            name,
            f"whose from_settings answered a {type(built).__name__}, not a "
            f"{cls.__name__}",
            fix=BUILD_FIX,
        )
    missing = [role for role in CONTRACT_ROLES if not hasattr(built, role)]
    if missing:
        raise _refused(
            name,
            f"whose built driver lacks roles of the driver contract: "
            f"{', '.join(missing)} (set them in __init__)",
            fix=BUILD_FIX,
            missing=missing,
        )
    return built  # type: ignore[return-value]  # verbs and roles checked above
