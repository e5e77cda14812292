"""Group retries and bulk actions in the admin: exactly the set confirmed,
and one ``LogEntry`` per object acted on, whose link opens it.

The dead-letter page's group retry acts on the group its confirmation
listed, read by the same query; an empty or missing group is refused. Every
bulk verb of the app's admin (the list actions of every registered model,
the dead-letter group retry, the cron task's run now) logs each object it
moved, never one entry for a batch and nothing for a press that moved
nothing; ``BULK_VERBS`` lists them, and a new one fails
``test_every_bulk_action_has_a_row`` until it is added.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import RequestFactory
from django.urls import reverse

from django_ultimate_jobs.backfills import enqueue_backfill, pause_backfill
from django_ultimate_jobs.consumers import consumer, unregister_consumer
from django_ultimate_jobs.models import (
    Consumer,
    Export,
    Import,
    Job,
    Reindex,
    WebhookDelivery,
    WebhookEndpoint,
)
from django_ultimate_jobs.webhooks.declaration import DEFAULT_WEBHOOK
from tests.jobsapp.jobs import noop
from tests.support.dead import dead_job, press_confirmed
from tests.support.hostile import ARTIFACTS, REINDEX

pytestmark = pytest.mark.postgres

DEAD = "admin:ultimate_jobs_job_dead_letter"


def states(driver, ids) -> list[str]:
    return [driver.get(job_id).state for job_id in ids]


def test_an_empty_or_missing_group_is_refused_and_moves_nothing(
    admin_client, pg_driver
):
    """``name=&confirmed=yes`` once retried every dead job: each malformed
    group is refused with a message, nothing moves, nothing is logged."""
    ids = [dead_job(pg_driver, n=n) for n in range(3)]
    ids.append(dead_job(pg_driver, "X_TIMEOUT: slow", n=9))
    url = reverse(DEAD)
    for group in (
        {"name": ""},
        {"name": "", "code": ""},
        {"name": "", "code": "X_BOOM"},
        {"code": "X_BOOM"},
        {"name": "tests.noop"},  # no code: a group is a name and a code
        {},
    ):
        for confirmed in ({}, {"confirmed": "yes"}):
            page = admin_client.post(url, {**group, **confirmed}, follow=True)
            assert page.status_code == 200, group
            assert "X_JOB_PAGE_INVALID" in page.text, group
            assert "Yes, retry" not in page.text, group
    assert set(states(pg_driver, ids)) == {"dead"}
    assert not LogEntry.objects.exists()


def test_a_group_with_no_dead_job_is_refused_not_confirmed(admin_client, pg_driver):
    """A group that matches no dead job: a message, no "0 dead jobs" page."""
    job_id = dead_job(pg_driver)
    url = reverse(DEAD)
    for group in (
        {"name": "tests.noop", "code": "X_NONE"},
        {"name": "t.x", "code": ""},
    ):
        for confirmed in ({}, {"confirmed": "yes"}):
            page = admin_client.post(url, {**group, **confirmed}, follow=True)
            assert "X_JOB_NOT_FOUND" in page.text and "Yes, retry" not in page.text
    assert states(pg_driver, [job_id]) == ["dead"]
    assert not LogEntry.objects.exists()


def test_the_retry_moves_exactly_the_jobs_the_confirmation_listed(
    admin_client, pg_driver
):
    """The group of dead jobs without an error moves alone: not the same
    name's other groups, not another name's."""
    bare = [dead_job(pg_driver, None, n=n) for n in range(2)]
    coded = dead_job(pg_driver, n=5)
    url = reverse(DEAD)
    page = admin_client.get(url)
    groups = {(g["name"], g["code"]): g["count"] for g in page.context["groups"]}
    assert groups == {("tests.noop", ""): 2, ("tests.noop", "X_BOOM"): 1}
    assert "(no error)" in page.text
    group = {"name": "tests.noop", "code": ""}
    confirm = admin_client.post(url, group)
    listed = [job_id for job_id, _ in confirm.context["jobs"]]
    assert sorted(listed) == sorted(str(i) for i in bare)
    press_confirmed(admin_client, group)
    assert states(pg_driver, [*bare, coded]) == ["ready", "ready", "dead"]


def test_the_retry_moves_only_the_jobs_the_confirmation_pinned(
    admin_client, admin_user, pg_driver
):
    """A job that joins the group between the confirmation and the press
    stays dead; pinned ids not (or no longer) in the group are refused; a
    confirming POST with no pinned id shows the confirmation, moving none."""
    url = reverse(DEAD)
    group = {"name": "tests.noop", "code": "X_BOOM"}
    listed = [dead_job(pg_driver, n=n) for n in range(2)]
    confirm = admin_client.post(url, group)
    pinned = list(confirm.context["selected"])
    assert sorted(pinned) == sorted(str(i) for i in listed)
    assert 'name="_selected_action"' in confirm.text
    late = dead_job(pg_driver, n=3)
    other = dead_job(pg_driver, "X_TIMEOUT: slow", n=4)
    bare = admin_client.post(url, {**group, "confirmed": "yes"})
    assert "Yes, retry" in bare.text
    assert states(pg_driver, [*listed, late]) == ["dead"] * 3
    data = {**group, "confirmed": "yes"}
    moved = admin_client.post(
        url, {**data, "_selected_action": [*pinned, str(other)]}, follow=True
    )
    assert "2 dead tests.noop X_BOOM jobs queued again; 1 remaining" in moved.text
    assert f"{other}: X_JOB_NOT_FOUND" in moved.text
    assert (
        states(pg_driver, [*listed, late, other]) == ["ready", "ready"] + ["dead"] * 2
    )
    entries = LogEntry.objects.filter(user_id=admin_user.pk)
    assert sorted(e.object_id for e in entries) == sorted(pinned)
    again = admin_client.post(url, {**data, "_selected_action": pinned}, follow=True)
    assert "X_JOB_NOT_FOUND" in again.text and "queued again" not in again.text
    assert states(pg_driver, [late]) == ["dead"]
    bad = admin_client.post(url, {**data, "_selected_action": "nope"}, follow=True)
    assert "X_JOB_PAGE_INVALID" in bad.text
    assert LogEntry.objects.count() == 2


def test_a_group_retry_logs_each_job_with_a_link_to_its_page(
    admin_client, admin_user, pg_driver
):
    """One LogEntry per job moved; its link opens the job page, and the
    job's history page shows it."""
    ids = [dead_job(pg_driver, n=n) for n in range(3)]
    other = dead_job(pg_driver, "X_TIMEOUT: slow", n=9)
    group = {"name": "tests.noop", "code": "X_BOOM"}
    moved = press_confirmed(admin_client, group)
    assert "3 dead tests.noop X_BOOM jobs queued again; 0 remaining" in moved.text
    entries = LogEntry.objects.order_by("object_id")
    assert sorted(e.object_id for e in entries) == sorted(str(i) for i in ids)
    for entry in entries:
        assert entry.user_id == admin_user.pk
        assert entry.change_message == (
            "Retried from the dead-letter group tests.noop X_BOOM (admin)"
        )
        assert admin_client.get(entry.get_admin_url()).status_code == 200
        history = reverse("admin:ultimate_jobs_job_history", args=[entry.object_id])
        assert "Retried from the dead-letter group" in admin_client.get(history).text
    assert states(pg_driver, [other]) == ["dead"]


def test_a_press_that_moves_nothing_logs_nothing(admin_client, pg_driver):
    """Each job of the group refused (a live job holds its key): the
    refusals are shown, nothing is logged."""
    job_id = dead_job(pg_driver, n=1)
    Job.objects.filter(id=job_id).update(idempotency_key="k")
    holder = noop.using(idempotency_key="k").enqueue(n=2)
    group = {"name": "tests.noop", "code": "X_BOOM"}
    page = press_confirmed(admin_client, group)
    assert "X_JOB_DUPLICATE" in page.text
    assert states(pg_driver, [job_id, holder.id]) == ["dead", "ready"]
    assert not LogEntry.objects.exists()


# -- every bulk verb of the admin ----------------------------------------------------


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Bulk:
    """How to press one bulk verb over objects of which some cannot move."""

    setup: Callable[[Any], tuple[list[str], list[str]]]
    """Answers (objects pressed on, objects that move)."""
    press: Callable[[Any, list[str], dict[str, str]], Any]
    """POSTs the verb over the objects, with the extra fields given."""
    teardown: Callable[[], None] = _nothing
    """Forgets what ``setup`` declared."""


def _action(model: str, action: str) -> Callable[[Any, list[str], dict], Any]:
    def press(client, objects, extra):
        url = reverse(f"admin:ultimate_jobs_{model}_changelist")
        data = {"action": action, "_selected_action": objects, **extra}
        return client.post(url, data, follow=True)

    return press


def _jobs(verb: str) -> Callable[[Any], tuple[list[str], list[str]]]:
    def setup(driver):
        done = str(dead_job(driver, n=1))
        ready = str(noop.enqueue(n=2).id)
        delayed = str(noop.using(delay="1h").enqueue(n=3).id)
        movable = {
            "retry": [done],
            "cancel": [ready, delayed],
            "promote": [ready, delayed],
            "remove": [done, ready, delayed],
        }[verb]
        return [done, ready, delayed], movable

    return setup


def _backfills(verb: str) -> Callable[[Any], tuple[list[str], list[str]]]:
    def setup(driver):
        from tests.jobsapp.jobs import BACKFILL_GROUPS

        small, big = sorted(BACKFILL_GROUPS)
        enqueue_backfill(small)
        enqueue_backfill(big)
        pause_backfill(big)
        # Pause moves the pending one; resume moves the paused one.
        return [small, big], [small] if verb == "pause" else [big]

    return setup


def _dead_group(driver):
    ids = [str(dead_job(driver, n=n)) for n in range(2)]
    Job.objects.filter(id=ids[1]).update(idempotency_key="k")
    noop.using(idempotency_key="k").enqueue(n=9)  # holds the key: refused
    return ids, ids[:1]


def _press_group(client, objects, extra):
    group = {"name": "tests.noop", "code": "X_BOOM", **extra}
    if extra:
        group["_selected_action"] = objects
    return client.post(reverse(DEAD), group, follow=True)


# Undeclared names: their rows exist, and every verb on them is refused.
GONE = "t.gone"
STREAMS = ("t.bulk.idle", "t.bulk.paused")


def _consumers(verb: str) -> Callable[[Any], tuple[list[str], list[str]]]:
    def setup(driver):
        idle, paused = STREAMS
        for name in STREAMS:
            consumer(name=name, fetch=lambda cursor: None, handle=lambda items: None)
        Consumer.objects.create(name=idle, state="idle")
        Consumer.objects.create(name=paused, state="paused")
        Consumer.objects.create(name=GONE, state="paused")
        return [idle, paused, GONE], [idle] if verb == "pause" else [paused]

    return setup


def _forget_consumers() -> None:
    for name in STREAMS:
        unregister_consumer(name)


def _passes(model: Any, verb: str) -> Callable[[Any], tuple[list[str], list[str]]]:
    """A declared pass (pending to pause, paused to resume) beside an
    undeclared one in the same state."""

    def setup(driver):
        state = "pending" if verb == "pause" else "paused"
        if model is Reindex:
            keys = [{"name": REINDEX}, {"name": GONE}]
        else:
            keys = [
                {"name": ARTIFACTS, "prefix": "bulk/1"},
                {"name": GONE, "prefix": "bulk/2"},
            ]
        extra = {"format": "csv"} if model is Export else {}
        rows = [model.objects.create(state=state, **key, **extra) for key in keys]
        pks = [str(row.pk) for row in rows]
        return pks, pks[:1]

    return setup


def _new_endpoints(count: int) -> list[WebhookEndpoint]:
    return [
        WebhookEndpoint.objects.create(
            url=f"https://hooks.example.com/{n}", secret="whsec_" + "A" * 43
        )
        for n in range(count)
    ]


def _endpoints(verb: str) -> Callable[[Any], tuple[list[str], list[str]]]:
    def setup(driver):
        enabled, disabled = _new_endpoints(2)
        WebhookEndpoint.objects.filter(pk=disabled.pk).update(
            disabled_at="2030-01-01T00:00:00Z", disabled_reason="off"
        )
        pks = [str(enabled.pk), str(disabled.pk)]
        return pks, [pks[1]] if verb == "enable" else [pks[0]]

    return setup


def _two_endpoints(driver):
    pks = [str(endpoint.pk) for endpoint in _new_endpoints(2)]
    return pks, pks


def _press_delete(client, objects, extra):
    """Django's own delete action: its confirming field is ``post=yes``."""
    url = reverse("admin:ultimate_jobs_webhookendpoint_changelist")
    data = {"action": "delete_selected", "_selected_action": objects}
    if extra.get("confirmed") == "yes":
        data["post"] = "yes"
    return client.post(url, data, follow=True)


def _deliveries(driver):
    """One delivery of the built-in webhook, one of a webhook gone from the
    code (its replay is refused)."""
    (endpoint,) = _new_endpoints(1)
    rows = [
        WebhookDelivery.objects.create(
            endpoint=endpoint,
            webhook=webhook,
            topic="t",
            msg_id=f"msg_{n}",
            body="{}",
            state="failed",
        )
        for n, webhook in enumerate((DEFAULT_WEBHOOK, GONE))
    ]
    pks = [str(row.pk) for row in rows]
    return pks, pks[:1]


def _cron_run(driver):
    return ["ultimate_jobs.retention"], ["ultimate_jobs.retention"]


def _press_run(client, objects, extra):
    url = reverse("admin:ultimate_jobs_job_cron_tasks")
    data = {"task": objects[0], "verb": "run", **extra}
    return client.post(url, data, follow=True)


BULK_VERBS: dict[str, Bulk] = {
    **{
        f"job.{verb}_selected": Bulk(_jobs(verb), _action("job", f"{verb}_selected"))
        for verb in ("retry", "cancel", "promote", "remove")
    },
    **{
        f"backfill.{verb}_selected": Bulk(
            _backfills(verb), _action("backfill", f"{verb}_selected")
        )
        for verb in ("pause", "resume")
    },
    **{
        f"consumer.{verb}_selected": Bulk(
            _consumers(verb),
            _action("consumer", f"{verb}_selected"),
            _forget_consumers,
        )
        for verb in ("pause", "resume")
    },
    **{
        f"{model._meta.model_name}.{verb}_selected": Bulk(
            _passes(model, verb),
            _action(model._meta.model_name, f"{verb}_selected"),
        )
        for model in (Reindex, Export, Import)
        for verb in ("pause", "resume")
    },
    **{
        f"webhookendpoint.{verb}_selected": Bulk(
            _endpoints(verb), _action("webhookendpoint", f"{verb}_selected")
        )
        for verb in ("enable", "disable")
    },
    "webhookendpoint.delete_selected": Bulk(_two_endpoints, _press_delete),
    "webhookdelivery.replay_selected": Bulk(
        _deliveries, _action("webhookdelivery", "replay_selected")
    ),
    "dead-letter group retry": Bulk(_dead_group, _press_group),
    "cron task run now": Bulk(_cron_run, _press_run),
}


@pytest.mark.parametrize(
    "label",
    # Django's own delete action keeps Django's own confirmation page.
    sorted(
        k for k in BULK_VERBS if "." in k and k != "webhookendpoint.delete_selected"
    ),
)
def test_select_across_always_shows_the_confirmation(admin_client, pg_driver, label):
    """A confirming list action with ``select_across=1`` names no pinned
    ids: it is shown the confirmation (ids pinned), moving nothing; the
    confirmation's own form then acts."""
    verb = BULK_VERBS[label]
    try:
        objects, movable = verb.setup(pg_driver)
        across = {"confirmed": "yes", "select_across": "1", "index": "0"}
        page = verb.press(admin_client, objects, across)
        assert 'id="uj-confirm"' in page.text, label
        assert not LogEntry.objects.exists(), label
        pinned = list(page.context["selected"])
        assert sorted(pinned) == sorted(objects), label
        verb.press(admin_client, pinned, {"confirmed": "yes"})
        assert sorted(e.object_id for e in LogEntry.objects.all()) == sorted(movable)
    finally:
        verb.teardown()


def test_every_bulk_action_has_a_row(db):
    """Every list action of every model admin of the app is in BULK_VERBS."""
    request = RequestFactory().get("/")
    request.user = User.objects.create_superuser("probe", password="pw")
    actions = {
        f"{model._meta.model_name}.{name}"
        for model, model_admin in admin.site._registry.items()
        if model._meta.app_label == "ultimate_jobs"
        for name in model_admin.get_actions(request)
    }
    assert actions <= set(BULK_VERBS)
    assert {key for key in BULK_VERBS if "." in key} == actions


@pytest.mark.parametrize("label", sorted(BULK_VERBS))
def test_each_bulk_verb_logs_each_object_it_moved(admin_client, pg_driver, label):
    """Confirmed: one entry per object moved, none for the refused ones, each
    link resolving; a second press that moves nothing logs nothing."""
    verb = BULK_VERBS[label]
    try:
        _logs_each_object_it_moved(admin_client, pg_driver, label, verb)
    finally:
        verb.teardown()


def _logs_each_object_it_moved(admin_client, pg_driver, label, verb):
    objects, movable = verb.setup(pg_driver)
    assert not LogEntry.objects.exists()
    verb.press(admin_client, objects, {})  # the confirmation page acts on nothing
    assert not LogEntry.objects.exists()
    verb.press(admin_client, objects, {"confirmed": "yes"})
    entries = list(LogEntry.objects.all())
    if label == "cron task run now":
        # Logged against the job it queued, not the task.
        (entry,) = entries
        assert Job.objects.get(id=entry.object_id).name == movable[0]
    else:
        assert sorted(e.object_id for e in entries) == sorted(movable)
    for entry in entries:
        url = entry.get_admin_url()
        if entry.is_deletion():
            continue  # Django links no removed object
        assert url and admin_client.get(url).status_code == 200, (label, url)
    # Again over what did not move (run now: again; its job is deduped).
    rest = (
        objects
        if label == "cron task run now"
        else [o for o in objects if o not in movable]
    )
    verb.press(admin_client, rest, {"confirmed": "yes"})
    assert LogEntry.objects.count() == len(entries)


def test_a_refusal_message_keeps_the_id_as_it_is(admin_client, pg_driver):
    """Django's admin capitalises each message's first letter: a refusal
    starts with the object's kind, so the id after it is shown as it is."""
    dead = str(dead_job(pg_driver, n=2))
    ready = str(noop.enqueue(n=1).id)
    data = {"action": "retry_selected", "_selected_action": [ready]}
    url = reverse("admin:ultimate_jobs_job_changelist")
    page = admin_client.post(url, {**data, "confirmed": "yes"}, follow=True)
    shown = [str(m) for m in page.context["messages"]]
    assert any(m.startswith(f"Job {ready}: X_") for m in shown), shown
    Job.objects.filter(id=dead).update(idempotency_key="k")
    noop.using(idempotency_key="k").enqueue(n=3)
    group = {"name": "tests.noop", "code": "X_BOOM"}
    page = press_confirmed(admin_client, group)
    shown = [str(m) for m in page.context["messages"]]
    assert any(m.startswith(f"Job {dead}: X_JOB_DUPLICATE") for m in shown), shown


def test_the_admin_index_says_reindexes(admin_client):
    """The plural of reindex on the admin index."""
    index = admin_client.get(reverse("admin:index")).text
    assert "Reindexes" in index and "Reindexs" not in index
