from django.apps import AppConfig


class JobsAppConfig(AppConfig):
    name = "tests.jobsapp"
    label = "jobsapp"
    default_auto_field = "django.db.models.BigAutoField"
