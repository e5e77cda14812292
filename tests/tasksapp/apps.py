from django.apps import AppConfig


class TasksAppConfig(AppConfig):
    name = "tests.tasksapp"
    label = "tasksapp"
    default_auto_field = "django.db.models.BigAutoField"
