-- Every statement the Postgres driver runs, one named query each.
--
-- A header line "-- name: <query>" starts a query; the comment lines after it
-- say why the statement is shaped the way it is. Queries are noun-first and
-- sorted. Time comes from coalesce(%(now)s, now()): the database clock unless
-- a test binds a frozen instant. Parameters use psycopg's %(name)s style, so
-- a literal percent sign is written %%.


-- name: counter_fold_fives
-- Fold 5-minute counter buckets older than 7 days into 1-hour buckets. One
-- statement deletes and merges, so two nodes folding at once move each
-- bucket once. Tiers fold in separate statements (hours, then fives, then
-- minutes): in one statement a bucket could be merged into and deleted at
-- once, which PostgreSQL leaves undefined.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), folded AS (
    DELETE FROM ultimate_jobs_job_counter c
     USING clock
     WHERE c.bucket_ms = 300000 AND c.bucket_start < clock.now - interval '7 days'
    RETURNING c.job, c.queue, c.bucket_start, c.done, c.retried, c.failed, c.dead,
              c.duration_ms, c.pickups, c.pickup_ms
), merged AS (
    INSERT INTO ultimate_jobs_job_counter
           (job, queue, bucket_ms, bucket_start, done, retried, failed, dead, duration_ms,
            pickups, pickup_ms)
    SELECT job, queue, 3600000, date_trunc('hour', bucket_start),
           sum(done), sum(retried), sum(failed), sum(dead), sum(duration_ms),
           sum(pickups), sum(pickup_ms)
      FROM folded
     GROUP BY 1, 2, 3, 4
     ORDER BY 1, 2, 4
    ON CONFLICT (job, queue, bucket_ms, bucket_start) DO UPDATE
       SET done = ultimate_jobs_job_counter.done + excluded.done,
           retried = ultimate_jobs_job_counter.retried + excluded.retried,
           failed = ultimate_jobs_job_counter.failed + excluded.failed,
           dead = ultimate_jobs_job_counter.dead + excluded.dead,
           duration_ms = ultimate_jobs_job_counter.duration_ms + excluded.duration_ms,
           pickups = ultimate_jobs_job_counter.pickups + excluded.pickups,
           pickup_ms = ultimate_jobs_job_counter.pickup_ms + excluded.pickup_ms
    RETURNING 1
)
SELECT count(*) FROM folded;


-- name: counter_fold_minutes
-- Fold 1-minute counter buckets older than 24 h into 5-minute buckets (see
-- counter_fold_fives for why each tier is its own statement).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), folded AS (
    DELETE FROM ultimate_jobs_job_counter c
     USING clock
     WHERE c.bucket_ms = 60000 AND c.bucket_start < clock.now - interval '24 hours'
    RETURNING c.job, c.queue, c.bucket_start, c.done, c.retried, c.failed, c.dead,
              c.duration_ms, c.pickups, c.pickup_ms
), merged AS (
    INSERT INTO ultimate_jobs_job_counter
           (job, queue, bucket_ms, bucket_start, done, retried, failed, dead, duration_ms,
            pickups, pickup_ms)
    SELECT job, queue, 300000, date_bin('5 minutes', bucket_start, timestamptz '2000-01-01'),
           sum(done), sum(retried), sum(failed), sum(dead), sum(duration_ms),
           sum(pickups), sum(pickup_ms)
      FROM folded
     GROUP BY 1, 2, 3, 4
     ORDER BY 1, 2, 4
    ON CONFLICT (job, queue, bucket_ms, bucket_start) DO UPDATE
       SET done = ultimate_jobs_job_counter.done + excluded.done,
           retried = ultimate_jobs_job_counter.retried + excluded.retried,
           failed = ultimate_jobs_job_counter.failed + excluded.failed,
           dead = ultimate_jobs_job_counter.dead + excluded.dead,
           duration_ms = ultimate_jobs_job_counter.duration_ms + excluded.duration_ms,
           pickups = ultimate_jobs_job_counter.pickups + excluded.pickups,
           pickup_ms = ultimate_jobs_job_counter.pickup_ms + excluded.pickup_ms
    RETURNING 1
)
SELECT count(*) FROM folded;


-- name: counter_buckets
-- Every counter bucket that starts at or after since (any tier), in start,
-- job, queue order: the dashboard's charts bin them.
SELECT job, queue, bucket_ms, bucket_start, done, retried, failed, dead, duration_ms,
       pickups, pickup_ms
  FROM ultimate_jobs_job_counter
 WHERE bucket_start >= %(since)s
 ORDER BY bucket_start, job COLLATE "C", queue COLLATE "C", bucket_ms;


-- name: counter_totals
-- Per job name, the counter buckets that start at or after since, summed
-- (any tier: a folded bucket still counts once).
SELECT job, sum(done)::bigint, sum(retried)::bigint, sum(failed)::bigint,
       sum(dead)::bigint, sum(duration_ms)::bigint, sum(pickups)::bigint,
       sum(pickup_ms)::bigint
  FROM ultimate_jobs_job_counter
 WHERE bucket_start >= %(since)s
 GROUP BY job
 ORDER BY job COLLATE "C";


-- name: counter_drop_hours
-- Drop 1-hour counter buckets older than 30 days.
WITH dropped AS (
    DELETE FROM ultimate_jobs_job_counter
     WHERE bucket_ms = 3600000
       AND bucket_start < coalesce(%(now)s::timestamptz, now()) - interval '30 days'
    RETURNING 1
)
SELECT count(*) FROM dropped;


-- name: job_ack_many
-- Settle one worker's successful attempts in one round trip. All three
-- fences hold per row: without state = 'running' an ack from a cancelled
-- attempt would undo the cancellation; without claimed_by a worker whose
-- lease lapsed would finish the run another worker holds; without claims the
-- same worker that re-claimed its own lapsed job would settle the new claim
-- with the old body's ack. The job's 1-minute counter bucket is updated in
-- the same statement, so counts never drift from the rows they describe.
-- Per row only the id, claim ordinal and duration travel: results and
-- uncounted rows are rare and come as short arrays of their own (each array
-- element was a Python-side dump on the hot path). A capped job's slot is
-- freed with the settle, fenced by it: only the rows that settled here free
-- the slot their claim holds, so a settle that lost its claim never frees a
-- slot another run holds now.
WITH @ack_settled
), freed AS (
    DELETE FROM ultimate_jobs_lease AS l
     USING settled
     WHERE settled.concurrency_key IS NOT NULL AND l.lease_key = settled.concurrency_key
       AND l.holder = %(worker)s || ':' || settled.id
    RETURNING 1
@ack_counted
)
SELECT settled.id FROM settled;

-- name: job_ack_many_handover
-- job_ack_many for a worker that runs capped jobs: a settled row's slot,
-- rather than being freed, goes straight to the next ready row of its key
-- (at most %(handover)s of them, one per key), which this worker claims in
-- the same statement. The slot stays with its lease row (holder, fence and
-- expiry updated in place), fenced exactly as the free it replaces: only a
-- row that settled here hands over, only a slot its claim still holds
-- unexpired (holder '<worker>:<id>'), so a settle that lost its claim or
-- its slot hands over nothing. Nor to a row whose own limit the key's
-- live slots already fill (a limit lowered since: as job_claim_capped
-- counts a key's room, the row's limit against the live slots; found by a
-- reviewer). The heir is the key's best ready row (as
-- job_claim_capped orders a key), due, in %(queues)s, queue not paused,
-- locked SKIP LOCKED; it is claimed as job_claim_capped claims a row held
-- ahead (not recorded started). A key's next run then waits for no claim
-- (bench/limits.py: the settle-to-next-claim gap was a quarter of a key's
-- cycle). Answers the settled ids (state 'done') and the claimed rows.
WITH @ack_settled
), heir AS (
    SELECT s.id AS prev, s.k, n.id
      FROM (SELECT DISTINCT ON (concurrency_key) id, concurrency_key AS k FROM settled
             WHERE concurrency_key <> ALL(%(release)s::text[])
             ORDER BY concurrency_key, id) s, clock c,
           LATERAL (SELECT j.id FROM ultimate_jobs_job j
                     WHERE j.state = 'ready' AND j.concurrency_key = s.k AND j.run_at <= c.now
                       AND j.concurrency_limit >= (SELECT count(*) FROM ultimate_jobs_lease l
                                                    WHERE l.lease_key = s.k AND l.expires_at > c.now)
                       AND j.queue = ANY(%(queues)s::text[])
                       AND j.queue NOT IN (SELECT name FROM ultimate_jobs_queue_pause
                                            WHERE kind = 'queue')
                     ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1
                       FOR UPDATE SKIP LOCKED) n
     LIMIT %(handover)s
), taken AS (
    UPDATE ultimate_jobs_lease AS l
       SET holder = %(worker)s || ':' || h.id, fence = nextval('ultimate_jobs_lease_fence'),
           expires_at = c.now + %(visibility_ms)s * interval '1 ms'
      FROM heir h, clock c
     WHERE l.lease_key = h.k AND l.holder = %(worker)s || ':' || h.prev AND l.expires_at > c.now
    RETURNING h.id, h.prev
), freed AS (
    DELETE FROM ultimate_jobs_lease AS l
     USING settled
     WHERE settled.concurrency_key IS NOT NULL AND l.lease_key = settled.concurrency_key
       AND l.holder = %(worker)s || ':' || settled.id
       AND settled.id NOT IN (SELECT prev FROM taken)
    RETURNING 1
@ack_counted
), claimed AS (
@claim_taken
)
SELECT * FROM claimed
UNION ALL
-- A settled row answers its id and the state 'done' in the heirs' columns
-- (CLAIM_COLUMNS in drivers/postgres/rows.py); the rest stay empty.
SELECT id, NULL AS name, NULL AS queue, NULL AS input, NULL AS idempotency_key,
       NULL AS run_id, NULL AS attempt, NULL AS max_attempts, NULL AS priority,
       'done' AS state, NULL AS tenant_id, NULL AS claimed_by, NULL AS claims,
       NULL AS visible_at, NULL AS enqueued_by, NULL AS traceparent, NULL AS claimed_at,
       NULL AS retaken, NULL AS start_recorded, NULL AS run_at, NULL AS concurrency_key
  FROM settled;


-- fragment: claim_taken
-- Claim the rows of the CTE `taken` (ids) for %(worker)s: running, attempt
-- counted, leased for %(visibility_ms)s; answers the capped claim's columns
-- (job_claim_busy's refusals, job_ack_many_handover's heirs).
UPDATE ultimate_jobs_job AS j
   SET state = 'running', attempt = j.attempt + 1, claims = j.claims + 1,
       claimed_by = %(worker)s, claimed_at = c.now, updated_at = c.now,
       visible_at = c.now + %(visibility_ms)s * interval '1 millisecond'
  FROM clock c
 WHERE j.id = ANY(ARRAY(SELECT id FROM taken))
RETURNING j.id, j.name, j.queue, j.input, j.idempotency_key, j.run_id,
          j.attempt, j.max_attempts, j.priority, j.state, j.tenant_id, j.claimed_by,
          j.claims, j.visible_at, j.enqueued_by, j.traceparent, j.claimed_at,
          false, false, j.run_at, j.concurrency_key


-- fragment: ack_settled
-- The settle of job_ack_many and job_ack_many_handover (clock, settle,
-- settled: the rows that settled, fenced, with their concurrency key).
clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), settle AS (
    SELECT t.id, t.claim, t.duration_ms, r.result,
           NOT (t.id = ANY(%(uncounted)s::uuid[])) AS counted
      FROM unnest(%(ids)s::uuid[], %(claims)s::int[], %(durations)s::bigint[])
           AS t(id, claim, duration_ms)
      LEFT JOIN unnest(%(result_ids)s::uuid[], %(results)s::text[]) AS r(id, result)
        ON r.id = t.id
), settled AS (
    UPDATE ultimate_jobs_job AS j
       SET state = 'done', visible_at = NULL, claimed_by = NULL,
           result = s.result::jsonb, updated_at = clock.now,
           history = coalesce(j.history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempt, 'worker', %(worker)s::text, 'at', clock.now))
      FROM settle s, clock
     WHERE j.id = ANY(%(ids)s::uuid[]) AND j.id = s.id AND j.state = 'running'
       AND j.claimed_by = %(worker)s AND j.claims = s.claim
    RETURNING j.id, j.name, j.queue, s.duration_ms, s.counted, j.concurrency_key,
              greatest(0, round(extract(epoch FROM j.claimed_at - j.run_at) * 1000))::bigint
                  AS pickup_ms


-- fragment: ack_counted
-- The counter update of job_ack_many and job_ack_many_handover. Rows are
-- upserted in name order: grouped by hash, the order changed from one
-- statement to the next, and two workers settling the same names locked
-- their counter rows in opposite orders (a deadlock, found by a reviewer).
-- Each counted row is one pickup: due (run_at) to claimed, which an ack
-- leaves as they were.
), counted AS (
    INSERT INTO ultimate_jobs_job_counter
           (job, queue, bucket_ms, bucket_start, done, retried, failed, dead, duration_ms,
            pickups, pickup_ms)
    SELECT settled.name, settled.queue, 60000, date_trunc('minute', clock.now), count(*),
           0, 0, 0, sum(settled.duration_ms), count(*), sum(settled.pickup_ms)
      FROM settled, clock
     WHERE settled.counted
     GROUP BY settled.name, settled.queue, clock.now
     ORDER BY settled.name, settled.queue
    ON CONFLICT (job, queue, bucket_ms, bucket_start) DO UPDATE
       SET done = ultimate_jobs_job_counter.done + excluded.done,
           duration_ms = ultimate_jobs_job_counter.duration_ms + excluded.duration_ms,
           pickups = ultimate_jobs_job_counter.pickups + excluded.pickups,
           pickup_ms = ultimate_jobs_job_counter.pickup_ms + excluded.pickup_ms
    RETURNING 1


-- name: job_cancel
-- Cancel a live job. A running one keeps running until its next heartbeat,
-- which no longer matches (claimed_by is cleared), and its ack and nack are
-- fenced on state = 'running', so it cannot un-cancel itself. A finished row
-- is left exactly as it ended.
UPDATE ultimate_jobs_job
   SET state = 'cancelled', visible_at = NULL, claimed_by = NULL,
       last_error = coalesce(%(reason)s::text, last_error),
       updated_at = coalesce(%(now)s::timestamptz, now())
 WHERE id = %(id)s AND state IN ('ready', 'delayed', 'running', 'suspended')
RETURNING id, name, queue, input, idempotency_key, run_id, attempt, max_attempts,
          priority, state, run_at, created_at, updated_at, tenant_id, last_error,
          last_error_stack, progress, claimed_by, claims, visible_at, enqueued_by,
          traceparent, claimed_at, result, history;


-- name: job_claim
-- Claim up to %(limit)s due jobs of the named queues for one worker, in
-- (priority desc, run_at, id) order, skipping paused queues. There is no
-- separate reaper: a running row whose lease lapsed (visible_at passed) is
-- re-taken here. Ready rows are picked per queue by one ordered scan of the
-- ready index (a backlog is never sorted), rows waiting on a time (delayed,
-- suspended) by the timer index (only the due ones are read: parked rows
-- cost nothing), and lapsed rows by the lease index, rather than by one OR
-- that no index serves. Lapsed rows are sorted in claim order before their
-- LIMIT (few lapse at once, so the sort is small): unsorted, the LIMIT kept
-- arbitrary ones and a higher-priority lapsed row waited behind a lower one
-- (test_lapsed_rows_join_the_claim_order). The picks are MATERIALIZED so the
-- planner cannot re-run the LIMITed scan per outer row and update more rows
-- than the limit (Oban documents that pitfall).
--
-- The attempt counts at claim, so a crash mid-run still spends it; but a
-- lapse charges it only when the lapsed claim is known to have started
-- (started_claim = claims): a worker killed by one job also held jobs it
-- claimed ahead, and those must not lose an attempt to its crash. The first
-- %(start_now)s fresh rows in claim order are recorded started here (the
-- worker hands them to idle slots at once); a re-taken row's start is
-- recorded by the worker right before its body (job_mark_started). An
-- unproven lapse keeps its attempt number. At most %(retake)s lapsed rows
-- are taken (a worker holds one suspect at a time). A lapse that is proven and on
-- the final attempt (lapsed = 2) is not claimed: it comes back as an
-- 'exhausted' row, which the driver buries with job_bury (rare; the row
-- stays running and lapsed until then, so a crash in between only leaves
-- it to the next claim).
--
-- Rows carrying a concurrency key (job(concurrency=...)) are not claimed
-- here: they need a fleet-wide slot, which job_claim_capped takes in the
-- same statement as the row. This statement only filters them out (the
-- ready index leaves them out altogether, see uj_job_capped_ready_idx), so a
-- queue no declared limit touches claims exactly as before. A capped row
-- whose lapse is exhausted is still buried from here: burial needs no slot.
--
-- The clock is clock_timestamp(), not now(): a claim that waited on a lock
-- (a migration holding the table) must not hand out leases that expired
-- while it waited. Claimed rows come back with only what a worker needs
-- (no history, no error text: each column costs a decode per row). The updates find their
-- rows by id = ANY(ARRAY(...)): joined to the picked CTE instead, the
-- planner (which cannot see into it) chose a sequential scan of the whole
-- table per claim once the picks were estimated at 64 rows.
--
-- Tenant fairness (worker/limits.py): %(skip)s names the tenants at their
-- in-process limit and %(untenanted)s is false when the bucket of jobs
-- without a tenant is full; their ready and due rows are skipped in the
-- scan, so a claim reaches another tenant's rows behind a flood instead of
-- claiming the flood and handing it back (see claim_tenant_open for the cost).
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
), open AS MATERIALIZED (
    -- The named queues that are not paused.
    SELECT q.name FROM unnest(%(queues)s::text[]) AS q(name)
     WHERE NOT EXISTS (SELECT 1 FROM ultimate_jobs_queue_pause p
                        WHERE p.kind = 'queue' AND p.name = q.name)
), waiting AS MATERIALIZED (
    SELECT w.*, 0 AS lapsed
      FROM open AS q
     CROSS JOIN LATERAL (
           SELECT j.id, j.priority, j.run_at
             FROM ultimate_jobs_job j
            WHERE j.state = 'ready'
              AND j.queue = q.name
              AND j.concurrency_key IS NULL
              AND j.run_at <= (SELECT now FROM clock)
              AND @claim_tenant_open
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT %(limit)s
              FOR UPDATE OF j SKIP LOCKED) AS w
), timers AS MATERIALIZED (
    SELECT t.*, 0 AS lapsed
      FROM open AS q
     CROSS JOIN LATERAL (
           SELECT j.id, j.priority, j.run_at
             FROM ultimate_jobs_job j
            WHERE j.state IN ('delayed', 'suspended')
              AND j.queue = q.name
              AND j.concurrency_key IS NULL
              AND j.run_at <= (SELECT now FROM clock)
              AND @claim_tenant_open
            ORDER BY j.run_at, j.id
            LIMIT %(limit)s
              FOR UPDATE OF j SKIP LOCKED) AS t
), lapsed AS MATERIALIZED (
    -- 1: re-taken; 2: exhausted (proven, on its final attempt).
    SELECT j.id, j.priority, j.run_at,
           CASE WHEN j.attempt >= j.max_attempts AND j.started_claim = j.claims
                THEN 2 ELSE 1 END AS lapsed
      FROM ultimate_jobs_job j
     WHERE j.state = 'running'
       AND j.visible_at <= (SELECT now FROM clock)
       AND j.queue = ANY(ARRAY(SELECT name FROM open))
       AND (j.concurrency_key IS NULL
            OR (j.attempt >= j.max_attempts AND j.started_claim = j.claims))
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT %(retake)s
       FOR UPDATE OF j SKIP LOCKED
), picked AS MATERIALIZED (
    SELECT id, lapsed, priority, run_at
      FROM (SELECT * FROM waiting UNION ALL SELECT * FROM timers
            UNION ALL SELECT * FROM lapsed) AS candidates
     ORDER BY priority DESC, run_at, id
     LIMIT %(limit)s
), claimed AS (
    UPDATE ultimate_jobs_job AS j
       SET state = 'running', claims = j.claims + 1,
           -- An unproven lapse (see above) re-runs the same attempt.
           attempt = CASE WHEN j.state = 'running' AND j.started_claim <> j.claims
                          THEN j.attempt ELSE j.attempt + 1 END,
           -- A lapsed lease re-taken: the dead attempt still gets its entry.
           history = CASE WHEN j.state = 'running'
                          THEN coalesce(j.history, '[]'::jsonb) || jsonb_build_array(
                               jsonb_build_object('attempt', j.attempt, 'worker', j.claimed_by,
                                                  'at', clock.now, 'error',
                                                  CASE WHEN j.started_claim = j.claims
                                                       THEN %(relapsed_error)s::text
                                                       ELSE %(unstarted_error)s::text END))
                          ELSE j.history END,
           started_claim = CASE WHEN j.id = ANY(ARRAY(
                                    SELECT id FROM picked WHERE lapsed = 0
                                     ORDER BY priority DESC, run_at, id
                                     LIMIT %(start_now)s))
                                THEN j.claims + 1 ELSE j.started_claim END,
           claimed_by = %(worker)s, claimed_at = clock.now,
           visible_at = clock.now + %(visibility_ms)s * interval '1 millisecond',
           updated_at = clock.now
      FROM clock
     WHERE j.id = ANY(ARRAY(SELECT id FROM picked WHERE lapsed < 2))
    RETURNING j.id, j.name, j.queue, j.input, j.idempotency_key, j.run_id,
              j.attempt, j.max_attempts, j.priority, j.state, j.tenant_id, j.claimed_by,
              j.claims, j.visible_at, j.enqueued_by, j.traceparent, j.claimed_at,
              j.id = ANY(ARRAY(SELECT id FROM picked WHERE lapsed = 1)) AS retaken,
              j.started_claim = j.claims AS start_recorded, j.run_at
), registry AS (
    -- An idle worker refreshes its registry row here rather than in a
    -- statement of its own: idle cost is a budget (12 statements a minute
    -- with a proven wake), and the idle claim already runs every 5 s.
    UPDATE ultimate_jobs_worker AS w
       SET heartbeat_at = clock.now, in_flight = '[]'::jsonb,
           expires_at = clock.now + %(ttl)s::int * interval '1 millisecond'
      FROM clock
     WHERE w.id = %(worker)s AND %(ttl)s::int IS NOT NULL
    RETURNING 1
)
SELECT * FROM claimed
UNION ALL
-- An exhausted row comes back as its id and 'exhausted' only: the driver
-- buries it (job_bury). The columns are the claimed rows' (CLAIM_COLUMNS in
-- drivers/postgres/rows.py, concurrency_key aside): id, then NULL for name
-- ... priority, 'exhausted' as the state, NULL for tenant_id ...
-- start_recorded, and run_at. (Not spelled as aliases: psycopg caches a
-- statement's placeholder conversion only up to 4,096 bytes.)
SELECT p.id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'exhausted',
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, p.run_at
  FROM picked p WHERE p.lapsed = 2
-- The worker runs a batch in the order it comes back, and UPDATE ...
-- RETURNING answers in the order it found the rows (heap or id order: the
-- oldest first, whatever their priority): sort them again (at most the limit).
 ORDER BY priority DESC, run_at, id;


-- name: job_claim_capped
-- Claim up to %(limit)s due rows that carry a concurrency key, each only
-- together with a fleet-wide slot of its key: a row whose key is full is not
-- claimed and spends no attempt. Run beside job_claim (which leaves these
-- rows out) by workers whose registry declares concurrency=, for their idle
-- slots only (never by the others).
--
-- Keys are found by a skip scan of uj_job_capped_ready_idx (one probe per
-- key with ready rows): a full key is stepped over, its backlog never read.
-- The scan starts after %(after)s and visits at most %(keys)s keys (a few
-- per row wanted): the driver starts each claim after the last key the
-- previous one took, and from the first key again when that came up short,
-- so claims take turns around the keys instead of all reading every key. Per key, the best rows up to its
-- free room are READ (heads: no lock); of those, %(limit)s are picked, the
-- highest priority first and the oldest first among equals, and only they
-- are locked (SKIP LOCKED, state re-checked): locking every key's head cost
-- a heap write per key per claim. The oldest heads are the keys furthest
-- behind (settles hand a slot on within its key, job_ack_many_handover, and
-- a random pick left some keys' backlog to the end of a drain); each
-- worker's turn starting at its own key keeps workers from all reaching
-- for the same heads. Order across keys is only roughly FIFO; within a key
-- the slots go in claim order. Due delayed/suspended rows and lapsed running
-- rows of capped jobs (late) join them; a lapsed row takes a slot like a
-- fresh one (an exhausted lapse is buried by job_claim).
--
-- Tenants full in this process (claim_tenant_open, as job_claim) are
-- skipped here and in job_claim_capped_late: their rows take no slot.
--
-- Each key's candidates are paired with its lowest slots not held by an
-- unexpired lease (slot numbers below live + candidates suffice: at most
-- `live` of them are taken). An expired lease row on a paired slot is
-- deleted first (SKIP LOCKED, expiry re-checked), then the pairs are
-- inserted into the lease table in (key, slot) order (one order for every
-- claim, so two claims never wait on each other in a cycle) with ON
-- CONFLICT DO NOTHING, and only the rows whose slot insert landed are
-- updated to running. DO NOTHING, not DO UPDATE ... WHERE expired: the
-- latter locks the live row it does not take until the claim commits, and
-- the holder's settle (which frees or hands over that row) waits on it.
-- A claim that lost a race for a slot claims nothing for it: at worst one
-- poll's delay, never one run too many. Holder = '<worker>:<job id>', the lease
-- TTL is the worker's visibility, every grant a new fence number.
--
-- Attempt, history and started_claim are written as job_claim writes them
-- (the first %(start_now)s fresh rows recorded started; rows held ahead
-- are not, so a crash charges them nothing). Due
-- delayed/suspended and lapsed rows are taken in no particular order
-- (they are few). CTEs referenced
-- once are left to the planner (the statement sits near the 4 KB limit).
WITH RECURSIVE clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now,
           %(visibility_ms)s * interval '1 ms' AS v
), open AS MATERIALIZED (
    SELECT array_agg(q) AS n FROM unnest(%(queues)s::text[]) q
     WHERE q NOT IN (SELECT name FROM ultimate_jobs_queue_pause WHERE kind = 'queue')
), keys(k, lim) AS (
    SELECT %(after)s::text, 0
    UNION ALL
    SELECT n.* FROM keys, LATERAL (
           SELECT j.concurrency_key, j.concurrency_limit FROM ultimate_jobs_job j
            WHERE j.state = 'ready' AND j.concurrency_key > keys.k ORDER BY 1 LIMIT 1) n
), heads AS (
    SELECT w.*
      FROM (SELECT * FROM keys WHERE lim > 0 LIMIT %(keys)s) r, clock c, open o, LATERAL (
           SELECT j.id, j.priority, j.run_at FROM ultimate_jobs_job j
            WHERE j.state = 'ready' AND j.concurrency_key = r.k
              AND j.queue = ANY(o.n) AND j.run_at <= c.now AND @claim_tenant_open
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT greatest(0, least(%(limit)s, r.lim - (
                      SELECT count(*) FROM ultimate_jobs_lease l
                       WHERE l.lease_key = r.k AND l.expires_at > c.now)))) w
), fresh AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_at, j.concurrency_key AS k,
           j.concurrency_limit AS lim, 0 AS lapsed
      FROM ultimate_jobs_job j
     WHERE j.id = ANY(ARRAY(SELECT id FROM (SELECT * FROM heads
                                             ORDER BY priority DESC, run_at, id
                                             LIMIT 2 * %(limit)s) h
                             ORDER BY priority DESC, random() LIMIT %(limit)s))
       AND j.state = 'ready'
       FOR UPDATE OF j SKIP LOCKED
), pool AS (
    SELECT f.*, row_number() OVER (PARTITION BY k ORDER BY priority DESC, run_at, id) AS rn
      FROM fresh f
@capped_grant;


-- name: job_claim_capped_late
-- The capped rows job_claim_capped does not read: due delayed/suspended rows
-- (through the timer index) and lapsed running ones (through the lease
-- index; at most %(retake)s, an exhausted lapse left to job_claim's
-- burial), each taken only with a slot of its key, exactly as that
-- statement takes them (the shared capped_grant tail). Few rows are ever
-- here, so the driver runs it at most every CAPPED_LATE_INTERVAL_S per
-- worker rather than on every claim: a due delayed capped row, or a
-- dead holder's job, starts that much later at worst.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now,
           %(visibility_ms)s * interval '1 ms' AS v
), open AS MATERIALIZED (
    SELECT array_agg(q) AS n FROM unnest(%(queues)s::text[]) q
     WHERE q NOT IN (SELECT name FROM ultimate_jobs_queue_pause WHERE kind = 'queue')
), timers AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_at, j.concurrency_key AS k, j.concurrency_limit AS lim,
           0 AS lapsed
      FROM ultimate_jobs_job j, clock c, open o
     WHERE j.state IN ('delayed', 'suspended') AND j.queue = ANY(o.n)
       AND j.run_at <= c.now AND j.concurrency_key IS NOT NULL AND @claim_tenant_open
     ORDER BY j.run_at, j.id
     LIMIT %(limit)s
       FOR UPDATE OF j SKIP LOCKED
), lapsed AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_at, j.concurrency_key, j.concurrency_limit, 1
      FROM ultimate_jobs_job j, clock c, open o
     WHERE j.state = 'running' AND j.visible_at <= c.now AND j.queue = ANY(o.n)
       AND j.concurrency_key IS NOT NULL
       AND (j.attempt < j.max_attempts OR j.started_claim <> j.claims)
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT %(retake)s
       FOR UPDATE OF j SKIP LOCKED
), pool AS (
    SELECT u.*, row_number() OVER (PARTITION BY k ORDER BY lapsed DESC, priority DESC, run_at, id) AS rn
      FROM (SELECT * FROM timers UNION ALL SELECT * FROM lapsed) u
@capped_grant;


-- fragment: capped_grant
-- The tail of job_claim_capped and job_claim_capped_late, after their pool
-- CTE (id, priority, run_at, k, lim, lapsed, rn: candidates numbered in
-- claim order per key): pair them with free slots, insert the slots, and
-- update the rows whose slot landed to running (see job_claim_capped).
), slots AS (
    SELECT f.k, s, f.lim - f.live AS room, row_number() OVER (PARTITION BY f.k ORDER BY s) AS rn
      FROM (SELECT k, c.now, max(lim) AS lim, count(*) AS want, (
                   SELECT count(*) FROM ultimate_jobs_lease l
                    WHERE l.lease_key = k AND l.expires_at > c.now) AS live
              FROM pool, clock c GROUP BY k, c.now) f,
           generate_series(0, least(f.lim, f.live + f.want) - 1) s
     WHERE NOT EXISTS (SELECT FROM ultimate_jobs_lease l
                        WHERE l.lease_key = f.k AND l.slot = s AND l.expires_at > f.now)
), pair AS (
    SELECT p.id, p.k, s.s AS slot, p.lapsed
      FROM pool p JOIN slots s ON s.k = p.k AND s.rn = p.rn AND s.rn <= s.room
     ORDER BY p.priority DESC, p.run_at, p.id LIMIT %(limit)s
), reap AS (
    DELETE FROM ultimate_jobs_lease WHERE id = ANY(ARRAY(
           SELECT l.id FROM ultimate_jobs_lease l, pair p, clock c
            WHERE l.lease_key = p.k AND l.slot = p.slot AND l.expires_at <= c.now
              FOR UPDATE OF l SKIP LOCKED))
    RETURNING 1
), took AS (
    INSERT INTO ultimate_jobs_lease AS l (lease_key, slot, holder, fence, expires_at)
    SELECT p.k, p.slot, %(worker)s || ':' || p.id, nextval('ultimate_jobs_lease_fence'),
           c.now + c.v
      FROM pair p, clock c WHERE (SELECT count(*) FROM reap) >= 0 ORDER BY p.k, p.slot
    ON CONFLICT DO NOTHING
    RETURNING l.lease_key, l.slot
), won AS (
    SELECT p.id, p.lapsed FROM pair p JOIN took g ON (g.lease_key, g.slot) = (p.k, p.slot)
)
UPDATE ultimate_jobs_job
   SET state = 'running', claims = claims + 1,
       attempt = attempt + (state <> 'running' OR started_claim = claims)::int,
       history = CASE WHEN state = 'running'
                      THEN coalesce(history, '[]') || jsonb_build_object(
                           'attempt', attempt, 'worker', claimed_by, 'at', c.now, 'error',
                           CASE WHEN started_claim = claims THEN %(relapsed_error)s::text
                                ELSE %(unstarted_error)s END)
                      ELSE history END,
       started_claim = CASE WHEN id = ANY(ARRAY(SELECT id FROM won WHERE lapsed = 0
                                                LIMIT %(start_now)s))
                            THEN claims + 1 ELSE started_claim END,
       claimed_by = %(worker)s, claimed_at = c.now, updated_at = c.now,
       visible_at = c.now + c.v
  FROM clock c
 WHERE id = ANY(ARRAY(SELECT id FROM won))
RETURNING id, name, queue, input, idempotency_key, run_id,
          attempt, max_attempts, priority, state, tenant_id, claimed_by,
          claims, visible_at, enqueued_by, traceparent, claimed_at,
          id = ANY(ARRAY(SELECT id FROM won WHERE lapsed = 1)), started_claim = claims, run_at,
          concurrency_key


-- name: job_claim_busy
-- The refusal of when_busy="fail" jobs (%(names)s), run right after the
-- capped claim by workers that serve such jobs (never by the others). A due
-- ready row of one is refused only on evidence: its key's live slots held
-- by OTHER jobs number at least its limit (a slot its own earlier claim
-- still holds, a lapse or a retry, is no evidence: it waits for the next
-- poll). Keys are read from the live leases (few: one per running capped
-- run), each full one probing uj_job_capped_ready_idx for its rows. The row
-- is claimed without a slot (attempt counted as any claim's) and the worker
-- settles it failed with X_JOB_KEY_BUSY through job_nack, attempt given
-- back, body never run: ready -> failed is no transition the state machine
-- allows, and the nack is the one statement that writes a refusal's error.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
), taken AS MATERIALIZED (
    SELECT b.id
      FROM (SELECT DISTINCT l.lease_key AS k FROM ultimate_jobs_lease l, clock c
             WHERE l.expires_at > c.now) AS f, clock c,
           LATERAL (SELECT j.id FROM ultimate_jobs_job j
                     WHERE j.state = 'ready' AND j.concurrency_key = f.k
                       AND j.name = ANY(%(names)s::text[]) AND j.run_at <= c.now
                       AND j.queue = ANY(%(queues)s::text[])
                       AND NOT EXISTS (SELECT FROM ultimate_jobs_queue_pause p
                                        WHERE p.kind = 'queue' AND p.name = j.queue)
                       AND (SELECT count(*) FROM ultimate_jobs_lease l
                             WHERE l.lease_key = f.k AND l.expires_at > c.now
                               AND right(l.holder, 36) <> j.id::text) >= j.concurrency_limit
                     ORDER BY j.priority DESC, j.run_at, j.id
                     LIMIT %(limit)s
                       FOR UPDATE OF j SKIP LOCKED) AS b
     LIMIT %(limit)s
)
@claim_taken;


-- name: job_bury
-- Bury rows a claim found exhausted: still running, lease lapsed, proven
-- started, on the final attempt (each condition re-checked, so a row is
-- buried once however many claims saw it). Dead, or failed for the jobs in
-- %(drop)s (no dead letter). The counter adds the burial in the same
-- statement. Answers the buried rows whole (the on_settled hook gets them).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), buried AS (
    UPDATE ultimate_jobs_job AS j
       SET state = CASE WHEN j.name = ANY(%(drop)s::text[]) THEN 'failed' ELSE 'dead' END,
           visible_at = NULL, claimed_by = NULL, last_error_stack = NULL,
           last_error = %(error)s, updated_at = clock.now,
           history = coalesce(j.history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempt, 'worker', j.claimed_by, 'at', clock.now,
               'error', %(error)s::text))
      FROM clock
     WHERE j.id = ANY(%(ids)s::uuid[]) AND j.state = 'running'
       AND j.visible_at <= clock.now AND j.attempt >= j.max_attempts
       AND j.started_claim = j.claims
    RETURNING j.*
), counted AS (
    INSERT INTO ultimate_jobs_job_counter
           (job, queue, bucket_ms, bucket_start, done, retried, failed, dead, duration_ms)
    SELECT buried.name, buried.queue, 60000, date_trunc('minute', clock.now), 0, 0,
           count(*) FILTER (WHERE buried.state = 'failed'),
           count(*) FILTER (WHERE buried.state = 'dead'), 0
      FROM buried, clock
     GROUP BY buried.name, buried.queue, clock.now
     ORDER BY buried.name, buried.queue
    ON CONFLICT (job, queue, bucket_ms, bucket_start) DO UPDATE
       SET failed = ultimate_jobs_job_counter.failed + excluded.failed,
           dead = ultimate_jobs_job_counter.dead + excluded.dead
    RETURNING 1
)
SELECT id, name, queue, input, idempotency_key, run_id, attempt, max_attempts,
       priority, state, run_at, created_at, updated_at, tenant_id, last_error,
       last_error_stack, progress, claimed_by, claims, visible_at, enqueued_by,
       traceparent, claimed_at, result, history
  FROM buried;


-- name: job_enqueue
-- Insert one job, or nothing when a LIVE job holds the same (name, tenant,
-- key): the ON CONFLICT target spells the partial unique index's expression
-- exactly. A caller-allocated id (an outbox re-publish) that already exists
-- inserts nothing either. The common case, a job without a key on an id the
-- driver just drew from uuid7(), goes through job_enqueue_keyless: it cannot
-- conflict on the live-key index nor meet its own id, and leaving out the
-- clause and the probe spares it a speculative insertion (a lock and a WAL
-- record more) and an index probe. The wake notification: see
-- job_enqueue_answer.
WITH inserted AS (
    @job_enqueue_insert
     WHERE NOT EXISTS (SELECT 1 FROM ultimate_jobs_job WHERE id = %(id)s)
    @live_key_conflict
    RETURNING id, run_id, queue, run_at, created_at
)
@job_enqueue_answer;


-- name: job_enqueue_keyless
-- job_enqueue for a job without an idempotency key on a fresh id.
WITH inserted AS (
    @job_enqueue_insert
    RETURNING id, run_id, queue, run_at, created_at
)
@job_enqueue_answer;


-- fragment: job_enqueue_insert
-- The one row of job_enqueue, delayed when due in the future.
INSERT INTO ultimate_jobs_job
       (id, name, queue, input, idempotency_key, run_id, max_attempts, priority,
        state, run_at, tenant_id, enqueued_by, traceparent, created_at, updated_at,
        concurrency_key, concurrency_limit)
SELECT %(id)s, %(name)s, %(queue)s, %(input)s::jsonb, %(key)s, %(run_id)s,
       %(max_attempts)s, %(priority)s,
       CASE WHEN due.run_at > due.now THEN 'delayed' ELSE 'ready' END,
       due.run_at, %(tenant_id)s, %(enqueued_by)s, %(traceparent)s, due.now, due.now,
       %(concurrency_key)s, %(concurrency_limit)s
  FROM (SELECT clock.now,
               coalesce(%(run_at)s::timestamptz,
                        clock.now + %(delay_ms)s * interval '1 millisecond') AS run_at
          FROM (SELECT coalesce(%(now)s::timestamptz, now()) AS now) AS clock) AS due


-- fragment: live_key_conflict
-- One LIVE job per (name, tenant, key): the target spells the partial unique
-- index uj_job_live_key_uniq exactly.
ON CONFLICT (name, (coalesce(tenant_id, '')), idempotency_key)
   WHERE state IN ('ready', 'delayed', 'running', 'suspended')
     AND idempotency_key IS NOT NULL
   DO NOTHING


-- fragment: job_enqueue_answer
-- The inserted row's ids and created_at (what enqueue answers as the job's
-- enqueue time is what any later read of the row says), and whether the wake
-- notification went out. It is sent only when a worker could act on it soon:
-- the row is due within 1 s, and no other row of its queue created in the
-- current 250 ms slot is still ready (a woken worker is coming for that one
-- and passes again after it, so it finds this row too; a row already claimed
-- silences nothing, which keeps pickup fast at low load). This statement's
-- own insert is invisible to its own read, so a row never silences itself.
-- The check reads the queue's NEWEST ready row through the wake-slot index
-- (one row, backwards) rather than asking for a range: with statistics
-- taken on an empty queue, the planner answered the range question by
-- walking the whole backlog (tests/test_enqueue.py pins both cases). Postgres serialises the commits
-- of notifying transactions, so staying silent when a woken worker will find
-- the row anyway matters under load. NOTIFY is delivered at commit, dropped
-- on rollback. The check and the notification are one CASE on the returned
-- row (a CTE and a count around them cost a tenth of the statement).
--
-- A row due later (within the hour) sends a timed wake instead: the payload
-- is the queue, a tab and the end of the row's 20 ms bin in Unix ms, so an
-- idle worker sleeps until then and claims it on time rather than on its
-- next poll (up to WOKEN_IDLE_POLL_MAX late). Only the first delayed row of
-- a queue's bin sends one: the others of the bin are due by the same instant.
SELECT i.id, i.run_id, i.created_at,
       CASE WHEN i.run_at <= i.created_at
             AND coalesce((
                 SELECT o.created_at FROM ultimate_jobs_job o
                  WHERE o.queue = i.queue AND o.state = 'ready' AND o.created_at <= i.created_at
                  ORDER BY o.created_at DESC
                  LIMIT 1), '-infinity') < date_bin('250 milliseconds', i.created_at, 'epoch')
            THEN pg_notify('ultimate_jobs_wake', i.queue) IS NOT NULL
            WHEN i.run_at > i.created_at AND i.run_at <= i.created_at + interval '1 hour'
             AND NOT EXISTS (
                 SELECT 1 FROM ultimate_jobs_job o
                  WHERE o.queue = i.queue AND o.state = 'delayed'
                    AND o.run_at >= date_bin('20 milliseconds', i.run_at, 'epoch')
                    AND o.run_at < date_bin('20 milliseconds', i.run_at, 'epoch')
                                   + interval '20 milliseconds')
            THEN pg_notify('ultimate_jobs_wake', i.queue || E'\t' || (20 + 1000 *
                 extract(epoch FROM date_bin('20 milliseconds', i.run_at, 'epoch')))::bigint)
                 IS NOT NULL
            ELSE false END AS notified
  FROM inserted i


-- name: job_enqueue_many
-- Insert many jobs in one round trip from one JSON array (one bind instead
-- of a dozen arrays; psycopg dumps a list element by element in Python, a
-- JSON text is one string). Same conflict rules as job_enqueue; rows that
-- insert nothing are resolved by job_live_holders. A batch without any key
-- goes through job_enqueue_many_keyless.
WITH inserted AS (
    @job_enqueue_many_insert
    @live_key_conflict
    RETURNING id, queue, run_at, created_at
)
@job_enqueue_many_answer;


-- name: job_enqueue_many_keyless
-- job_enqueue_many for a batch in which no job has an idempotency key.
WITH inserted AS (
    @job_enqueue_many_insert
    RETURNING id, queue, run_at, created_at
)
@job_enqueue_many_answer;


-- fragment: job_enqueue_many_insert
-- The rows of job_enqueue_many, in the order given (the first of two rows
-- with one key wins). A row leaves out what it does not set: run_id is then
-- its id, delay_ms 0, the rest null (a smaller JSON text to write and parse).
-- Only a row with a caller-allocated id (caller_id) probes for an existing
-- one: under an OR the probe stays a per-row subplan, run only for those,
-- where NOT EXISTS alone became an anti-join that read the whole job table
-- (a hash of every row) on every call.
INSERT INTO ultimate_jobs_job
       (id, name, queue, input, idempotency_key, run_id, max_attempts, priority,
        state, run_at, tenant_id, enqueued_by, traceparent, created_at, updated_at,
        concurrency_key, concurrency_limit)
SELECT p.id, p.name, p.queue, p.input, p.idempotency_key, coalesce(p.run_id, p.id),
       p.max_attempts, p.priority, CASE WHEN p.due > p.now THEN 'delayed' ELSE 'ready' END,
       p.due, p.tenant_id, p.enqueued_by, p.traceparent, p.now, p.now,
       p.concurrency_key, p.concurrency_limit
  FROM (SELECT r.*, clock.now,
               coalesce(r.run_at,
                        clock.now + coalesce(r.delay_ms, 0) * interval '1 millisecond') AS due
          FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(
                   ord int, id uuid, name text, queue text, input jsonb,
                   idempotency_key text, run_id uuid, max_attempts int, priority int,
                   run_at timestamptz, delay_ms bigint, tenant_id text, enqueued_by text,
                   traceparent text, caller_id boolean, concurrency_key text,
                   concurrency_limit int),
               (SELECT coalesce(%(now)s::timestamptz, now()) AS now) AS clock) AS p
 WHERE p.caller_id IS NULL
    OR NOT EXISTS (SELECT 1 FROM ultimate_jobs_job x WHERE x.id = p.id)
 ORDER BY p.ord


-- fragment: job_enqueue_many_answer
-- The inserted ids, and one notification per queue that received a due row,
-- under job_enqueue_answer's slot rule; rows due later (within the hour) send
-- job_enqueue_answer's timed wake, one per queue and 20 ms bin (at most 100).
, notified AS (
    SELECT pg_notify('ultimate_jobs_wake', q.queue)
      FROM (SELECT DISTINCT i.queue, i.created_at FROM inserted i
             WHERE i.run_at <= i.created_at) AS q
     WHERE coalesce((
           SELECT o.created_at FROM ultimate_jobs_job o
            WHERE o.queue = q.queue AND o.state = 'ready' AND o.created_at <= q.created_at
            ORDER BY o.created_at DESC
            LIMIT 1), '-infinity') < date_bin('250 milliseconds', q.created_at, 'epoch')
    UNION ALL
    SELECT pg_notify('ultimate_jobs_wake', t.queue || E'\t' || t.due_ms)
      FROM (SELECT DISTINCT i.queue, (20 + 1000 *
                   extract(epoch FROM date_bin('20 milliseconds', i.run_at, 'epoch')))::bigint
                   AS due_ms
              FROM inserted i
             WHERE i.run_at > i.created_at AND i.run_at <= i.created_at + interval '1 hour'
             LIMIT 100) AS t
)
SELECT id, (SELECT count(*) FROM notified) AS notified FROM inserted


-- name: job_get
-- One job row by id.
SELECT id, name, queue, input, idempotency_key, run_id, attempt, max_attempts,
       priority, state, run_at, created_at, updated_at, tenant_id, last_error,
       last_error_stack, progress, claimed_by, claims, visible_at, enqueued_by,
       traceparent, claimed_at, result, history
  FROM ultimate_jobs_job
 WHERE id = %(id)s;


-- name: job_heartbeat_many
-- Push the leases of held jobs to now + visibility (clock_timestamp(): a
-- renewal that waited on a lock must not set a lease already past); answer
-- the ids that landed. A null worker or claim matches any (the operator's use). A job
-- missing from the answer was cancelled or re-claimed: its run must stop.
-- The fleet-wide slot of a capped job is renewed to the same instant, and
-- only while it is unexpired and still this claim's (holder '<worker>:<id>'):
-- a lapsed slot is lost even if nobody took it yet (another run may have,
-- and the cap must hold). The second column is false for a landed job whose
-- slot was lost: its run must stop too (X_JOB_SLOT_LOST).
WITH beat AS (
    UPDATE ultimate_jobs_job AS j
       SET visible_at = coalesce(%(now)s::timestamptz, clock_timestamp())
                        + %(visibility_ms)s * interval '1 millisecond'
      FROM unnest(%(ids)s::uuid[], %(workers)s::text[], %(claims)s::int[])
           AS h(id, worker, claim)
     WHERE j.id = ANY(%(ids)s::uuid[]) AND j.id = h.id AND j.state = 'running'
       AND (h.worker IS NULL OR j.claimed_by = h.worker)
       AND (h.claim IS NULL OR j.claims = h.claim)
    RETURNING j.id, j.concurrency_key, j.claimed_by, j.visible_at
), slots AS (
    UPDATE ultimate_jobs_lease AS l
       SET expires_at = b.visible_at
      FROM beat b
     WHERE b.concurrency_key IS NOT NULL AND l.lease_key = b.concurrency_key
       AND l.holder = b.claimed_by || ':' || b.id
       AND l.expires_at > coalesce(%(now)s::timestamptz, clock_timestamp())
    RETURNING b.id
)
SELECT b.id, b.concurrency_key IS NULL OR b.id IN (SELECT id FROM slots) FROM beat b;


-- name: job_mark_started
-- Record that the body of this claim starts now (re-taken rows the claim
-- did not record, see job_claim), fenced like every write of an attempt. No row: the claim is
-- no longer ours and the body must not run.
UPDATE ultimate_jobs_job AS j
   SET started_claim = j.claims
 WHERE j.id = %(id)s::uuid AND j.state = 'running'
   AND j.claimed_by = %(worker)s AND j.claims = %(claim)s
RETURNING j.id;


-- fragment: bulk_moved_answer
-- The tail of job_promote_many and job_requeue_many, after their eligible
-- and moved CTEs: wake each queue that got rows, answer affected and
-- remaining (what a second call could still move).
), woke AS (
    SELECT pg_notify('ultimate_jobs_wake', q.queue) FROM (SELECT DISTINCT queue FROM moved) q
)
SELECT (SELECT count(*) FROM moved) AS affected,
       (SELECT count(*) FROM eligible) - (SELECT count(*) FROM moved) AS remaining,
       (SELECT count(*) FROM woke)


-- fragment: claim_tenant_open
-- The claim's tenant filter. NULL-safe: "tenant_id <> ALL(...)" alone would
-- drop every row without a tenant once any tenant is full. With nothing
-- full ('{}' and true) it is true for every row and the scan is unchanged.
-- With a tenant full, the ordered scan of the ready index reads past its
-- rows (a heap fetch each: tenant_id is not in the index) to reach the next
-- tenant's; 20,000 rows of one tenant at the head of a queue cost a claim a
-- few milliseconds (bench figures in docs/howto/limits.md), paid only
-- while that tenant is full in this process.
(CASE WHEN j.tenant_id IS NULL THEN %(untenanted)s::bool
      ELSE j.tenant_id <> ALL(%(skip)s::text[]) END)


-- fragment: job_filter
-- The optional filters of the listing and bulk statements, over rows
-- aliased j: each parameter left NULL matches any row.
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
       AND (%(name)s::text IS NULL OR j.name = %(name)s::text)
       AND (%(tenant)s::text IS NULL OR j.tenant_id = %(tenant)s::text)
       AND (%(id_min)s::uuid IS NULL OR j.id >= %(id_min)s::uuid)
       AND (%(id_max)s::uuid IS NULL OR j.id <= %(id_max)s::uuid)
       AND (%(created_from)s::timestamptz IS NULL
            OR j.created_at >= %(created_from)s::timestamptz)
       AND (%(created_to)s::timestamptz IS NULL
            OR j.created_at < %(created_to)s::timestamptz)
       AND (%(error_code)s::text IS NULL
            OR split_part(j.last_error, ':', 1) = %(error_code)s::text)


-- name: job_list
-- One page of jobs, newest id first (ids are UUIDv7: creation order), after
-- the previous page's last id. Each filter is optional (NULL: any); the
-- primary key serves the order and the seek, so a page reads about limit
-- rows when the filters match often. Run unprepared: a generic plan over
-- optional filters would not see which ones are set.
SELECT id, name, queue, input, idempotency_key, run_id, attempt, max_attempts,
       priority, state, run_at, created_at, updated_at, tenant_id, last_error,
       last_error_stack, progress, claimed_by, claims, visible_at, enqueued_by,
       traceparent, claimed_at, result, history
  FROM ultimate_jobs_job j
 WHERE (%(states)s::text[] IS NULL OR j.state = ANY(%(states)s::text[]))
   AND (%(before)s::uuid IS NULL OR j.id < %(before)s::uuid)
       @job_filter
 ORDER BY j.id DESC
 LIMIT %(limit)s;


-- name: job_count
-- How many jobs match the filters, by stored state (what job_list pages
-- through): a health check's or a script's "is the queue drained?", with no
-- buckets. One branch per partial index, each spelling that index's
-- predicate so the planner can use it (ready: the claim indexes; delayed
-- and suspended: the timer index; running: the lease index; done, and the
-- other finished states: the retention indexes); one state = ANY(...) over
-- several of them reads the whole table. Run unprepared, so the parameters
-- are constants to the planner: the && guard of a branch whose states were
-- not asked for folds to false, and that branch reads nothing.
SELECT sum(n)::bigint
  FROM (SELECT count(*) AS n
          FROM ultimate_jobs_job j
         WHERE %(states)s::text[] && '{ready}' AND j.state = 'ready'
               @job_filter
        UNION ALL
        SELECT count(*)
          FROM ultimate_jobs_job j
         WHERE %(states)s::text[] && '{delayed,suspended}'
           AND j.state IN ('delayed', 'suspended')
           AND j.state = ANY(%(states)s::text[])
               @job_filter
        UNION ALL
        SELECT count(*)
          FROM ultimate_jobs_job j
         WHERE %(states)s::text[] && '{running}' AND j.state = 'running'
               @job_filter
        UNION ALL
        SELECT count(*)
          FROM ultimate_jobs_job j
         WHERE %(states)s::text[] && '{done}' AND j.state = 'done'
               @job_filter
        UNION ALL
        SELECT count(*)
          FROM ultimate_jobs_job j
         WHERE %(states)s::text[] && '{failed,dead,cancelled}'
           AND j.state IN ('failed', 'dead', 'cancelled')
           AND j.state = ANY(%(states)s::text[])
               @job_filter) c;


-- name: job_live_holders
-- The live holders of (name, tenant, key) triples, for enqueues that
-- inserted nothing. Reads with a fresh snapshot, after the insert waited for
-- any concurrent inserter of the same key to finish.
SELECT DISTINCT ON (j.name, coalesce(j.tenant_id, ''), j.idempotency_key)
       j.id, j.run_id, j.name, coalesce(j.tenant_id, '') AS tenant, j.idempotency_key
  FROM ultimate_jobs_job j
  JOIN unnest(%(names)s::text[], %(tenants)s::text[], %(keys)s::text[]) AS k(name, tenant, key)
    ON j.name = k.name AND coalesce(j.tenant_id, '') = k.tenant AND j.idempotency_key = k.key
 WHERE j.state IN ('ready', 'delayed', 'running', 'suspended');


-- name: job_nack
-- Hand an attempt back: retried (ready, later run_at), parked (suspended),
-- dead-lettered or dropped (failed). Fenced like job_ack_many. An uncounted
-- hand-back (a shed, a suspension, a drain) gives the attempt back, never
-- below zero. A new error without a stack clears the old stack. The counter
-- adds exactly one of retried / failed / dead, or nothing for an uncounted
-- hand-back, in the same statement. A counted attempt adds its entry to the
-- row's history (attempt, worker, time, error): the django.tasks backend
-- answers TaskResult.errors and worker_ids from it. A capped job's slot is
-- freed as job_ack_many frees it (only when this settle landed). A counted
-- hand-back is one pickup, measured on the row as the statement found it
-- (before: RETURNING would show the new run_at).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), before AS (
    SELECT greatest(0, round(extract(epoch FROM claimed_at - run_at) * 1000))::bigint
               AS pickup_ms
      FROM ultimate_jobs_job WHERE id = %(id)s
), settled AS (
    UPDATE ultimate_jobs_job AS j
       SET state = %(state)s,
           attempt = CASE WHEN %(counts_as_attempt)s THEN j.attempt
                          ELSE greatest(j.attempt - 1, 0) END,
           run_at = coalesce(%(run_at)s::timestamptz,
                             clock.now + %(delay_ms)s * interval '1 millisecond'),
           visible_at = NULL, claimed_by = NULL,
           last_error = coalesce(%(error)s::text, j.last_error),
           last_error_stack = CASE WHEN %(error)s::text IS NULL THEN j.last_error_stack
                                   ELSE %(stack)s::text END,
           updated_at = clock.now,
           history = CASE WHEN %(counts_as_attempt)s
                          THEN coalesce(j.history, '[]'::jsonb) || jsonb_build_array(
                               jsonb_strip_nulls(jsonb_build_object(
                                   'attempt', j.attempt, 'worker', j.claimed_by,
                                   'at', clock.now, 'error', %(error)s::text)))
                          ELSE j.history END
      FROM clock
     WHERE j.id = %(id)s AND j.state = 'running'
       AND j.claimed_by = %(worker)s AND j.claims = %(claim)s
    RETURNING j.name, j.queue, j.concurrency_key
), freed AS (
    DELETE FROM ultimate_jobs_lease AS l
     USING settled
     WHERE settled.concurrency_key IS NOT NULL AND l.lease_key = settled.concurrency_key
       AND l.holder = %(worker)s || ':' || %(id)s
    RETURNING 1
), counted AS (
    INSERT INTO ultimate_jobs_job_counter
           (job, queue, bucket_ms, bucket_start, done, retried, failed, dead, duration_ms,
            pickups, pickup_ms)
    SELECT settled.name, settled.queue, 60000, date_trunc('minute', clock.now), 0,
           (%(outcome)s::text = 'retried')::int, (%(outcome)s::text = 'failed')::int,
           (%(outcome)s::text = 'dead')::int, %(duration_ms)s, 1, before.pickup_ms
      FROM settled, clock, before
     WHERE %(outcome)s::text IS NOT NULL
    ON CONFLICT (job, queue, bucket_ms, bucket_start) DO UPDATE
       SET retried = ultimate_jobs_job_counter.retried + excluded.retried,
           failed = ultimate_jobs_job_counter.failed + excluded.failed,
           dead = ultimate_jobs_job_counter.dead + excluded.dead,
           duration_ms = ultimate_jobs_job_counter.duration_ms + excluded.duration_ms,
           pickups = ultimate_jobs_job_counter.pickups + excluded.pickups,
           pickup_ms = ultimate_jobs_job_counter.pickup_ms + excluded.pickup_ms
    RETURNING 1
)
SELECT name FROM settled;


-- name: job_progress
-- Store a running job's progress, fenced like a settle; silently nothing
-- when the fence fails.
UPDATE ultimate_jobs_job
   SET progress = %(progress)s::jsonb
 WHERE id = %(id)s AND state = 'running' AND claimed_by = %(worker)s
   AND claims = %(claim)s
RETURNING id;


-- name: job_promote
-- Make a job waiting on its run_at (delayed, or ready in backoff) due now and
-- wake its queue. Never a suspended row: its wake time belongs to its step.
-- Answers the row's state before the write (or nothing for an unknown id) so
-- a refusal can name it.
WITH target AS (
    SELECT id, state, queue FROM ultimate_jobs_job WHERE id = %(id)s FOR UPDATE
), moved AS (
    UPDATE ultimate_jobs_job AS j
       SET state = 'ready',
           run_at = least(j.run_at, coalesce(%(now)s::timestamptz, now())),
           updated_at = coalesce(%(now)s::timestamptz, now())
      FROM target t
     WHERE j.id = t.id AND t.state IN ('ready', 'delayed')
    RETURNING j.queue
), woke AS (
    SELECT pg_notify('ultimate_jobs_wake', queue) FROM moved
)
SELECT t.state, (SELECT count(*) FROM moved) AS moved, (SELECT count(*) FROM woke)
  FROM target t;


-- name: job_promote_many
-- Make up to limit waiting rows (delayed, or ready in backoff) due now,
-- oldest id first, and wake their queues. Never suspended rows (their wake
-- time belongs to a step). remaining: what a second call could still move.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), eligible AS (
    SELECT j.id
      FROM ultimate_jobs_job j, clock
     WHERE j.state = ANY(%(states)s::text[])
       AND (j.state = 'delayed' OR j.run_at > clock.now)
       @job_filter
), picked AS (
    SELECT id FROM eligible ORDER BY id LIMIT %(limit)s
), moved AS (
    UPDATE ultimate_jobs_job AS j
       SET state = 'ready', run_at = least(j.run_at, clock.now), updated_at = clock.now
      FROM picked, clock
     WHERE j.id = picked.id AND j.state IN ('ready', 'delayed')
    RETURNING j.queue
@bulk_moved_answer;


-- name: job_remove
-- Delete a job that is not running, with its steps. A claim racing the
-- delete wins: the delete waits for the claim's row lock, then sees running.
WITH removed AS (
    DELETE FROM ultimate_jobs_job
     WHERE id = %(id)s AND state <> 'running'
    RETURNING run_id
), steps AS (
    DELETE FROM ultimate_jobs_step s USING removed r WHERE s.run_id = r.run_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM removed) AS removed, (SELECT count(*) FROM steps) AS steps,
       (SELECT state FROM ultimate_jobs_job WHERE id = %(id)s) AS state;


-- name: job_remove_many
-- Delete up to limit rows that are not running, oldest id first, with their
-- steps. A claim racing the delete wins (the delete re-checks the state
-- after waiting for the claim's row lock). remaining: what a second call
-- could still delete.
WITH eligible AS (
    SELECT j.id
      FROM ultimate_jobs_job j
     WHERE j.state = ANY(%(states)s::text[]) AND j.state <> 'running'
       @job_filter
), picked AS (
    SELECT id FROM eligible ORDER BY id LIMIT %(limit)s
), removed AS (
    DELETE FROM ultimate_jobs_job j USING picked p
     WHERE j.id = p.id AND j.state <> 'running'
    RETURNING j.run_id
), steps AS (
    DELETE FROM ultimate_jobs_step s USING removed r WHERE s.run_id = r.run_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM removed) AS affected,
       (SELECT count(*) FROM eligible) - (SELECT count(*) FROM removed) AS remaining,
       (SELECT count(*) FROM steps);


-- name: job_requeue
-- Make a finished job ready again: attempt 0, due now, lease columns
-- cleared, its run kept (earlier steps replay), the retry appended to its
-- history (attempts restart at 1: the entry is how a reader numbers them
-- across retries). With from_step, delete that
-- step and every step that started after it (a step sharing the target's
-- start millisecond is kept unless it is the target); a from_step the run
-- has no step of refuses the requeue. Nothing is deleted when the requeue
-- does not land. A live job holding the same key refuses the requeue (the
-- caller names it). Answers the state before the write.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), target AS (
    SELECT id, state, run_id, name, tenant_id, idempotency_key
      FROM ultimate_jobs_job WHERE id = %(id)s FOR UPDATE
), known AS (
    SELECT %(from_step)s::text IS NULL OR EXISTS (
               SELECT 1 FROM ultimate_jobs_step s, target t
                WHERE s.run_id = t.run_id AND s.name = %(from_step)s::text) AS step
), holder AS (
    SELECT h.id
      FROM ultimate_jobs_job h, target t
     WHERE t.idempotency_key IS NOT NULL
       AND h.name = t.name AND coalesce(h.tenant_id, '') = coalesce(t.tenant_id, '')
       AND h.idempotency_key = t.idempotency_key
       AND h.state IN ('ready', 'delayed', 'running', 'suspended') AND h.id <> t.id
     LIMIT 1
), moved AS (
    UPDATE ultimate_jobs_job AS j
       SET state = 'ready', attempt = 0, run_at = clock.now, visible_at = NULL,
           claimed_by = NULL, updated_at = clock.now,
           history = coalesce(j.history, '[]'::jsonb) || jsonb_build_array(
               jsonb_strip_nulls(jsonb_build_object(
                   'event', 'retried', 'at', clock.now,
                   'from_step', %(from_step)s::text)))
      FROM target t, clock
     WHERE j.id = t.id AND t.state IN ('done', 'failed', 'dead', 'cancelled')
       AND NOT EXISTS (SELECT 1 FROM holder) AND (SELECT step FROM known)
    RETURNING j.run_id, j.queue
), pivot AS (
    SELECT date_trunc('milliseconds', s.started_at) AS started
      FROM ultimate_jobs_step s JOIN moved m ON s.run_id = m.run_id
     WHERE s.name = %(from_step)s::text
), dropped AS (
    DELETE FROM ultimate_jobs_step s
     USING moved m
     WHERE s.run_id = m.run_id AND %(from_step)s::text IS NOT NULL
       AND (s.name = %(from_step)s::text
            OR date_trunc('milliseconds', s.started_at) > (SELECT started FROM pivot))
    RETURNING 1
), woke AS (
    SELECT pg_notify('ultimate_jobs_wake', queue) FROM moved
)
SELECT t.state, (SELECT count(*) FROM moved) AS moved, (SELECT id FROM holder) AS holder,
       (SELECT step FROM known) AS step_known, t.run_id,
       (SELECT count(*) FROM dropped) AS dropped, (SELECT count(*) FROM woke)
  FROM target t;


-- name: job_requeue_many
-- Requeue up to limit finished rows, oldest id first: ready, attempt 0, due
-- now, lease cleared, runs kept, the retry appended to each history. Of finished rows sharing one key only the
-- oldest is eligible, and none whose key a live job holds: a second call
-- never moves a row the first one made a holder of, so "call until
-- remaining is zero" ends. Wakes the queues that got rows.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), eligible AS (
    SELECT DISTINCT ON (j.name, coalesce(j.tenant_id, ''),
                        coalesce(j.idempotency_key, j.id::text)) j.id
      FROM ultimate_jobs_job j
     WHERE j.state = ANY(%(states)s::text[])
       @job_filter
       AND NOT EXISTS (
           SELECT 1 FROM ultimate_jobs_job h
            WHERE j.idempotency_key IS NOT NULL AND h.name = j.name
              AND coalesce(h.tenant_id, '') = coalesce(j.tenant_id, '')
              AND h.idempotency_key = j.idempotency_key
              AND h.state IN ('ready', 'delayed', 'running', 'suspended'))
     ORDER BY j.name, coalesce(j.tenant_id, ''),
              coalesce(j.idempotency_key, j.id::text), j.id
), picked AS (
    SELECT id FROM eligible ORDER BY id LIMIT %(limit)s
), moved AS (
    UPDATE ultimate_jobs_job AS j
       SET state = 'ready', attempt = 0, run_at = clock.now, visible_at = NULL,
           claimed_by = NULL, updated_at = clock.now,
           history = coalesce(j.history, '[]'::jsonb) || jsonb_build_array(
               jsonb_build_object('event', 'retried', 'at', clock.now))
      FROM picked, clock
     WHERE j.id = picked.id AND j.state IN ('done', 'failed', 'dead', 'cancelled')
    RETURNING j.queue
@bulk_moved_answer;


-- name: job_stats
-- Depth per queue in six mutually exclusive buckets: a due row is ready
-- whatever state it was written in, a retry in backoff is delayed, a
-- suspended row is only suspended. Done and cancelled rows grow without
-- bound and are never counted. Each branch reads one partial index (claim,
-- lease, finished), so the read stays small however long history grows.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), counted AS (
    SELECT j.queue, j.state, j.run_at
      FROM ultimate_jobs_job j
     WHERE j.state IN ('ready', 'delayed', 'suspended')
    UNION ALL
    SELECT j.queue, j.state, j.run_at
      FROM ultimate_jobs_job j
     WHERE j.state = 'running'
    UNION ALL
    SELECT j.queue, j.state, j.run_at
      FROM ultimate_jobs_job j
     WHERE j.state IN ('failed', 'dead')
)
SELECT c.queue,
       count(*) FILTER (WHERE c.state IN ('ready', 'delayed') AND c.run_at <= clock.now),
       count(*) FILTER (WHERE c.state IN ('ready', 'delayed') AND c.run_at > clock.now),
       count(*) FILTER (WHERE c.state = 'running'),
       count(*) FILTER (WHERE c.state = 'suspended'),
       count(*) FILTER (WHERE c.state = 'failed'),
       count(*) FILTER (WHERE c.state = 'dead'),
       (extract(epoch FROM clock.now - min(c.run_at) FILTER (
            WHERE c.state IN ('ready', 'delayed') AND c.run_at <= clock.now)) * 1000)::bigint
  FROM counted c, clock
 GROUP BY c.queue, clock.now
 ORDER BY c.queue COLLATE "C";


-- name: queue_resume
-- Resume a queue and wake its workers so idle ones pass at once.
WITH resumed AS (
    DELETE FROM ultimate_jobs_queue_pause WHERE kind = 'queue' AND name = %(name)s
    RETURNING name
)
SELECT pg_notify('ultimate_jobs_wake', name) FROM resumed;


-- name: worker_announce
-- Announce (or re-announce) a worker process with its in-flight job ids.
-- The row expires with the visibility timeout: a killed worker disappears
-- on the same schedule its jobs come back.
INSERT INTO ultimate_jobs_worker
       (id, host, pid, queues, concurrency, in_flight, started_at, heartbeat_at, expires_at)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(concurrency)s, %(in_flight)s::jsonb,
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()),
        coalesce(%(now)s::timestamptz, now()) + %(ttl_ms)s * interval '1 millisecond')
ON CONFLICT (id) DO UPDATE
   SET in_flight = excluded.in_flight, heartbeat_at = excluded.heartbeat_at,
       expires_at = excluded.expires_at;


-- name: worker_forget
-- A worker stopping removes its own row.
DELETE FROM ultimate_jobs_worker WHERE id = %(id)s;


-- name: worker_list
-- Live workers, sorted by id; lapsed rows are deleted by the same statement.
WITH lapsed AS (
    DELETE FROM ultimate_jobs_worker
     WHERE expires_at <= coalesce(%(now)s::timestamptz, now())
    RETURNING id
)
SELECT id, host, pid, queues, concurrency, in_flight, started_at, heartbeat_at, expires_at
  FROM ultimate_jobs_worker
 WHERE id NOT IN (SELECT id FROM lapsed)
   AND expires_at > coalesce(%(now)s::timestamptz, now())
 ORDER BY id COLLATE "C";


-- name: event_find
-- The first event a waiting step matches, in (published_at, id) order. A
-- wait owns every event stamped at or after its start, and every event its
-- snapshot could not see: one published by a transaction still open when
-- the wait began and committed since (the stamp is the insert time, the row
-- becomes visible at commit). An event committed before the wait began was
-- stamped before it and was visible to its snapshot: never matched. A
-- rolled-back publish has no row. Events older than the snapshot's xmin were
-- all visible, so each branch reads one index. A refused event moves the
-- step's cursor; later events only.
SELECT * FROM (
    (SELECT e.id, e.name, e.payload, e.correlation_key, e.published_at, e.expires_at
       FROM ultimate_jobs_event e
      WHERE e.name = %(event)s
        AND (%(key)s::text IS NULL OR e.correlation_key = %(key)s::text)
        AND e.expires_at > coalesce(%(now)s::timestamptz, statement_timestamp())
        AND e.published_at >= %(started_at)s::timestamptz
        AND (%(cursor_at)s::timestamptz IS NULL
             OR (e.published_at, e.id) > (%(cursor_at)s::timestamptz, %(cursor_id)s::uuid))
      ORDER BY e.published_at, e.id
      LIMIT 1)
    UNION ALL
    (SELECT e.id, e.name, e.payload, e.correlation_key, e.published_at, e.expires_at
       FROM ultimate_jobs_event e
      WHERE e.name = %(event)s
        AND (%(key)s::text IS NULL OR e.correlation_key = %(key)s::text)
        AND e.expires_at > coalesce(%(now)s::timestamptz, statement_timestamp())
        AND e.xact >= pg_snapshot_xmin(%(snapshot)s::pg_snapshot)
        AND NOT pg_visible_in_snapshot(e.xact, %(snapshot)s::pg_snapshot)
        AND (%(cursor_at)s::timestamptz IS NULL
             OR (e.published_at, e.id) > (%(cursor_at)s::timestamptz, %(cursor_id)s::uuid))
      ORDER BY e.published_at, e.id
      LIMIT 1)
) AS matched
 ORDER BY published_at, id
 LIMIT 1;


-- name: event_list
-- The stored events, newest first (publish order), optionally of one name
-- (uj_event_lookup_idx serves it); the events page. Expired events are
-- listed until the retention sweep purges them.
SELECT e.id, e.name, e.payload, e.correlation_key, e.published_at, e.expires_at
  FROM ultimate_jobs_event e
 WHERE %(event)s::text IS NULL OR e.name = %(event)s::text
 ORDER BY e.published_at DESC, e.id DESC
 LIMIT %(limit)s;


-- name: event_matched_waits
-- The completed waits that took one of these events (the step keeps the
-- event it took in cursor_id; uj_step_matched_idx serves the lookup).
SELECT s.cursor_id, s.run_id, s.name
  FROM ultimate_jobs_step s
 WHERE s.cursor_id = ANY(%(ids)s::uuid[]) AND s.status = 'completed'
 ORDER BY s.run_id, s.name;


-- name: event_mark
-- The snapshot and statement time a new wait begins under.
SELECT pg_current_snapshot()::text, coalesce(%(now)s::timestamptz, statement_timestamp());


-- name: event_publish
-- Store an event, stamped with the statement time (not now(), which is
-- the transaction's start) and the publishing transaction's id, and wake
-- the suspended jobs of the runs waiting on it (key null or equal) in the
-- same statement, notifying once per queue. Inside a transaction the
-- caller re-runs the wake after commit (event_wake): a run that parked
-- while this transaction was open could not see the row yet.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), inserted AS (
    INSERT INTO ultimate_jobs_event
           (id, name, payload, correlation_key, published_at, expires_at, xact)
    SELECT %(id)s, %(event)s, %(payload)s::jsonb, %(key)s::text,
           date_trunc('milliseconds', clock.now),
           clock.now + %(ttl_ms)s * interval '1 millisecond', pg_current_xact_id()
      FROM clock
    RETURNING id, published_at, expires_at
), woken AS (
    UPDATE ultimate_jobs_job AS j
       SET run_at = clock.now
      FROM ultimate_jobs_step s, clock
     WHERE s.status = 'waiting' AND s.event = %(event)s
       AND (s.correlation_key IS NULL OR s.correlation_key = %(key)s::text)
       AND j.run_id = s.run_id AND j.state = 'suspended' AND j.run_at > clock.now
    RETURNING j.queue
), notified AS (
    SELECT pg_notify('ultimate_jobs_wake', q.queue)
      FROM (SELECT DISTINCT queue FROM woken) AS q
)
SELECT i.id, i.published_at, i.expires_at, (SELECT count(*) FROM notified)
  FROM inserted i;


-- name: event_purge
-- Delete expired events (the retention sweep calls it).
WITH purged AS (
    DELETE FROM ultimate_jobs_event
     WHERE expires_at <= coalesce(%(now)s::timestamptz, statement_timestamp())
    RETURNING 1
)
SELECT count(*) FROM purged;


-- name: event_wake
-- The commit-time wake of a publish made inside a transaction: the same
-- wake as event_publish, run after the commit on the pool.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), woken AS (
    UPDATE ultimate_jobs_job AS j
       SET run_at = clock.now
      FROM ultimate_jobs_step s, clock
     WHERE s.status = 'waiting' AND s.event = %(event)s
       AND (s.correlation_key IS NULL OR s.correlation_key = %(key)s::text)
       AND j.run_id = s.run_id AND j.state = 'suspended' AND j.run_at > clock.now
    RETURNING j.queue
)
SELECT pg_notify('ultimate_jobs_wake', q.queue)
  FROM (SELECT DISTINCT queue FROM woken) AS q;


-- name: job_wake_waiting
-- Right after a run parked on a wait: if an event it matches committed
-- between its last search and its park (the publish's own wake found it
-- still running), make it due now. Closes the last window in which a
-- waiter could sleep until the backstop poll.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), woken AS (
    UPDATE ultimate_jobs_job AS j
       SET run_at = clock.now
      FROM ultimate_jobs_step s, clock
     WHERE j.id = %(id)s AND j.state = 'suspended' AND j.run_at > clock.now
       AND s.run_id = j.run_id AND s.name = %(step)s AND s.status = 'waiting'
       AND EXISTS (
           SELECT 1 FROM ultimate_jobs_event e
            WHERE e.name = s.event
              AND (s.correlation_key IS NULL OR e.correlation_key = s.correlation_key)
              AND e.expires_at > clock.now
              AND (e.published_at >= s.started_at
                   OR (e.xact >= pg_snapshot_xmin(s.snapshot::pg_snapshot)
                       AND NOT pg_visible_in_snapshot(e.xact, s.snapshot::pg_snapshot)))
              AND (s.cursor_at IS NULL OR (e.published_at, e.id) > (s.cursor_at, s.cursor_id)))
    RETURNING j.queue
)
SELECT pg_notify('ultimate_jobs_wake', queue) FROM woken;


-- name: step_list
-- Every step of a run: the runner loads them once, on the first step.
SELECT name, status, output, error, attempts, started_at, completed_at, wake_at, event,
       correlation_key, snapshot, cursor_at, cursor_id
  FROM ultimate_jobs_step
 WHERE run_id = %(run_id)s;


-- name: step_put
-- Record a step for the attempt that holds the job, and only for it: the
-- fence (state running, claimed_by, claims) is read with FOR KEY SHARE,
-- which a claim's FOR UPDATE SKIP LOCKED cannot take while this
-- transaction is open, so an atomic step's writes and its record commit
-- together before any other attempt can claim the job. Heartbeats and
-- settles (FOR NO KEY UPDATE) are not blocked by it. No row back: the
-- fence failed and nothing was written.
WITH fence AS (
    SELECT j.id
      FROM ultimate_jobs_job j
     WHERE j.id = %(job_id)s AND j.state = 'running'
       AND j.claimed_by = %(worker)s AND j.claims = %(claim)s
       FOR KEY SHARE
)
INSERT INTO ultimate_jobs_step
       (run_id, name, status, output, error, attempts, started_at, completed_at, wake_at,
        event, correlation_key, snapshot, cursor_at, cursor_id)
SELECT %(run_id)s, %(name)s, %(status)s, %(output)s::jsonb, %(error)s::text, 1,
       %(started_at)s::timestamptz, %(completed_at)s::timestamptz, %(wake_at)s::timestamptz,
       %(event)s::text, %(key)s::text, %(snapshot)s::text, %(cursor_at)s::timestamptz,
       %(cursor_id)s::uuid
  FROM fence
ON CONFLICT (run_id, name) DO UPDATE
   SET status = excluded.status, output = excluded.output, error = excluded.error,
       attempts = ultimate_jobs_step.attempts + 1, completed_at = excluded.completed_at,
       wake_at = excluded.wake_at, event = excluded.event,
       correlation_key = excluded.correlation_key, snapshot = excluded.snapshot,
       cursor_at = excluded.cursor_at, cursor_id = excluded.cursor_id
RETURNING id;


-- Cron tasks, the scheduler's leader lease and task pauses ------------------


-- name: cron_task_fire
-- Fire one occurrence of a cron task: move its watermark from the value the
-- scheduler read (%(expected)s) to %(watermark)s AND insert the
-- occurrence's jobs, in one statement. The watermark is the fence: the
-- update lands only while the stored watermark still equals what this
-- scheduler read and is before the occurrence, so two nodes that both
-- believe they lead still queue an occurrence once (the loser moves no row
-- and so inserts nothing). The jobs' keys are <task>:<occurrence>:<job key>,
-- so even a statement that slipped past the fence meets the live unique
-- index (ON CONFLICT DO NOTHING) while the first fire's jobs are live. The
-- answer is one row per inserted job, or a single row with a NULL id when
-- the watermark moved but every job met a live holder; no row at all means
-- another fire got there first.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), moved AS (
    UPDATE ultimate_jobs_cron_task AS t
       SET watermark = %(watermark)s, last_occurrence = %(occurrence)s,
           fired_at = clock.now, next_run_at = %(next_run_at)s, updated_at = clock.now
      FROM clock
     WHERE t.name = %(name)s AND t.watermark = %(expected)s
       AND t.watermark < %(occurrence)s
    RETURNING t.name
), inserted AS (
    INSERT INTO ultimate_jobs_job
           (id, name, queue, input, idempotency_key, run_id, max_attempts, priority,
            state, run_at, tenant_id, enqueued_by, traceparent, created_at, updated_at,
            concurrency_key, concurrency_limit)
    SELECT r.id, r.name, r.queue, r.input, r.idempotency_key, r.id, r.max_attempts,
           r.priority, CASE WHEN r.run_at > clock.now THEN 'delayed' ELSE 'ready' END,
           r.run_at, r.tenant_id, r.enqueued_by, r.traceparent, clock.now, clock.now,
           r.concurrency_key, r.concurrency_limit
      FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(
               ord int, id uuid, name text, queue text, input jsonb, idempotency_key text,
               max_attempts int, priority int, run_at timestamptz, tenant_id text,
               enqueued_by text, traceparent text, concurrency_key text,
               concurrency_limit int),
           clock
     WHERE EXISTS (SELECT 1 FROM moved)
     ORDER BY r.ord
    ON CONFLICT (name, (coalesce(tenant_id, '')), idempotency_key)
       WHERE state IN ('ready', 'delayed', 'running', 'suspended')
         AND idempotency_key IS NOT NULL
       DO NOTHING
    RETURNING id, queue, run_at, created_at
), notified AS (
    SELECT pg_notify('ultimate_jobs_wake', q.queue)
      FROM (SELECT DISTINCT i.queue FROM inserted i
             WHERE i.run_at <= i.created_at + interval '1 second') AS q
)
SELECT inserted.id, (SELECT count(*) FROM notified) AS notified FROM inserted
UNION ALL
SELECT NULL, 0 FROM moved WHERE NOT EXISTS (SELECT 1 FROM inserted);


-- name: cron_task_list
-- Every stored cron task with its pause, sorted by name in code-unit order
-- (the operator's listing; declared tasks missing here were never armed).
SELECT t.name, t.cron, t.tz, t.watermark, t.last_occurrence, t.fired_at, t.next_run_at,
       p.paused_at
  FROM ultimate_jobs_cron_task t
  LEFT JOIN ultimate_jobs_queue_pause p ON p.kind = 'task' AND p.name = t.name
 ORDER BY t.name COLLATE "C";


-- name: cron_task_sync
-- Read the watermarks of the declared tasks, arming the new ones in the same
-- statement: a task seen for the first time gets the watermark the
-- scheduler proposes (now: it fires from its next occurrence on, never
-- retroactively). An existing watermark is never moved here; a changed
-- cron or zone is recorded (with the next run the scheduler computed) so
-- listings show what runs. Every row is answered through RETURNING, which
-- is why the conflict arm always updates: a plain SELECT in the statement
-- reads its start snapshot, and missed a row that another node's
-- concurrent sync had just committed (two nodes leading at once).
INSERT INTO ultimate_jobs_cron_task AS t
       (name, cron, tz, watermark, next_run_at, created_at, updated_at)
SELECT g.name, g.cron, g.tz, g.watermark, g.next_run_at,
       coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now())
  FROM jsonb_to_recordset(%(tasks)s::jsonb)
       AS g(name text, cron text, tz text, watermark timestamptz, next_run_at timestamptz)
ON CONFLICT (name) DO UPDATE
   SET cron = excluded.cron, tz = excluded.tz,
       next_run_at = CASE WHEN (t.cron, t.tz) IS DISTINCT FROM (excluded.cron, excluded.tz)
                          THEN excluded.next_run_at ELSE t.next_run_at END,
       updated_at = CASE WHEN (t.cron, t.tz) IS DISTINCT FROM (excluded.cron, excluded.tz)
                         THEN excluded.updated_at ELSE t.updated_at END
RETURNING t.name, t.watermark;


-- name: leader_acquire
-- Take or renew a leader lease (a row of the lease table, slot 0): insert
-- wins an unheld key; the update lands only for the holder itself (a
-- renewal) or once the lease expired (a takeover, which bumps the fence).
-- No row back means someone else leads. Safety does not rest on this
-- lease: the fire statement's watermark fence does.
INSERT INTO ultimate_jobs_lease (lease_key, slot, holder, fence, expires_at)
VALUES (%(key)s, 0, %(holder)s, 1,
        coalesce(%(now)s::timestamptz, now()) + %(ttl_ms)s * interval '1 millisecond')
ON CONFLICT (lease_key, slot) DO UPDATE
   SET holder = excluded.holder, expires_at = excluded.expires_at,
       fence = ultimate_jobs_lease.fence
               + CASE WHEN ultimate_jobs_lease.holder = excluded.holder THEN 0 ELSE 1 END
 WHERE ultimate_jobs_lease.holder = excluded.holder
    OR ultimate_jobs_lease.expires_at <= coalesce(%(now)s::timestamptz, now())
RETURNING fence;


-- name: leader_release
-- Give up a leader lease this holder holds (a standby takes over at its next ask).
DELETE FROM ultimate_jobs_lease
 WHERE lease_key = %(key)s AND slot = 0 AND holder = %(holder)s;


-- name: pause_add
-- Pause a queue or a cron task (%(kind)s): one row, never a column on job
-- rows (pausing a million-row queue is one insert). The claim skips a
-- paused queue; the scheduler skips a paused task, its watermark untouched.
-- The first pause's time is kept.
INSERT INTO ultimate_jobs_queue_pause (kind, name, paused_at)
VALUES (%(kind)s, %(name)s, coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (kind, name) DO NOTHING;


-- name: pause_list
-- Paused queues or tasks (%(kind)s), sorted by name in code-unit order.
SELECT name, paused_at FROM ultimate_jobs_queue_pause
 WHERE kind = %(kind)s
 ORDER BY name COLLATE "C";


-- name: task_resume
-- Resume a cron task; its catch-up policy decides what it missed. (A queue
-- resumes through queue_resume, which also wakes its workers.)
DELETE FROM ultimate_jobs_queue_pause WHERE kind = 'task' AND name = %(name)s;
