"""Worker options refused before a worker starts: ``runjobs`` flags, settings.

Every refusal is ``X_SETTINGS_INVALID`` (a ``CommandError`` carrying it from
``runjobs``), raised before any thread starts or any statement runs: refuse,
never normalise, so a typo cannot serve queues nobody asked for.
"""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from django_ultimate_jobs.conf import parse_settings
from django_ultimate_jobs.errors import SettingsInvalid
from django_ultimate_jobs.worker.config import WorkerConfig


def runjobs(*args: str) -> CommandError:
    """Run ``runjobs --burst *args`` and answer its refusal."""
    with pytest.raises(CommandError) as caught:
        call_command("runjobs", "--burst", "--no-scheduler", "--no-wake", *args)
    assert str(caught.value).startswith("X_SETTINGS_INVALID: "), caught.value
    return caught.value


@pytest.mark.parametrize("seconds", ["nan", "inf", "-inf", "0", "-1", "1e300"])
def test_a_shutdown_deadline_that_is_not_a_number_of_seconds_is_coded(seconds):
    """``--shutdown-deadline nan`` printed a ValueError traceback, ``inf`` an
    OverflowError: both are a coded refusal naming the flag."""
    error = runjobs(f"--shutdown-deadline={seconds}")
    assert "--shutdown-deadline must be from 0.001 to 3153600000 seconds" in str(error)
    assert "--shutdown-deadline 25" in str(error)


@pytest.mark.parametrize(
    ("queues", "cause"),
    [
        ("", "--queues is empty"),
        ("a,,b", "--queues item 2 ('') must be a non-empty string"),
        ("a,", "--queues item 2 ('') must be a non-empty string"),
        (" a", "--queues item 1 (' a') must be written without surrounding spaces"),
        ("a, b", "--queues item 2 (' b') must be written without surrounding spaces"),
        ("q" * 201, "must be at most 200 characters, not 201"),
        ("a\tb", "holds the non-printable character U+0009"),
    ],
    ids=[
        "empty",
        "empty-item",
        "trailing-comma",
        "space",
        "inner-space",
        "long",
        "tab",
    ],
)
def test_queues_are_refused_rather_than_normalised(queues, cause):
    """``--queues ""`` fell back to QUEUES, ``a,,b`` and `` a`` were trimmed, a
    201-character name was served: each is refused, with the flag's fix."""
    error = runjobs("--queues", queues)
    assert cause in str(error)
    assert "e.g. --queues default,emails" in str(error)


def test_a_concurrency_past_1000_is_refused_before_any_thread_starts():
    """``--concurrency 100000`` tried to start 100,000 threads."""
    with pytest.raises(SettingsInvalid) as caught:
        WorkerConfig.from_settings(queues=("default",), concurrency=100_000)
    assert (
        caught.value.cause
        == "worker option concurrency must be at most 1000, got 100000"
    )
    assert "runjobs --processes" in caught.value.fix
    assert WorkerConfig.from_settings(queues=("default",), concurrency=1000)


def test_runjobs_refuses_a_concurrency_past_1000():
    """The flag is held to the same bound as the setting."""
    assert "concurrency must be at most 1000" in str(runjobs("--concurrency", "1001"))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("CONCURRENCY", 1001),
        ("CLAIM_BATCH", 1001),
        ("QUEUES", ["default", " emails"]),
        ("QUEUES", ["default", "a\nb"]),
        ("QUEUES", ["q" * 201]),
        ("VISIBILITY_TIMEOUT", "36501d"),
    ],
    ids=repr,
)
def test_settings_past_their_bounds_are_refused(key, value):
    """The settings meet the bounds of the flags: ``manage.py check`` reports
    them rather than the worker meeting them."""
    with pytest.raises(SettingsInvalid) as caught:
        parse_settings({key: value})
    assert f"ULTIMATE_JOBS[{key!r}]" in caught.value.cause


def test_a_bad_queue_setting_names_the_item_and_the_problem():
    """Which item of QUEUES, and what is wrong with it."""
    with pytest.raises(SettingsInvalid) as caught:
        parse_settings({"QUEUES": ["default", "a\x00b"]})
    assert caught.value.cause.startswith(
        "ULTIMATE_JOBS['QUEUES'][1] holds a NUL character"
    )
    assert "ULTIMATE_JOBS['QUEUES']" in caught.value.fix


@pytest.mark.parametrize("processes", ["0", "-3", "65", "100000"])
def test_a_process_count_out_of_range_is_refused_before_any_fork(processes):
    """``--processes 100000`` forked until the host ran out of memory; ``0``
    was refused uncoded. Both are X_SETTINGS_INVALID with the range."""
    error = runjobs(f"--processes={processes}")
    assert "--processes must be a whole number from 1 to 64" in str(error)
