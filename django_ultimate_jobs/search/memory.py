"""``MemorySearchIndex``: the port in a dict, for tests and examples.

Words are lower-cased runs of letters and digits; a query matches a
document holding every one of its words, scored by how often they occur
(weighted A=4 down to D=1). Nothing survives the process: a reindex into it
is for tests, never for a worker fleet.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from django.db.models import QuerySet

from .port import WEIGHTS, Document, Hit

__all__ = ["MemorySearchIndex"]

_WORD = re.compile(r"\w+")
_WEIGHT = {letter: len(WEIGHTS) - n for n, letter in enumerate(WEIGHTS)}


class MemorySearchIndex:
    """Documents in a dict, one per (index, id), kept by version."""

    supports_queryset = False

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._docs: dict[str, dict[str, tuple[int | None, Counter[str]]]] = {}
        self.writes: Counter[tuple[str, str]] = Counter()
        """How often each (index, id) was written: what tests count."""

    def __repr__(self) -> str:
        return "MemorySearchIndex()"

    def check(self) -> str | None:
        """Nothing to configure."""
        return None

    def upsert(self, index: str, documents: Sequence[Document]) -> None:
        """Store each document unless a newer version is stored."""
        with self._lock:
            stored = self._docs.setdefault(index, {})
            for doc in documents:
                old = stored.get(doc.id)
                if (
                    old is not None
                    and old[0] is not None
                    and doc.version is not None
                    and old[0] > doc.version
                ):
                    continue
                words: Counter[str] = Counter()
                for name, text in doc.fields.items():
                    weight = _WEIGHT.get(doc.weights.get(name, "D"), 1)
                    for word in _WORD.findall((text or "").lower()):
                        words[word] += weight
                stored[doc.id] = (doc.version, words)
                self.writes[(index, doc.id)] += 1

    def remove(self, index: str, ids: Sequence[str]) -> None:
        """Forget ``ids``."""
        with self._lock:
            stored = self._docs.get(index, {})
            for id_ in ids:
                stored.pop(id_, None)

    def listed(self, index: str, *, after: str | None, limit: int) -> list[str]:
        """Stored ids after ``after``, in code-point order."""
        with self._lock:
            ids = sorted(self._docs.get(index, {}))
        return [id_ for id_ in ids if after is None or id_ > after][:limit]

    def search(self, index: str, query: str, *, limit: int) -> list[Hit]:
        """Documents holding every word of ``query``, best first."""
        wanted = _WORD.findall(query.lower())
        if not wanted:
            return []
        with self._lock:
            stored = dict(self._docs.get(index, {}))
        hits = [
            Hit(id=id_, score=float(sum(words[w] for w in wanted)))
            for id_, (_, words) in stored.items()
            if all(words[w] for w in wanted)
        ]
        hits.sort(key=lambda hit: (-hit.score, hit.id))
        return hits[:limit]

    def filter_queryset(
        self, index: str, queryset: QuerySet[Any], query: str
    ) -> QuerySet[Any]:
        """Not supported: the helper goes through :meth:`search`."""
        raise NotImplementedError("MemorySearchIndex answers ids (search())")
