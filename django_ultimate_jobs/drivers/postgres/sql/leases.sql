-- The lease store's statements (driver.leases): fleet-wide slots and locks.
--
-- One row per (lease_key, slot) in ultimate_jobs_lease; a row whose
-- expires_at passed is free. Time is clock_timestamp(), not now(): a
-- statement that waited on a row lock would otherwise stamp an expiry
-- already in the past (the claim met this under load, commit a9191ef).
-- Every grant draws its fence from the ultimate_jobs_lease_fence sequence
-- (migration 0010), so a later grant's number is greater than every
-- earlier grant's. The memory driver (drivers/memory_leases.py) answers
-- the same; the conformance suite holds the two together.


-- name: lease_acquire
-- Take the lowest slot of %(key)s in 0..limit-1 that has no live row. A
-- lapsed row is taken over by the ON CONFLICT update, which lands only
-- while the row it meets has lapsed: two grants racing for one slot never
-- both land (the loser's update sees the winner's live row and does
-- nothing). The answer is always one row: the grant (slot null when none)
-- and whether a slot looked free, so the caller can tell "full" from "lost
-- a race for a free slot" and try again.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
), free AS (
    SELECT s.slot
      FROM generate_series(0, %(limit)s - 1) AS s(slot), clock
     WHERE NOT EXISTS (
           SELECT 1 FROM ultimate_jobs_lease l
            WHERE l.lease_key = %(key)s AND l.slot = s.slot AND l.expires_at > clock.now)
     ORDER BY s.slot
     LIMIT 1
), granted AS (
    INSERT INTO ultimate_jobs_lease AS l (lease_key, slot, holder, fence, expires_at)
    SELECT %(key)s, free.slot, %(holder)s, nextval('ultimate_jobs_lease_fence'),
           clock.now + %(ttl_ms)s * interval '1 millisecond'
      FROM free, clock
    ON CONFLICT (lease_key, slot) DO UPDATE
       SET holder = excluded.holder, fence = excluded.fence,
           expires_at = excluded.expires_at
     WHERE l.expires_at <= (SELECT now FROM clock)
    RETURNING l.slot, l.fence, l.expires_at
)
SELECT g.slot, g.fence, g.expires_at, EXISTS (SELECT 1 FROM free)
  FROM (SELECT 1) AS one LEFT JOIN granted AS g ON true;


-- name: lease_evict
-- The operator's force-release: delete every row of a key, live or lapsed,
-- answering what was deleted (jobs leases --release).
DELETE FROM ultimate_jobs_lease
 WHERE lease_key = %(key)s
RETURNING lease_key, slot, holder, fence, expires_at,
          expires_at <= coalesce(%(now)s::timestamptz, clock_timestamp());


-- name: lease_held
-- How many live slots a key has (a diagnostic).
SELECT count(*)
  FROM ultimate_jobs_lease
 WHERE lease_key = %(key)s
   AND expires_at > coalesce(%(now)s::timestamptz, clock_timestamp());


-- name: lease_holders
-- The live holders of a key in slot order.
SELECT holder
  FROM ultimate_jobs_lease
 WHERE lease_key = %(key)s
   AND expires_at > coalesce(%(now)s::timestamptz, clock_timestamp())
 ORDER BY slot;


-- name: lease_list
-- Stored rows under a key prefix, lapsed ones included (the operator's
-- view: a lapsed row stays until its slot is taken again). The prefix is
-- matched with starts_with, so % and _ in a key are plain characters.
SELECT lease_key, slot, holder, fence, expires_at,
       expires_at <= coalesce(%(now)s::timestamptz, clock_timestamp())
  FROM ultimate_jobs_lease
 WHERE starts_with(lease_key, %(prefix)s)
 ORDER BY lease_key COLLATE "C", slot
 LIMIT %(limit)s;


-- name: lease_release
-- Free a slot this holder holds (a lapsed one too: it is free anyway).
DELETE FROM ultimate_jobs_lease
 WHERE lease_key = %(key)s AND slot = %(slot)s AND holder = %(holder)s
RETURNING 1;


-- name: lease_renew
-- Push the expiry only while this holder holds the slot AND it has not
-- lapsed: a lapsed lease is lost even if nobody took it yet, so a holder
-- paused past its ttl learns it at its next renewal.
UPDATE ultimate_jobs_lease
   SET expires_at = coalesce(%(now)s::timestamptz, clock_timestamp())
                    + %(ttl_ms)s * interval '1 millisecond'
 WHERE lease_key = %(key)s AND slot = %(slot)s AND holder = %(holder)s
   AND expires_at > coalesce(%(now)s::timestamptz, clock_timestamp())
RETURNING expires_at;
