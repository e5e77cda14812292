from django.apps import AppConfig


class BenchJobsConfig(AppConfig):
    name = "bench.benchjobs"
    label = "benchjobs"
    default_auto_field = "django.db.models.BigAutoField"
