"""Settings for the test suite: a real PostgreSQL from DATABASE_URL."""

import os
from importlib.util import find_spec

from django_ultimate_jobs.dburl import database_from_url

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

DATABASES = {
    "default": database_from_url(
        os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        TEST={"NAME": os.environ.get("ULTIMATE_JOBS_TEST_DB", "test_ultimate_jobs")},
    )
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # The live server of the admin browser tests serves the admin's CSS.
    "django.contrib.staticfiles",
    "pgtrigger",
    "django_ultimate_jobs",
    "tests.jobsapp",
    "tests.tasksapp",
]

# django.tasks: Django's own from 6.0, else the django-tasks backport (5.2).
_TASKS_PACKAGE: str | None
if find_spec("django.tasks") is not None:
    _TASKS_PACKAGE = "django.tasks"
elif find_spec("django_tasks") is not None:
    _TASKS_PACKAGE = "django_tasks"
    INSTALLED_APPS.append("django_tasks")
else:
    _TASKS_PACKAGE = None

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"
STATIC_URL = "/static/"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ULTIMATE_JOBS = {"QUEUES": ["default"]}

_ULTIMATE_BACKEND = "django_ultimate_jobs.backends.UltimateJobsBackend"
TASKS = {
    "default": {
        "BACKEND": _ULTIMATE_BACKEND,
        "QUEUES": ["default"],
        "OPTIONS": {"delay": "1s", "max_delay": "1m"},
    },
    # Any queue (tests/tasksapp: "emails", which runjobs does not claim).
    "second": {"BACKEND": _ULTIMATE_BACKEND, "QUEUES": []},
}
if _TASKS_PACKAGE is not None:
    TASKS["immediate"] = {
        "BACKEND": f"{_TASKS_PACKAGE}.backends.immediate.ImmediateBackend"
    }
