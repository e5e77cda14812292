"""No request to the app's admin answers 500.

Every parameter of every page the app adds, every list filter, every object
URL, every list action and the autocomplete endpoint of every model that
has one, each given values no row can hold (a NUL, a lone surrogate, an id
that is not one, a date that is not one, a number past any column, a choice
that does not exist): the answer is a 400, a 404, a redirect to ``?e=1`` or
to the list with a message, or the page with a message; never a 500, and
nothing changes. The lists of pages, models and actions are read from the
admin itself, so a new one is probed without editing this file.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client, RequestFactory
from django.urls import reverse

from django_ultimate_jobs.models import Job, WebhookDelivery, WebhookEndpoint
from tests.support.dead import dead_job

pytestmark = pytest.mark.postgres

# Raw, already percent-encoded: the client would refuse to encode some.
BAD_VALUES = {
    "nul": "%00",
    "nul inside": "a%00b",
    "surrogate": "%ED%A0%80",
    "not a uuid": "not-a-uuid",
    "bad date": "2024-13-45T99%3A99",
    "huge number": "9" * 40,
    "negative": "-1",
    "unknown choice": "bogus",
    "empty": "",
}
# What a list could take from its query string; each admin is probed with
# those its lookup_allowed accepts, and Django's own.
CANDIDATE_LOOKUPS = (
    "state",
    "state__exact",
    "queue",
    "name",
    "tenant",
    "tenant__exact",
    "status",
    "account",
    "account__exact",
    "currency",
    "currency__exact",
)
DJANGO_PARAMETERS = ("o", "p", "all", "_facets", "_to_field", "_popup")
ANSWERS = {200, 302, 400, 403, 404}


def _registered() -> list[tuple[Any, Any]]:
    return [
        (model, model_admin)
        for model, model_admin in admin.site._registry.items()
        if model._meta.app_label == "ultimate_jobs"
    ]


def _superuser_request() -> Any:
    request = RequestFactory().get("/")
    request.user = User(is_superuser=True, is_staff=True, is_active=True)
    return request


@pytest.fixture
def web(db):
    """A client that answers a 500 as a response (not a raised error), as a
    superuser."""
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


@pytest.fixture
def viewer(db):
    """A staff user who may only look, at every model of the app."""
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    for codename in (
        "view_job",
        "view_backfill",
        "view_outboxmessage",
        "view_ledgerposting",
        "view_ledgerline",
        "view_consumer",
        "view_subjectrequest",
        "view_erasurerecord",
        "view_reindex",
        "view_export",
        "view_import",
        "view_webhookendpoint",
        "view_webhookdelivery",
        "view_inbounddelivery",
    ):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def _bad(response: Any, what: Any) -> str | None:
    if response.status_code not in ANSWERS:
        return f"{what}: {response.status_code}"
    return None


def test_the_three_reported_requests_answer_without_a_500(viewer, web, pg_driver):
    """The issue's three: a NUL in the backfill filter with ``e=1``, a NUL
    in an autocomplete term (view-only), a list action over an id that is
    not a UUID."""
    job_id = dead_job(pg_driver)
    backfills = viewer.get("/admin/ultimate_jobs/backfill/?state=%00&e=1")
    assert backfills.status_code in (200, 302)
    term = viewer.get(
        "/admin/autocomplete/?app_label=ultimate_jobs&model_name=ledgerline"
        "&field_name=posting&term=%00"
    )
    assert term.status_code in (200, 400)
    action = web.post(
        reverse("admin:ultimate_jobs_job_changelist"),
        {"action": "retry_selected", "index": "0", "_selected_action": "not-a-uuid"},
    )
    assert action.status_code == 302
    landing = web.get(action["Location"])
    assert "not-a-uuid" not in landing.text or "X_JOB_ID_INVALID" in landing.text
    assert pg_driver.get(job_id).state == "dead"
    assert not LogEntry.objects.exists()


def _lookups(model_admin: Any) -> list[str]:
    request = _superuser_request()
    taken = [
        name
        for name in CANDIDATE_LOOKUPS
        if model_admin.lookup_allowed(name, "x", request)
    ]
    search = ["q"] if model_admin.get_search_fields(request) else []
    return [*taken, *search, *DJANGO_PARAMETERS]


@pytest.mark.parametrize(
    "model_name", sorted(m._meta.model_name for m, _ in _registered())
)
def test_no_list_filter_value_answers_500(web, viewer, pg_driver, model_name):
    """Each list's parameters, each bad value, with and without ``e=1``."""
    dead_job(pg_driver)
    (model_admin,) = [a for m, a in _registered() if m._meta.model_name == model_name]
    url = reverse(f"admin:ultimate_jobs_{model_name}_changelist")
    failures = []
    for parameter in _lookups(model_admin):
        for label, value in BAD_VALUES.items():
            for tail in ("", "&e=1"):
                query = f"{url}?{parameter}={value}{tail}"
                for client in (web, viewer):
                    failures.append(_bad(client.get(query), (query, label)))
    assert [f for f in failures if f] == []


def _autocompletes() -> list[tuple[str, str, str]]:
    """Every (app, model, field) whose relation ends at a model the app's
    admin registers with search fields: what the autocomplete view serves."""
    served = {m for m, a in _registered() if a.search_fields}
    return sorted(
        (model._meta.app_label, model._meta.model_name, field.name)
        for model in apps.get_models()
        for field in model._meta.get_fields()
        if getattr(field, "remote_field", None) is not None
        and field.remote_field.model in served
        and field.concrete
    )


def test_the_autocomplete_of_each_model_answers_bad_terms_without_a_500(
    web, viewer, pg_driver
):
    """Terms and pages no row can hold, for every model with autocomplete."""
    sources = _autocompletes()
    assert ("ultimate_jobs", "ledgerline", "posting") in sources
    failures = []
    for app_label, model_name, field_name in sources:
        base = (
            f"/admin/autocomplete/?app_label={app_label}&model_name={model_name}"
            f"&field_name={field_name}"
        )
        for label, value in BAD_VALUES.items():
            for extra in (f"&term={value}", f"&term=a&page={value}"):
                for client in (web, viewer):
                    failures.append(_bad(client.get(base + extra), (extra, label)))
    assert [f for f in failures if f] == []


def test_no_list_action_over_bad_ids_answers_500_or_acts(web, pg_driver):
    """Every action of every model admin, over ids no row can have."""
    job_id = dead_job(pg_driver)
    failures = []
    for model, model_admin in _registered():
        url = reverse(f"admin:ultimate_jobs_{model._meta.model_name}_changelist")
        for action in model_admin.get_actions(_superuser_request()):
            for label, value in BAD_VALUES.items():
                for across in ({}, {"select_across": "1"}):
                    body = (
                        urlencode({"action": action, "index": "0", **across})
                        + f"&_selected_action={value}"
                    )
                    response = web.post(
                        url, body, content_type="application/x-www-form-urlencoded"
                    )
                    failures.append(_bad(response, (model, action, label, across)))
                    if not across:
                        # No "are you sure?" over a selection that holds nothing.
                        assert 'id="uj-confirm"' not in response.text, (action, label)
    assert [f for f in failures if f] == []
    assert pg_driver.get(job_id).state == "dead"
    assert not LogEntry.objects.exists()


def test_no_object_url_answers_500_for_an_id_no_row_can_have(web, pg_driver):
    """change, history and delete of every model, over bad ids."""
    failures = []
    for model, _ in _registered():
        name = model._meta.model_name
        for page in ("change", "history", "delete"):
            url = reverse(f"admin:ultimate_jobs_{name}_{page}", args=["ID"])
            for label, value in BAD_VALUES.items():
                if not value:
                    continue  # an empty id is another URL
                probe = url.replace("ID", value)
                failures.append(_bad(web.get(probe), (probe, label)))
    assert [f for f in failures if f] == []


PAGE_PARAMETERS = {
    "ultimate_jobs_job_leases": ("prefix",),
    "ultimate_jobs_job_events": ("name",),
    "ultimate_jobs_ledgerline_balances": ("account", "currency", "tenant"),
    "ultimate_jobs_job_dead_letter": ("name", "code"),
    "ultimate_jobs_job_queues": ("queue",),
    "ultimate_jobs_job_cron_tasks": ("task",),
    "ultimate_jobs_job_workers": ("x",),
    "ultimate_jobs_job_dashboard": ("span", "queue", "job"),
}
PAGE_POSTS = {
    "ultimate_jobs_job_dead_letter": ({"name": "tests.noop"}, ("name", "code")),
    "ultimate_jobs_job_queues": (
        {"queue": "default", "verb": "pause"},
        ("queue", "verb"),
    ),
    "ultimate_jobs_job_cron_tasks": (
        {"task": "ultimate_jobs.retention", "verb": "pause"},
        ("task", "verb"),
    ),
}


def test_no_page_parameter_answers_500(web, pg_driver):
    """The pages the app adds: each GET parameter and each POST field they
    read, given each bad value (confirmed or not); nothing changes."""
    job_id = dead_job(pg_driver)
    failures = []
    for name, parameters in PAGE_PARAMETERS.items():
        url = reverse(f"admin:{name}")
        for parameter in parameters:
            for label, value in BAD_VALUES.items():
                failures.append(
                    _bad(web.get(f"{url}?{parameter}={value}"), (name, label))
                )
    for name, (base, fields) in PAGE_POSTS.items():
        url = reverse(f"admin:{name}")
        for field in fields:
            for label, value in BAD_VALUES.items():
                for confirmed in ("", "&confirmed=yes"):
                    body = urlencode({**base, field: "X"}).replace(
                        f"{field}=X", f"{field}={value}"
                    )
                    response = web.post(
                        url,
                        body + confirmed,
                        content_type="application/x-www-form-urlencoded",
                    )
                    failures.append(_bad(response, (name, field, label)))
    for verb in ("retry", "cancel", "promote", "remove"):
        url = reverse("admin:ultimate_jobs_job_operate", args=[job_id, verb])
        for label, value in BAD_VALUES.items():
            # Only a retry reads from_step when it acts (an empty one is a
            # plain retry); the others only confirm.
            confirmed = "yes" if verb == "retry" and value else "no"
            failures.append(_bad(web.get(f"{url}?from_step={value}"), (verb, label)))
            response = web.post(
                url,
                f"from_step={value}&confirmed={confirmed}",
                content_type="application/x-www-form-urlencoded",
            )
            failures.append(_bad(response, (verb, label)))
    operate = reverse("admin:ultimate_jobs_job_operate", args=[job_id, "VERB"])
    for label, value in BAD_VALUES.items():
        if value:
            probe = operate.replace("VERB", quote(value, safe="%"))
            failures.append(_bad(web.get(probe), (probe, label)))
    failures.extend(_probe_object_pages(web))
    assert [f for f in failures if f] == []
    # Queue names are free text ("bogus" may be paused); the job is not.
    assert pg_driver.get(job_id).state == "dead"
    assert Job.objects.count() == 1
    assert pg_driver.cron.paused_tasks() == []


# The pages the app adds under one object, and what they change when
# confirmed (which no bad request may do).
OBJECT_PAGES = (
    "ultimate_jobs_webhookendpoint_rotate",
    "ultimate_jobs_webhookendpoint_test",
)


def _probe_object_pages(web: Any) -> list[str | None]:
    """Each object page over an id no row can have (GET, confirmed POST), and
    over a real one with a bad ``confirmed`` (the confirmation again)."""
    endpoint = WebhookEndpoint.objects.create(
        url="https://hooks.example.com/in", secret="whsec_" + "A" * 43
    )
    failures = []
    for name in OBJECT_PAGES:
        url = reverse(f"admin:{name}", args=["ID"])
        for label, value in BAD_VALUES.items():
            if value:
                probe = url.replace("ID", value)
                failures.append(_bad(web.get(probe), (probe, label)))
                response = web.post(probe, {"confirmed": "yes"})
                failures.append(_bad(response, (probe, label)))
            response = web.post(
                url.replace("ID", str(endpoint.pk)),
                f"confirmed={value}",
                content_type="application/x-www-form-urlencoded",
            )
            failures.append(_bad(response, (name, "confirmed", label)))
    assert WebhookEndpoint.objects.get().secret == endpoint.secret
    assert not WebhookDelivery.objects.exists()
    return failures


@pytest.mark.parametrize(
    ("model_name", "parameter"),
    [
        ("job", "state"),
        ("backfill", "state"),
        ("backfill", "state__exact"),
        ("outboxmessage", "status"),
        ("consumer", "state"),
        ("reindex", "state"),
        ("webhookendpoint", "enabled"),
        ("webhookdelivery", "state"),
        ("webhookdelivery", "endpoint__id__exact"),
    ],
)
@pytest.mark.parametrize("value", ["bogus", "%00", "dead%00"])
@pytest.mark.parametrize("tail", ["", "&e=1"])
def test_a_choice_outside_a_filters_choices_is_an_invalid_filter(
    viewer, pg_driver, model_name, parameter, value, tail
):
    """``?status=bogus`` no longer shows every message as if unfiltered: a
    value outside the choices redirects to ``?e=1``, with ``e=1`` too."""
    url = reverse(f"admin:ultimate_jobs_{model_name}_changelist")
    response = viewer.get(f"{url}?{parameter}={value}{tail}")
    assert response.status_code == 302
    assert response["Location"] == f"{url}?e=1"
    assert viewer.get(response["Location"]).status_code == 200


# A verb over a name it will refuse: (page, fields, the code shown).
REFUSED_NAMES = [
    *[
        ("ultimate_jobs_job_queues", {"verb": verb, **queue}, "X_JOB_INPUT_INVALID")
        for verb in ("pause", "resume")
        for queue in ({}, {"queue": ""}, {"queue": "a\x00b"})
    ],
    *[
        ("ultimate_jobs_job_cron_tasks", {"verb": verb, **task}, "X_TASK_UNKNOWN")
        for verb in ("pause", "resume", "run")
        for task in ({}, {"task": ""}, {"task": "nope"}, {"task": "a\x00b"})
    ],
]


@pytest.mark.parametrize(("page", "fields", "code"), REFUSED_NAMES)
def test_a_verb_over_a_name_it_refuses_is_refused_at_the_first_post(
    web, pg_driver, page, fields, code
):
    """No confirmation page for a queue or task the verb will refuse: the
    coded error at once, no NUL echoed, nothing paused or run."""
    response = web.post(reverse(f"admin:{page}"), fields, follow=True)
    assert response.status_code == 200
    assert code in response.text
    assert 'id="uj-confirm"' not in response.text
    assert "\x00" not in response.text
    assert pg_driver.cron.paused_tasks() == []
    assert not Job.objects.exists()
    assert not LogEntry.objects.exists()
