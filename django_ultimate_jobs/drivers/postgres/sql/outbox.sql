-- The transactional outbox (django_ultimate_jobs/outbox/store.py). These
-- statements run on ULTIMATE_JOBS["OUTBOX_DATABASE"], the caller's database;
-- the job a message becomes is inserted by the driver's own enqueue.

-- name: outbox_stage
-- Stage messages on the caller's connection, in its transaction: rolled back
-- with it, committed with it. staged_at is the transaction's now(), shared by
-- every message of one transaction; ids are UUIDv7 allocated in call order,
-- so (staged_at, id) is stage order. A delay counts from staging: a message
-- published late still falls due when the enqueue asked.
INSERT INTO ultimate_jobs_outbox
       (id, run_id, name, queue, input, idempotency_key, tenant_id, priority,
        max_attempts, run_at, enqueued_by, traceparent, extra, staged_at, attempts)
SELECT r.id, r.run_id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id,
       r.priority, r.max_attempts,
       coalesce(r.run_at, CASE WHEN r.delay_ms > 0
                               THEN now() + r.delay_ms * interval '1 millisecond' END),
       r.enqueued_by, r.traceparent, r.extra, now(), 0
  FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(
           ord int, id uuid, run_id uuid, name text, queue text, input jsonb,
           idempotency_key text, tenant_id text, priority int, max_attempts int,
           run_at timestamptz, delay_ms bigint, enqueued_by text, traceparent text,
           extra jsonb)
 ORDER BY r.ord;

-- name: outbox_claim
-- Lease up to `limit` unpublished messages in stage order: unclaimed ones and
-- ones whose claim lapsed (a relay that died mid-batch). SKIP LOCKED: two
-- relays never hold one message; the lease stamp outlives this statement, so
-- a second relay's claim skips them until the lease lapses.
WITH picked AS (
    SELECT id FROM ultimate_jobs_outbox
     WHERE published_at IS NULL
       AND (claimed_at IS NULL
            OR claimed_at < clock_timestamp() - %(lease_ms)s * interval '1 millisecond')
     ORDER BY staged_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE ultimate_jobs_outbox o
   SET claimed_at = clock_timestamp(), claimed_by = %(token)s
  FROM picked
 WHERE o.id = picked.id
RETURNING o.id, o.run_id, o.name, o.queue, o.input::text, o.idempotency_key,
          o.tenant_id, o.priority, o.max_attempts, o.run_at, o.enqueued_by,
          o.traceparent, o.extra::text, o.staged_at;

-- name: outbox_mark
-- Publish-then-mark: retire messages whose jobs exist. Only the claimant's,
-- only unpublished: a relay whose lease lapsed cannot retire a message a
-- newer claimant holds (first writer wins).
UPDATE ultimate_jobs_outbox
   SET published_at = clock_timestamp(), last_error = NULL
 WHERE id = ANY(%(ids)s::uuid[]) AND published_at IS NULL AND claimed_by = %(token)s;

-- name: outbox_release
-- Hand claimed messages back at once (the batch stopped at a failure); the
-- message that failed counts the attempt and keeps the error for the admin.
UPDATE ultimate_jobs_outbox
   SET claimed_at = NULL, claimed_by = NULL,
       attempts = attempts + CASE WHEN id = %(failed)s::uuid THEN 1 ELSE 0 END,
       last_error = CASE WHEN id = %(failed)s::uuid THEN %(error)s ELSE last_error END
 WHERE id = ANY(%(ids)s::uuid[]) AND published_at IS NULL AND claimed_by = %(token)s;

-- name: outbox_release_claimant
-- A relay that stops (its process exits) hands back what it still holds, so
-- the next relay takes them now instead of after the claim lease. No attempt
-- is counted: nothing failed.
UPDATE ultimate_jobs_outbox
   SET claimed_at = NULL, claimed_by = NULL
 WHERE claimed_by = %(token)s AND published_at IS NULL;

-- name: outbox_pending
-- Messages not yet published (claimed or not).
SELECT count(*) FROM ultimate_jobs_outbox WHERE published_at IS NULL;
