"""The ``django.tasks`` bridge: Django's ``@task`` functions run as jobs.

- :mod:`.compat` picks Django's own ``django.tasks`` (6.0+) or the
  ``django-tasks`` backport (5.2);
- :mod:`.policy` is the per-task retry policy and timeout;
- :mod:`.results` builds ``TaskResult`` objects from job rows;
- :mod:`.bridge` is the one internal job that runs every task.

The backend itself is :class:`django_ultimate_jobs.backends.UltimateJobsBackend`.
Importing this package imports nothing else.
"""
