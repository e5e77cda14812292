"""Views the tests reach with Django's test client."""

from django.http import HttpRequest, JsonResponse

from tests.jobsapp.jobs import traced_steps


def enqueue_traced(request: HttpRequest) -> JsonResponse:
    """Enqueue ``tests.traced_steps`` for ``?order=`` (the traced web request)."""
    enqueued = traced_steps.enqueue(order=request.GET.get("order", "o-1"))
    return JsonResponse({"id": str(enqueued.id)})
