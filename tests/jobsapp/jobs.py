"""Jobs the test suite enqueues (autodiscovered like an app's jobs.py)."""

from django_ultimate_jobs import Retry, job


@job(name="tests.noop")
def noop(ctx, **input):
    return None


@job(
    name="tests.charge",
    queue="billing",
    retry=Retry(attempts=5, delay="1s"),
    idempotency_key=lambda input: f"charge:{input['invoice_id']}",
    tenant=lambda input: input["org_id"],
)
def charge(ctx, *, invoice_id: int, org_id: str, amount: int = 0):
    return {"charged": invoice_id}
