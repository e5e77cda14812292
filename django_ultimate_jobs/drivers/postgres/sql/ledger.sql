-- The ledger book's statements (django_ultimate_jobs/ledger/book.py).
-- {postings} and {lines} are the book's quoted table names, filled in
-- once per book from its models.

-- name: ledger_post
-- Write a posting and its lines in one statement. The header insert is the
-- idempotency fence: ON CONFLICT (tenant, key) DO NOTHING waits for a
-- concurrent writer of the same key and then inserts nothing, so the lines
-- join an inserted header only. No row back means the key was stored
-- already (a posting always has lines): the caller compares fingerprints.
-- The lines take the header's posted_at (clock_timestamp(): distinct for
-- postings written in one transaction).
WITH posting AS (
    INSERT INTO {postings} (ledger, tenant, key, org_id, fingerprint, line_count, posted_at)
    VALUES (%(ledger)s, %(tenant)s, %(key)s, %(org_id)s, %(fingerprint)s, %(count)s, clock_timestamp())
    ON CONFLICT (tenant, key) DO NOTHING
    RETURNING id, posted_at
)
INSERT INTO {lines} (posting_id, tenant, line, account, currency, minor, posted_at)
SELECT posting.id, %(tenant)s, entry.line, entry.account, entry.currency, entry.minor, posting.posted_at
  FROM posting,
       unnest(%(accounts)s::text[], %(currencies)s::text[], %(minors)s::bigint[])
       WITH ORDINALITY AS entry (account, currency, minor, line)
RETURNING posting_id;

-- name: ledger_posting_fingerprint
-- The stored posting of a key, read in the writer's transaction right after
-- its insert did nothing (READ COMMITTED: the holder has committed), with
-- the ledger that wrote it: a replay from another ledger is a conflict.
SELECT id, fingerprint, ledger FROM {postings} WHERE tenant = %(tenant)s AND key = %(key)s;
