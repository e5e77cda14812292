"""Error codes of data subjects (see docs/reference/errors.md).

A refusal at declaration, at a request or in a system check names the
model, the field or the subject, never a value: a subject key may be an
email address, and it is never part of an error.
"""

from __future__ import annotations

from ..errors import JobsError, RetryClass

__all__ = [
    "PersonalDataUnerased",
    "PersonalDataUnreached",
    "SubjectArgumentInvalid",
    "SubjectDeclarationInvalid",
    "SubjectEraseBlocked",
    "SubjectFieldUnknown",
    "SubjectKeyInvalid",
    "SubjectModelUnknown",
    "SubjectRequestInvalid",
    "SubjectStorageInvalid",
    "SubjectStorageRefused",
    "SubjectUnknown",
]


class SubjectDeclarationInvalid(JobsError):
    """A ``subject(...)``, ``table(...)``, policy or ``personal_data`` mark is refused."""

    code = "X_SUBJECT_DECLARATION_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "correct the declaration the message names"


class SubjectModelUnknown(JobsError):
    """A declaration names a model no installed app defines."""

    code = "X_SUBJECT_MODEL_UNKNOWN"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "pass the model class, or its 'app_label.ModelName' label, of an app "
        "in INSTALLED_APPS"
    )


class SubjectFieldUnknown(JobsError):
    """A declaration names a field (or a ``by=`` path) the model does not have."""

    code = "X_SUBJECT_FIELD_UNKNOWN"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "name a concrete field of the model; by= follows foreign keys with "
        "__ (e.g. by='order__customer')"
    )


class SubjectUnknown(JobsError):
    """No subject is declared under that name."""

    code = "X_SUBJECT_UNKNOWN"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "python manage.py jobs_subject list  (lists the declared subjects)"


class SubjectKeyInvalid(JobsError):
    """A subject key the tables' ``by=`` fields cannot take (nothing written)."""

    code = "X_SUBJECT_KEY_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "pass the value the by= fields hold (e.g. the customer's primary key)"


class SubjectArgumentInvalid(JobsError):
    """An export or erase request was given a bad argument (nothing written)."""

    code = "X_SUBJECT_ARGUMENT_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "correct the argument the message names"


class SubjectStorageInvalid(JobsError):
    """The storage an export names is not configured (nothing written)."""

    code = "X_SUBJECT_STORAGE_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "name an alias of settings.STORAGES (e.g. 'default'), or declare "
        "storage= as a callable answering a Storage"
    )


class SubjectStorageRefused(JobsError):
    """The storage refused a write of an export's archive (retried)."""

    code = "X_SUBJECT_STORAGE_REFUSED"
    retry_class = RetryClass.RETRYABLE
    default_fix = (
        "make the storage writable (permissions, credentials, space); the "
        "export retries by itself, or: python manage.py jobs retry <job id>"
    )


class SubjectRequestInvalid(JobsError):
    """An export or erase job cannot run: its request row or subject is gone."""

    code = "X_SUBJECT_REQUEST_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "deploy the code that declares the subject, then request the export "
        "or erase again"
    )


class SubjectEraseBlocked(JobsError):
    """The database refused an erase write (a protected foreign key, a constraint)."""

    code = "X_SUBJECT_ERASE_BLOCKED"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "list the referencing table before the one it references in tables=, "
        "or anonymise the referenced rows instead of deleting them"
    )


class PersonalDataUnerased(JobsError):
    """A table a subject reaches holds a marked field its treatment leaves as is."""

    code = "X_PERSONAL_DATA_UNERASED"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "add the field to the table's anonymize(...), delete the rows, or "
        "retain('<why>') the table"
    )


class PersonalDataUnreached(JobsError):
    """A model holds a marked field, and no subject lists that model."""

    code = "X_PERSONAL_DATA_UNREACHED"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "add table(<model>, by=..., erase=...) to the subject it belongs to"
