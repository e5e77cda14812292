"""The jobs of bench/limits.py: one keyed-capped, one free, the same body.

Declared only in the workers bench/limits.py starts for the capped workload
(``BENCH_LIMIT_JOBS=1``): the other benches' workers keep a registry without
``concurrency=`` and run the claim they always ran.
"""

import time

from django_ultimate_jobs import Concurrency, job


@job(
    name="bench.keyed5",
    queue="limits",
    concurrency=Concurrency(key=lambda input: str(input["key"]), limit=1),
)
def keyed5(ctx, *, key: int):
    time.sleep(0.005)
