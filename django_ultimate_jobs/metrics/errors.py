"""The metrics' coded errors (registered on definition)."""

from __future__ import annotations

from ..errors import JobsError, RetryClass

__all__ = ["MetricsClientMissing", "MetricsServeFailed"]


class MetricsClientMissing(JobsError):
    """Metrics asked for (``--metrics-port``, the view) without ``prometheus_client``."""

    code = "X_METRICS_CLIENT_MISSING"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = 'pip install "django-ultimate-jobs[prometheus]"'


class MetricsServeFailed(JobsError):
    """``runjobs --metrics-port`` could not listen on its address and port."""

    code = "X_METRICS_SERVE_FAILED"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "pick a free port (--metrics-port) or an address of this host (--metrics-addr)"
    )


def require_client() -> None:
    """Raise :class:`MetricsClientMissing` unless ``prometheus_client`` imports."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError as error:
        raise MetricsClientMissing(
            "Prometheus metrics need the prometheus_client package (the optional "
            "extra [prometheus])",
            meta={"extra": "prometheus"},
        ) from error
