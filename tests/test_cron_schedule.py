"""Cron schedules across DST, and ``task(...)`` declarations refused at import."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from django_ultimate_jobs import task
from django_ultimate_jobs.cron import parse_schedule
from django_ultimate_jobs.crontask import get_task, unregister_task
from django_ultimate_jobs.errors import (
    CronInvalid,
    JobDuplicate,
    TaskDeclarationInvalid,
    TimezoneInvalid,
)
from tests.jobsapp.jobs import charge, noop


def local(schedule, start, end, limit=50):
    """Occurrences in (start, end] as local wall-clock strings with offsets."""
    return [
        o.astimezone(schedule.zone).strftime("%m-%d %H:%M%z")
        for o in schedule.between(start, end, limit=limit)
    ]


# -- DST: Europe/Paris (last Sundays of March and October 2026) ---------------


def test_paris_fixed_time_in_the_spring_gap_runs_once_at_the_end_of_the_gap():
    """02:30 does not exist on 29 March: it runs at 03:00 CEST, once."""
    daily = parse_schedule("30 2 * * *", "Europe/Paris")
    start = datetime(2026, 3, 27, 12, tzinfo=UTC)
    assert local(daily, start, start + timedelta(days=3)) == [
        "03-28 02:30+0100",
        "03-29 03:00+0200",
        "03-30 02:30+0200",
    ]


def test_paris_fixed_time_in_the_repeated_hour_runs_on_the_first_pass_only():
    """02:30 happens twice on 25 October: the task runs once, at 02:30 CEST."""
    daily = parse_schedule("30 2 * * *", "Europe/Paris")
    start = datetime(2026, 10, 23, 12, tzinfo=UTC)
    assert local(daily, start, start + timedelta(days=3)) == [
        "10-24 02:30+0200",
        "10-25 02:30+0200",
        "10-26 02:30+0100",
    ]


def test_paris_interval_cron_runs_through_both_passes_and_keeps_its_spacing():
    """Every 30 min: both passes of 02:xx in October, none in the March gap."""
    half_hourly = parse_schedule("*/30 * * * *", "Europe/Paris")
    autumn = datetime(2026, 10, 24, 23, 30, tzinfo=UTC)  # 01:30 CEST
    assert local(half_hourly, autumn, autumn + timedelta(hours=3)) == [
        "10-25 02:00+0200",
        "10-25 02:30+0200",
        "10-25 02:00+0100",
        "10-25 02:30+0100",
        "10-25 03:00+0100",
        "10-25 03:30+0100",
    ]
    spring = datetime(2026, 3, 29, 0, 0, tzinfo=UTC)  # 01:00 CET
    occurrences = half_hourly.between(spring, spring + timedelta(hours=2), limit=10)
    assert [o - spring for o in occurrences] == [
        timedelta(minutes=30 * n) for n in range(1, 5)
    ]


# -- DST: America/New_York (8 March and 1 November 2026) ----------------------


def test_new_york_fixed_time_in_the_gap_and_the_repeated_hour():
    """02:15 runs at 03:00 EDT in March; 01:30 runs once (EDT) on 1 November."""
    daily = parse_schedule("15 2 * * *", "America/New_York")
    march = datetime(2026, 3, 7, 12, tzinfo=UTC)
    assert local(daily, march, march + timedelta(days=2)) == [
        "03-08 03:00-0400",
        "03-09 02:15-0400",
    ]
    november = datetime(2026, 10, 31, 12, tzinfo=UTC)
    early = parse_schedule("30 1 * * *", "America/New_York")
    assert local(early, november, november + timedelta(days=2)) == [
        "11-01 01:30-0400",
        "11-02 01:30-0500",
    ]


def test_new_york_interval_cron_runs_every_real_hour_across_both_changes():
    """Hourly (hour field *): 23 runs on the short day, 25 on the long one."""
    hourly = parse_schedule("0 * * * *", "America/New_York")
    for day, expected in ((datetime(2026, 3, 8), 23), (datetime(2026, 11, 1), 25)):
        zone = hourly.zone
        start = day.replace(tzinfo=zone).astimezone(UTC) - timedelta(microseconds=1)
        end = (day + timedelta(days=1)).replace(tzinfo=zone).astimezone(UTC)
        runs = hourly.between(start, end - timedelta(microseconds=1), limit=30)
        assert len(runs) == expected
        assert all(b - a == timedelta(hours=1) for a, b in pairwise(runs))


def test_latest_walks_back_without_walking_the_whole_outage():
    """The last occurrences before now, after a year of downtime, in order."""
    every_minute = parse_schedule("* * * * *", "Europe/Paris")
    end = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
    latest = every_minute.latest(end - timedelta(days=365), end, limit=3)
    assert [o.strftime("%H:%M") for o in latest] == ["11:58", "11:59", "12:00"]


# -- validation ---------------------------------------------------------------


@pytest.mark.parametrize(
    "cron", ["0 9 * *", "0 9 * * * *", "61 * * * *", "0 0 30 2 *", "", "@sometimes"]
)
def test_a_bad_cron_expression_is_refused_with_its_code(cron):
    with pytest.raises(CronInvalid) as refused:
        parse_schedule(cron, "Europe/Paris")
    assert refused.value.code == "X_CRON_INVALID"


@pytest.mark.parametrize(
    "tz", ["", None, "+02:00", "UTC+2", "Etc/GMT-2", "GMT+1", "EST", "Mars/Olympus"]
)
def test_a_fixed_offset_or_unknown_zone_is_refused(tz):
    with pytest.raises(TimezoneInvalid) as refused:
        parse_schedule("0 9 * * *", tz)
    assert refused.value.code == "X_TIMEZONE_INVALID"


def test_utc_and_macros_are_accepted():
    """UTC is an IANA name with no DST to lose; @daily is 0 0 * * *."""
    daily = parse_schedule("@daily", "UTC")
    start = datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert daily.next_after(start) == datetime(2026, 1, 2, tzinfo=UTC)


def test_a_declaration_lists_every_problem_before_anything_is_registered():
    """Bad cron AND bad zone AND bad policy: one error naming all three."""
    with pytest.raises(CronInvalid) as refused:
        task(
            name="tests.cron.bad",
            cron="0 9 * *",
            tz="+02:00",
            job=noop,
            catch_up="sometimes",
        )
    problems = refused.value.meta["problems"]
    assert len(problems) == 3
    assert "fixed offset" in problems[1]
    assert "catch_up" in problems[2]
    assert get_task("tests.cron.bad") is None


def test_the_short_form_checks_its_input_at_import():
    """job=charge with an input missing invoice_id is refused at declaration."""
    with pytest.raises(TaskDeclarationInvalid, match="missing invoice_id"):
        task(name="tests.cron.charge", cron="@daily", tz="UTC", job=charge, input={})


def test_two_declarations_of_one_name_are_refused():
    first = task(name="tests.cron.twice", cron="@hourly", tz="UTC", job=noop)
    try:
        with pytest.raises(JobDuplicate):
            task(name="tests.cron.twice", cron="@daily", tz="UTC", job=noop)
        assert first.describe() == {
            "name": "tests.cron.twice",
            "cron": "@hourly",
            "tz": "UTC",
            "catch_up": "skip",
            "max_catch_up": 10,
        }
    finally:
        unregister_task("tests.cron.twice")
