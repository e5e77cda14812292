"""A marketing lead: personal data, and no subject lists it."""

from django.db import models

from django_ultimate_jobs.subjects import personal_data


class Lead(models.Model):
    """Personal data nothing would erase."""

    email = personal_data(models.EmailField(), kind="contact")
    name = personal_data(models.TextField())
    source = models.TextField(default="web")

    def __str__(self) -> str:
        return f"lead {self.pk}"
