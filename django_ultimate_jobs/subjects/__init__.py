"""Data subjects: where a person's data lives, its export and its erase.

Mark the fields that hold personal data (:func:`personal_data` on your own
models, :func:`mark_personal_data` on others'), declare each subject with
:func:`subject` and its tables with :func:`table`, then ask for an
:func:`export_subject` (one zip archive into a Django storage) or an
:func:`erase_subject` (resumable, audited). ``manage.py check`` fails while
a marked field is reached by no subject, or left as it is by its erase.

Importing this package touches no model; the tables are in
``django_ultimate_jobs.models`` (``SubjectRequest``, ``ErasureRecord``).
"""

from __future__ import annotations

from . import checks  # noqa: F401  (registers the coverage check)
from .declaration import (
    Subject,
    Table,
    get_subject,
    personal_data_problems,
    registered_subjects,
    subject,
    table,
    unregister_subject,
)
from .jobs import ERASE_JOB, EXPORT_JOB
from .marks import (
    mark_personal_data,
    personal_data,
    personal_data_fields,
    unmark_personal_data,
)
from .policies import DELETE, EMPTY, NULL, REDACT, anonymize, retain, value
from .requests import (
    Requested,
    TablePlan,
    erase_subject,
    export_subject,
    key_digest,
    plan_subject,
)

__all__ = [
    "DELETE",
    "EMPTY",
    "ERASE_JOB",
    "EXPORT_JOB",
    "NULL",
    "REDACT",
    "Requested",
    "Subject",
    "Table",
    "TablePlan",
    "anonymize",
    "erase_subject",
    "export_subject",
    "get_subject",
    "key_digest",
    "mark_personal_data",
    "personal_data",
    "personal_data_fields",
    "personal_data_problems",
    "plan_subject",
    "registered_subjects",
    "retain",
    "subject",
    "table",
    "unmark_personal_data",
    "unregister_subject",
    "value",
]
