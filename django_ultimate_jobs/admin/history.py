"""The job page's history and progress, read from what ``operator.show`` answers.

A job's ``history`` holds one entry per counted attempt and one per
operator retry (``{"event": "retried", ...}``). A retry restarts the row's
``attempt`` at 1, so the page numbers attempts by their place in the
history (#1, #2, #3, retried, #4), never by the stored counter; rows
written before retries were recorded show a retry wherever the counter
went back. The progress ``ctx.progress`` wrote becomes a bar with its note.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..drivers.base import HISTORY_RETRIED

__all__ = ["attempt_rows", "progress_bar"]


def attempt_rows(history: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The history as table rows: attempts numbered across retries.

    Each row has ``kind`` (``attempt`` or ``retry``), ``at`` and, for an
    attempt, ``number`` (its place among all the job's attempts), ``of_run``
    (the stored attempt counter), ``worker`` and ``error``; for a retry,
    ``from_step``.
    """
    rows: list[dict[str, Any]] = []
    number = 0
    previous = 0
    for entry in history or ():
        if not isinstance(entry, dict):
            continue
        if entry.get("event") == HISTORY_RETRIED:
            rows.append(
                {
                    "kind": "retry",
                    "at": entry.get("at"),
                    "from_step": entry.get("from_step"),
                }
            )
            previous = 0
            continue
        counter = entry.get("attempt")
        if isinstance(counter, int) and 0 < counter <= previous:
            # A requeue from before retries were recorded: the counter went back.
            rows.append({"kind": "retry", "at": None, "from_step": None})
        previous = counter if isinstance(counter, int) else previous
        number += 1
        rows.append(
            {
                "kind": "attempt",
                "number": number,
                "of_run": counter,
                "worker": entry.get("worker"),
                "at": entry.get("at"),
                "error": entry.get("error"),
            }
        )
    return rows


def progress_bar(progress: Any) -> dict[str, Any] | None:
    """``done``/``total`` as a percentage with the note; ``None`` if not numbers.

    ``progress`` is the redacted value ``operator.show`` answers: the note
    shown here went through the same redaction as the rest.
    """
    if not isinstance(progress, dict):
        return None
    done, total = progress.get("done"), progress.get("total")
    if not (_number(done) and _number(total)):
        return None
    assert done is not None and total is not None
    percent = 100.0 if total <= 0 else max(0.0, min(100.0, done * 100.0 / total))
    note = progress.get("note")
    at = progress.get("at")  # time.time() when the worker wrote it
    return {
        "done": done,
        "total": total,
        "percent": round(percent, 1),
        "note": note if isinstance(note, str) else None,
        "at": datetime.fromtimestamp(at, UTC) if isinstance(at, int | float) else None,
    }


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
