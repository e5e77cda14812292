"""The process's view of an outage: who may end it (drivers/outage.py).

The acceptance tests kill real backends; these pin the rule they rely on,
without a server: an outage ends when the reporting role gets through, or
when another role gets through to the same database after the loss.
"""

from __future__ import annotations

from django_ultimate_jobs.drivers.outage import DatabaseOutage


def _down(outage: DatabaseOutage, role: str = "slot", using: str = "default") -> None:
    outage.lost(role, ConnectionError("terminated"), last_ok=None, using=using)
    assert outage.down


def test_another_role_on_the_same_database_ends_a_slots_outage():
    """A slot's body lost its connection; the claim loop's next answer ends
    it (no other role had failed, so none would have ended it before)."""
    outage = DatabaseOutage(first_retry_s=0.0)
    _down(outage)
    outage.recovered("claim", using="default", own=False)
    assert not outage.down and outage.wait_up(0)


def test_an_answer_from_another_database_ends_nothing():
    """A relay's answer from the outbox database says nothing of the jobs one."""
    outage = DatabaseOutage(first_retry_s=0.0)
    _down(outage, using="jobs")
    outage.recovered("relay", using="default", own=False)
    assert outage.down


def test_an_answer_right_after_the_loss_ends_nothing():
    """Within the first retry interval an answer may be to a call sent before
    the cut: the outage stays, and the reporter's own answer still ends it."""
    outage = DatabaseOutage(first_retry_s=60.0)
    _down(outage)
    outage.recovered("claim", using="default", own=False)
    assert outage.down
    outage.recovered("slot", using="default")
    assert not outage.down


def test_listen_never_ends_an_outage_it_did_not_report():
    """LISTEN answers on a read-only database: it proves nothing about writes."""
    outage = DatabaseOutage(first_retry_s=0.0)
    _down(outage, role="settle")
    outage.recovered("listen", using="default")
    assert outage.down
