"""Settings for the test suite: a real PostgreSQL from DATABASE_URL."""

import os

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
    "pgtrigger",
    "django_ultimate_jobs",
    "tests.jobsapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"
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
