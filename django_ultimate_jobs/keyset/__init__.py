"""Keyset passes: one paced, resumable walk over rows, a durable step a page.

The core that ``backfill(...)``, ``reindex(...)``, ``export_rows(...)`` and
``import_rows(...)`` share:

- :mod:`.models`: ``PassRecord``, the abstract progress row (state, cursor,
  rows and pages done, total, run id, times, last error);
- :mod:`.pages`: paging a QuerySet by its primary key (never OFFSET);
- :mod:`.walk`: the loop: pages as durable steps, a pause looked for before
  each, pacing (``rate`` pages a second);
- :mod:`.ledger`: the row's moves: gate and enqueue, start, page, finish,
  fail, pause and resume, in the transactions that keep it true;
- :mod:`.declarations`: name -> declaration tables bound to the job registry.

Importing this package touches no model.
"""
