"""Drivers that break the contract, each one way: the loader refuses each.

tests/test_driver_loading.py names them by dotted path and expects
``X_SETTINGS_INVALID`` (``ultimate_jobs.E001`` from the check), never a
raw traceback, and nothing built.
"""

from __future__ import annotations

from typing import Any

from django_ultimate_jobs.conf import JobsSettings, Kind
from django_ultimate_jobs.drivers.basedriver import BaseDriver
from django_ultimate_jobs.drivers.features import DriverFeatures
from django_ultimate_jobs.errors import DriverUnavailable
from tests.drivers.example import ExampleDriver

SHARED = DriverFeatures(shared_across_processes=True)


class Abstract(BaseDriver):
    """Defines none of BaseDriver's abstract verbs."""

    name = "abstract"


class NoClaim(ExampleDriver):
    """Every verb but claim and list_jobs (hidden by a non-callable)."""

    name = "noclaim"
    claim = None  # type: ignore[assignment]
    list_jobs = None  # type: ignore[assignment]


class NoRoles(ExampleDriver):
    """Every verb, but ``__init__`` sets no role."""

    name = "noroles"

    def __init__(self, store: Any) -> None:
        self.store = store


class BadFeatures(ExampleDriver):
    """``features`` is a dict, not a DriverFeatures."""

    name = "badfeatures"
    features = {"wake_listener": True}  # type: ignore[assignment]


class BuildRaises(ExampleDriver):
    """``from_settings`` cannot reach its store."""

    name = "buildraises"
    features = SHARED

    @classmethod
    def from_settings(cls, settings: JobsSettings) -> BuildRaises:
        """Always fails, as an unreachable store does."""
        raise ConnectionError("cannot reach my store")


class BuildsNothing(ExampleDriver):
    """``from_settings`` answers something that is no driver."""

    name = "buildsnothing"

    @classmethod
    def from_settings(cls, settings: JobsSettings) -> Any:
        """Answers a plain object."""
        return object()


class Unshared(BuildRaises):
    """One process only; building it would fail (runjobs must not try)."""

    name = "unshared"
    features = DriverFeatures()


def _int(key: str, value: Any) -> Any:
    return int(value)  # a ValueError, not SettingsInvalid


class ParseRaises(ExampleDriver):
    """A driver key whose parse raises ValueError."""

    name = "parseraises"
    settings_keys = {"BROKEN_N": Kind("a whole number", _int)}


class KeysList(ExampleDriver):
    """``settings_keys`` is a list."""

    name = "keyslist"
    settings_keys = ["EXAMPLE_STORE"]  # type: ignore[assignment]


class ClashKey(ExampleDriver):
    """Declares a common key (QUEUES) as its own."""

    name = "clashkey"
    settings_keys = {"QUEUES": ExampleDriver.settings_keys["EXAMPLE_STORE"]}


class LyingWake(ExampleDriver):
    """Declares a wake listener; ``wake_listener()`` answers None (BaseDriver's)."""

    name = "lyingwake"
    features = DriverFeatures(wake_listener=True, shared_across_processes=True)


class LyingTransaction(ExampleDriver):
    """Declares it joins the caller's transaction; its rows are in memory."""

    name = "lyingtransaction"
    features = DriverFeatures(joins_caller_transaction=True)
    alias = "default"


class BuildUnavailable(ExampleDriver):
    """``from_settings`` raises a coded error of its own."""

    name = "buildunavailable"

    @classmethod
    def from_settings(cls, settings: JobsSettings) -> BuildUnavailable:
        """Always fails with X_DRIVER_UNAVAILABLE."""
        raise DriverUnavailable("my store is read-only")
