"""The garbage collector of a worker process: freeze the boot heap, collect less often.

Every job allocates a few dozen short-lived container objects (its claimed
row, attempt, token, context, settlement). With CPython's default
thresholds that triggered a young collection every ~100 no-op jobs and,
every few thousand jobs, a full collection that walked Django's whole boot
heap (~77,000 objects that live as long as the process): measured at
7.5 us of CPU per no-op job, a quarter of the worker's own CPU
(bench/README.md). :func:`settle_heap` is called once by ``runjobs`` after
setup, never by a worker run inside another process (a test, an embedding
app), whose heap is not ours to freeze.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "settle_heap"]

YOUNG_THRESHOLD = 10_000
"""Allocations between young collections (CPython's default is 2,000)."""
_settled = False


def settle_heap() -> None:
    """Collect once, move the boot heap out of the collector's sight, space collections.

    ``gc.freeze()`` puts every object alive now in a permanent generation
    that no collection walks again: Django's settings, apps, models, URL
    resolvers and this app's registry, which live until the process exits.
    The collection before it keeps boot-time garbage from being frozen. A
    young threshold of 10,000 cut the collector's CPU per job by more than
    half in the drain bench (fewer collections of the same young objects);
    what a collection finds is unchanged, only found a little later.
    """
    global _settled
    if _settled:  # once per process: what was frozen stays frozen
        return
    _settled = True
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
