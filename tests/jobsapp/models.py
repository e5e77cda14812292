"""Models of the test app: the effects table the acceptance tier measures."""

from django.db import models
from django.db.models.functions import Now


class Effect(models.Model):
    """One "external" effect of a test job, written in autocommit.

    ``claims`` is the claim ordinal of the attempt that wrote it (the lease
    token's counter), ``at`` the database clock at the write (I-CLOCK), so
    effects of one job can be ordered against its claims.
    """

    job_id = models.UUIDField(db_index=True)
    attempt = models.IntegerField()
    claims = models.IntegerField()
    worker = models.TextField()
    at = models.DateTimeField(db_default=Now())
    kind = models.TextField(default="run")

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.job_id} claim={self.claims} by {self.worker}"
