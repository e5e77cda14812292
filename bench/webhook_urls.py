"""The URLs gunicorn serves in bench/webhooks.py's receiver rounds.

``hooks/in/``: a ``webhook_receiver`` (verify, dedupe row, a no-op handle,
commit, 200). ``bare/``: a plain view that answers 200, the baseline. An
endpoint for the sender rounds: ``e/<n>/`` answers 200 without Django
(see ``endpoint_app`` in bench/webhooks.py).
"""

from django.http import HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from django_ultimate_jobs.webhooks import webhook_receiver

SECRET = "whsec_YmVuY2gtb25seS1yZWNlaXZlci1zZWNyZXQtMzItYnl0ZXM="


def _keep(event):
    return None


@csrf_exempt
def bare(request):
    request.body  # noqa: B018 (read it, as the receiver does)
    return HttpResponse("ok")


urlpatterns = [
    webhook_receiver(name="bench", path="hooks/in/", verify=SECRET, handle=_keep),
    path("bare/", bare),
]
