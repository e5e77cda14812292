"""A driver that breaks the contract is refused at load, with a code.

``X_SETTINGS_INVALID`` from ``get_driver()``, ``ultimate_jobs.E001`` from
the system check, never a raw traceback (issue 21's review: B1-B7, D8).
"""

from __future__ import annotations

import pytest

from django_ultimate_jobs.checks import check_settings
from django_ultimate_jobs.drivers import get_driver
from django_ultimate_jobs.drivers.loading import CONTRACT_ROLES, CONTRACT_VERBS
from django_ultimate_jobs.errors import JobsError, SettingsInvalid

B = "tests.drivers.broken."


@pytest.fixture
def raising_modules(tmp_path, monkeypatch):
    """Two importable modules: one raises at import, one is no Python."""
    (tmp_path / "uj_boom.py").write_text(
        'raise RuntimeError("boom at import")\n', encoding="utf-8"
    )
    (tmp_path / "uj_syntax.py").write_text("def (:\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))


def _refused(settings, value, **extra):
    settings.ULTIMATE_JOBS = {"DRIVER": value, **extra}
    (error,) = check_settings()
    assert error.id == "ultimate_jobs.E001"
    with pytest.raises(SettingsInvalid) as refused:
        get_driver()
    assert refused.value.code == "X_SETTINGS_INVALID"
    assert refused.value.cause == error.msg
    return refused.value


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("uj_boom.Driver", "RuntimeError: boom at import"),
        ("uj_syntax.Driver", "SyntaxError"),
    ],
)
def test_a_module_that_raises_on_import_is_refused(
    settings, raising_modules, path, needle
):
    error = _refused(settings, path)
    assert needle in error.cause and path in error.cause


def test_a_relative_path_is_refused(settings):
    assert "relative path" in _refused(settings, ".example.ExampleDriver").cause


@pytest.mark.parametrize(
    ("path", "missing"),
    [
        ("django_ultimate_jobs.drivers.basedriver.BaseDriver", "enqueue_many"),
        (B + "Abstract", "heartbeat_many"),
    ],
)
def test_an_abstract_class_is_refused(settings, path, missing):
    error = _refused(settings, path)
    assert "abstract" in error.cause and missing in error.meta["missing"]


def test_a_class_missing_verbs_is_refused_naming_them(settings):
    error = _refused(settings, B + "NoClaim")
    assert error.meta["missing"] == ["claim", "list_jobs"]


def test_a_driver_built_without_roles_is_refused_naming_them(settings):
    settings.ULTIMATE_JOBS = {"DRIVER": B + "NoRoles"}
    assert check_settings() == []  # the class is whole; its instance is not
    with pytest.raises(SettingsInvalid) as refused:
        get_driver()
    assert refused.value.meta["missing"] == [
        "steps", "events", "leases", "cron", "maintenance",
    ]  # fmt: skip


def test_the_contract_lists_are_read_from_the_protocol():
    assert {"claim", "list_jobs", "announce_worker", "now", "close"} <= set(
        CONTRACT_VERBS
    )
    assert {"cron", "steps", "events", "leases", "maintenance", "sessions"} <= set(
        CONTRACT_ROLES
    )


def test_features_of_the_wrong_type_are_refused(settings):
    assert "DriverFeatures" in _refused(settings, B + "BadFeatures").cause


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("BuildRaises", "ConnectionError: cannot reach my store"),
        ("BuildsNothing", "answered a object"),
    ],
)
def test_a_driver_that_cannot_be_built_is_refused_with_the_cause(
    settings, path, needle
):
    settings.ULTIMATE_JOBS = {"DRIVER": B + path}
    with pytest.raises(SettingsInvalid) as refused:
        get_driver()
    assert refused.value.code == "X_SETTINGS_INVALID"
    assert needle in refused.value.cause


def test_a_driver_parse_that_raises_value_error_is_refused(settings):
    error = _refused(settings, B + "ParseRaises", BROKEN_N="x")
    assert "BROKEN_N" in error.cause and "ValueError" in error.cause


@pytest.mark.parametrize(
    ("path", "needle"), [("KeysList", "not a mapping"), ("ClashKey", "QUEUES")]
)
def test_settings_keys_must_be_a_mapping_of_new_keys(settings, path, needle):
    assert needle in _refused(settings, B + path).cause


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("Unshared", "whose jobs live in one process"),
        ("BuildRaises", "ConnectionError: cannot reach my store"),
        ("NoClaim", "claim, list_jobs"),
    ],
)
def test_runjobs_refuses_a_bad_driver_with_a_code(settings, path, needle):
    """runjobs asks the class before building it; a build failure is coded."""
    from django.core.management import CommandError, call_command

    settings.ULTIMATE_JOBS = {"DRIVER": B + path}
    with pytest.raises(CommandError, match="X_SETTINGS_INVALID") as refused:
        call_command("runjobs", "--burst")
    assert needle in str(refused.value)


def test_jobs_ls_json_gives_the_coded_error(settings, capsys):
    import json

    from django.core.management import call_command

    from django_ultimate_jobs.management.commands.jobs import JsonRefusal

    settings.ULTIMATE_JOBS = {"DRIVER": B + "BuildRaises"}
    with pytest.raises(JsonRefusal):
        call_command("jobs", "ls", "--json")
    answer = json.loads(capsys.readouterr().err)
    assert answer["error"]["code"] == "X_SETTINGS_INVALID"
    assert "ConnectionError" in answer["error"]["cause"]


def test_a_coded_error_from_the_build_keeps_its_code(settings):
    settings.ULTIMATE_JOBS = {"DRIVER": B + "BuildUnavailable"}
    with pytest.raises(JobsError) as refused:
        get_driver()
    assert refused.value.code == "X_DRIVER_UNAVAILABLE"
