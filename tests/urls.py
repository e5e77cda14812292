from django.contrib import admin
from django.urls import path

from django_ultimate_jobs.metrics.views import metrics
from django_ultimate_jobs.webhooks import webhook_receiver
from tests.jobsapp.views import enqueue_traced

# The receiver the acceptance tier's endpoint server runs
# (tests/acceptance/webhook_endpoint.py): every verified delivery is kept
# as an InboundDelivery row, which is what the fault tests count.
RECEIVER_SECRET = "whsec_dGVzdHMtb25seS1yZWNlaXZlci1zZWNyZXQtMzJieXQ="


def _keep(event):
    return None


urlpatterns = [
    path("admin/", admin.site.urls),
    # tests/acceptance/test_traces.py: an enqueue in a web request.
    path("traced/enqueue/", enqueue_traced),
    path("metrics/jobs", metrics),
    webhook_receiver(
        name="tests-inbound", path="hooks/in/", verify=RECEIVER_SECRET, handle=_keep
    ),
]
