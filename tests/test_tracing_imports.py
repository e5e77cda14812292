"""Without a tracer provider, or without the ``otel`` extra, nothing of
OpenTelemetry is imported: checked in fresh interpreters
(tests/support/otel_probe.py), each enqueueing and running a job with steps.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.support.child_python import last_json_line, run_python
from tests.support.workers import REPO_ROOT

PROBE = REPO_ROOT / "tests" / "support" / "otel_probe.py"


def _probe(mode: str, tracing: object = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("UJ_TRACING", None)
    if tracing is not None:
        env["UJ_TRACING"] = json.dumps(tracing)
    return last_json_line(run_python([str(PROBE), mode], env=env, cwd=REPO_ROOT))


@pytest.mark.parametrize(
    ("mode", "tracing"),
    [("plain", None), ("plain", "auto"), ("plain", False), ("missing", None)],
)
def test_without_a_provider_or_the_extra_nothing_is_imported(mode, tracing):
    """The default "auto" imports nothing until a provider is configured."""
    report = _probe(mode, tracing)
    assert report["outcomes"] == ["retried"] and report["error"] is None
    assert report["modules"] == []
    assert report["spans_module"] is False


def test_with_a_provider_the_same_run_is_traced():
    """The control: the probe does see spans and modules when they exist."""
    report = _probe("provider")
    assert report["outcomes"] == ["retried"]
    assert report["spans_module"] is True
    # The enqueue, the attempt and its one step.
    assert report["spans"] == 3


def test_a_provider_and_tracing_false_make_no_spans():
    report = _probe("provider", False)
    assert (report["spans_module"], report["spans"]) == (False, 0)


def test_tracing_true_without_the_extra_is_refused_before_anything_is_written():
    report = _probe("missing", True)
    assert report["error"] == "X_SETTINGS_INVALID"
    assert report["modules"] == [] and report["outcomes"] == []
