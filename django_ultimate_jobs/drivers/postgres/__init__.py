"""The Postgres driver: jobs in PostgreSQL tables through a Django alias.

Everything PostgreSQL-specific lives in this package: the driver
(:mod:`.driver`), its roles (:mod:`.cron`, :mod:`.steps`, :mod:`.leases`,
:mod:`.maintenance`), the connection sessions and outage classification
(:mod:`.sessions`), the LISTEN thread (:mod:`.listener`), the named SQL
(``sql/*.sql``, loaded by :mod:`.sql`), row decoding (:mod:`.rows`) and the
psycopg plumbing (:mod:`.jsonb`, :mod:`.prepare`).
"""

from __future__ import annotations

from .driver import PostgresDriver, coded_failure

__all__ = ["PostgresDriver", "coded_failure"]
