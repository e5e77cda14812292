"""What the app's lists take from a request, checked before any query.

PostgreSQL refuses a NUL in a parameter (a ``DataError``: a 500), a UUID
column refuses text that is not one (a ``ValidationError`` while the
queryset is evaluated: a 500), and a filter value outside its choices
matches nothing, so a list would look empty rather than refused. Every
model admin of the app is a :class:`ListGuard`:

- a list whose query string holds text no row can hold, or a choice filter
  a value outside its choices, redirects to ``?e=1`` (the whole list under
  a note), as Django answers an invalid filter; with ``e=1`` already there
  too (Django would then show its "Database error" page, or a 500 where the
  value reached PostgreSQL);
- a list action posted over an id no row can have (a NUL, text where the
  key is a number or a UUID, a number past the column) is answered with its
  coded message, and nothing runs;
- a search term (the list's, and the autocomplete endpoint's, which calls
  the same ``get_search_results``) with a NUL matches nothing.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.views.main import ERROR_FLAG, SEARCH_VAR
from django.core.exceptions import ValidationError
from django.db import models
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from ..errors import JobPageInvalid, JobsError
from ..validation import storable

__all__ = ["ListGuard", "holdable", "searchable", "whole_number"]

# 18 digits always fit a bigint (19 may not): a longer id is no row's.
_ID_DIGITS = 18


def searchable(term: str) -> bool:
    """Whether a search term can match a row (PostgreSQL takes no NUL)."""
    return storable(term)


def whole_number(value: str) -> bool:
    """Whether ``value`` is an id an integer key can hold (ASCII digits)."""
    return value.isascii() and value.isdigit() and len(value) <= _ID_DIGITS


def holdable(field: models.Field[Any, Any], value: str) -> bool:
    """Whether a row's ``field`` (its key) can hold ``value`` as given.

    Text without a NUL for a text key; a whole number that fits for an
    integer key; a UUID for a UUID key.
    """
    if not storable(value):
        return False
    if isinstance(field, models.IntegerField):
        return whole_number(value)
    try:
        field.to_python(value)
    except ValidationError:
        return False
    return True


class ListGuard:
    """The query string and the selection of a list, refused before a query.

    ``choice_parameters`` maps a filter parameter to the values it takes;
    ``id_parameters`` are filters on an integer key (a whole number);
    :meth:`selection_problem` refuses an id the model's rows cannot have
    (with :meth:`unknown`'s coded error).
    """

    choice_parameters: ClassVar[dict[str, frozenset[str]]] = {}
    id_parameters: ClassVar[frozenset[str]] = frozenset()
    opts: Any

    def unknown(self, value: str) -> JobsError:
        """The coded refusal of a selected key no row can hold."""
        return JobPageInvalid(
            f"no {self.opts.verbose_name} can have the id {value!r}",
            fix="select rows from the list",
        )

    def selection_problem(self, value: str) -> JobsError | None:
        """The coded refusal of a selected id no row can have, else ``None``."""
        return None if holdable(self.opts.pk, value) else self.unknown(value)

    def invalid_query(self, request: HttpRequest) -> bool:
        """Whether the query string holds a value no filter can take."""
        for parameter, values in request.GET.lists():
            if parameter == SEARCH_VAR:
                continue  # Django's search form refuses a NUL, with a message
            if not all(storable(value) for value in values):
                return True
            choices = self.choice_parameters.get(parameter)
            # Empty is "All", as Django reads it.
            if choices is not None and not set(values) <= choices | {""}:
                return True
            if parameter in self.id_parameters and not all(
                whole_number(value) for value in values
            ):
                return True
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list, after the query string and a posted selection pass."""
        if self.invalid_query(request):
            return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")
        if request.method == "POST" and "action" in request.POST:
            for value in request.POST.getlist(ACTION_CHECKBOX_NAME):
                problem = self.selection_problem(value)
                if problem is not None:
                    messages.error(request, problem.render())
                    return HttpResponseRedirect(request.get_full_path())
        return super().changelist_view(request, extra_context)  # type: ignore[misc]
