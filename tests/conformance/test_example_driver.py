"""The conformance suite on a driver of the test tree, named by dotted path.

``tests.drivers.example.ExampleDriver`` is built the way a project's driver
is: ``ULTIMATE_JOBS["DRIVER"]`` names its class, ``get_driver()`` loads it
and calls its ``from_settings`` with the key it declares
(``EXAMPLE_STORE``). The clock is the store's, made before the settings
name it.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from django_ultimate_jobs.checks import check_settings
from django_ultimate_jobs.drivers import get_driver
from django_ultimate_jobs.drivers.base import EnqueueRequest
from django_ultimate_jobs.errors import SettingsInvalid
from django_ultimate_jobs.testing.conformance import COUNTER_FIELDS, DriverConformance
from tests.drivers.example import ExampleDriver, forget_store, open_store

PATH = "tests.drivers.example.ExampleDriver"


class TestExampleDriver(DriverConformance):
    """Every conformance check, on the example driver loaded from settings."""

    @pytest.fixture
    def driver(self, clock, settings):
        name = f"conformance-{uuid.uuid4().hex}"
        open_store(name, clock)
        settings.ULTIMATE_JOBS = {"DRIVER": PATH, "EXAMPLE_STORE": name}
        driver = get_driver()
        assert type(driver) is ExampleDriver and driver.clock is clock
        yield driver
        forget_store(name)

    @pytest.fixture
    def put_step(self, driver):
        return driver.store.put_step

    @pytest.fixture
    def step_names(self, driver):
        return driver.store.step_names

    @pytest.fixture
    def counters(self, driver):
        def read(job):
            buckets = driver.store.counters(job)
            assert all(set(c) == set(COUNTER_FIELDS) for c in buckets.values())
            return buckets

        return read


def test_rows_outlive_the_driver_object(settings):
    """A reset driver built again from the settings finds the store's rows."""
    name = f"outlive-{uuid.uuid4().hex}"
    settings.ULTIMATE_JOBS = {"DRIVER": PATH, "EXAMPLE_STORE": name}
    try:
        first = get_driver()
        enqueued = first.enqueue(EnqueueRequest(name="example.kept", input={}))
        settings.ULTIMATE_JOBS = {"DRIVER": PATH, "EXAMPLE_STORE": name}
        again = get_driver()
        assert again is not first
        assert again.get(enqueued.id).name == "example.kept"
    finally:
        forget_store(name)


@pytest.mark.parametrize(
    ("driver", "needle"),
    [
        ("tests.drivers.missing.Driver", "cannot be imported"),
        ("tests.drivers.example.open_store", "not a driver class"),
        ("django_ultimate_jobs.clock.ManualClock", "not a driver class"),
    ],
)
def test_a_path_that_names_no_driver_is_refused_with_a_code(settings, driver, needle):
    """X_SETTINGS_INVALID at first use, naming the path; nothing is built."""
    settings.ULTIMATE_JOBS = {"DRIVER": driver}
    with pytest.raises(SettingsInvalid) as refused:
        get_driver()
    assert refused.value.code == "X_SETTINGS_INVALID"
    assert needle in refused.value.cause and driver in refused.value.cause


def test_manage_py_check_names_a_bad_driver_path(settings):
    """The system check reports ultimate_jobs.E001 before any worker starts."""
    settings.ULTIMATE_JOBS = {"DRIVER": "tests.drivers.missing.Driver"}
    (error,) = check_settings()
    assert error.id == "ultimate_jobs.E001"
    assert "tests.drivers.missing.Driver" in error.msg


def test_a_key_only_another_driver_declares_is_refused(settings):
    """EXAMPLE_STORE is the example driver's: with DRIVER "memory" it is unknown."""
    settings.ULTIMATE_JOBS = {"DRIVER": "memory", "EXAMPLE_STORE": "x"}
    with pytest.raises(SettingsInvalid) as refused:
        get_driver()
    assert refused.value.meta["unknown"] == ["EXAMPLE_STORE"]


def test_the_how_to_shows_the_example_as_it_is():
    """docs/howto/writing-a-driver.md quotes the example driver and its test verbatim."""
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs/howto/writing-a-driver.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    sources = {
        "# tests/drivers/example.py\n": root / "tests/drivers/example.py",
        "class TestExampleDriver": Path(__file__),
    }
    quoted = 0
    for block in blocks:
        for opening, path in sources.items():
            if block.startswith(opening):
                body = block.removeprefix("# tests/drivers/example.py\n")
                assert body in path.read_text(encoding="utf-8"), path.name
                quoted += 1
    assert quoted == 2
