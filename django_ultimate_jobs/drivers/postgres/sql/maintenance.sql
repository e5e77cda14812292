-- The statements of the retention sweep and of partition maintenance.
--
-- Same layout as queries.sql: a header line "-- name: <query>", then comment
-- lines saying why. These run from the hourly and daily maintenance jobs,
-- never on the claim path; each retention statement is one batch, committed
-- on its own, so no lock is held longer than one batch.


-- name: event_retention
-- Delete up to %(batch)s expired events, oldest expiry first through
-- uj_event_expiry_idx. SKIP LOCKED: a row another sweep holds is left to it.
WITH picked AS MATERIALIZED (
    SELECT id FROM ultimate_jobs_event
     WHERE expires_at <= %(now)s
     ORDER BY expires_at
     LIMIT %(batch)s
     FOR UPDATE SKIP LOCKED
), removed AS (
    DELETE FROM ultimate_jobs_event WHERE id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING 1
)
SELECT count(*), 0 FROM removed;


-- name: lock_lease_retention
-- Delete up to %(batch)s lock rows (lease keys 'lock:...') that lapsed before
-- %(before)s, oldest expiry first through uj_lease_expiry_idx. Only lock
-- rows: a job slot's row and the leader lease are never read here. A lapsed
-- row is free already; a lock granted again meanwhile took its row over and
-- pushed its expiry on, and the DELETE re-checks the expiry on the locked
-- row, so a live lock is never deleted. SKIP LOCKED: a row a grant is taking
-- over right now is left alone.
WITH picked AS MATERIALIZED (
    SELECT lease_key, slot FROM ultimate_jobs_lease
     WHERE expires_at < %(before)s AND starts_with(lease_key, 'lock:')
     ORDER BY expires_at
     LIMIT %(batch)s
     FOR UPDATE SKIP LOCKED
), removed AS (
    DELETE FROM ultimate_jobs_lease AS l
     USING picked AS p
     WHERE l.lease_key = p.lease_key AND l.slot = p.slot
       AND l.expires_at < %(before)s
    RETURNING 1
)
SELECT count(*), 0 FROM removed;


-- name: job_retention_done
-- Delete up to %(batch)s done rows last written before %(before)s, with the
-- steps of their runs. Rows are picked through the partial index
-- uj_job_done_idx (its predicate is spelled exactly, so the planner can use
-- it): live rows are never read, and a sweep over a million finished rows
-- costs the claim nothing. Picked rows are locked SKIP LOCKED, and only
-- finished rows are locked at all: the claim (ready, delayed, running rows)
-- never waits on a sweep, and an operator requeueing a row this instant
-- keeps it (the lock re-checks state). The deletes find their rows by
-- id = ANY(ARRAY(...)); as a join the planner may scan the whole table (see
-- job_claim). The steps go in the same statement, as job_remove does: they
-- reference their run by run_id, with no foreign key to cascade.
WITH picked AS MATERIALIZED (
    SELECT id FROM ultimate_jobs_job
     WHERE state = 'done' AND updated_at < %(before)s
     ORDER BY updated_at
     LIMIT %(batch)s
     FOR UPDATE SKIP LOCKED
), removed AS (
    DELETE FROM ultimate_jobs_job WHERE id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING run_id
), steps AS (
    DELETE FROM ultimate_jobs_step WHERE run_id = ANY(ARRAY(SELECT run_id FROM removed))
    RETURNING 1
)
SELECT (SELECT count(*) FROM removed), (SELECT count(*) FROM steps);


-- name: job_retention_failed
-- As job_retention_done, for failed, dead and cancelled rows (kept longer:
-- someone may still want to read why they ended), through
-- uj_job_finished_idx.
WITH picked AS MATERIALIZED (
    SELECT id FROM ultimate_jobs_job
     WHERE state IN ('failed', 'dead', 'cancelled') AND updated_at < %(before)s
     ORDER BY updated_at
     LIMIT %(batch)s
     FOR UPDATE SKIP LOCKED
), removed AS (
    DELETE FROM ultimate_jobs_job WHERE id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING run_id
), steps AS (
    DELETE FROM ultimate_jobs_step WHERE run_id = ANY(ARRAY(SELECT run_id FROM removed))
    RETURNING 1
)
SELECT (SELECT count(*) FROM removed), (SELECT count(*) FROM steps);


-- name: partition_list
-- The partitions of a partitioned table, by name, with the table's
-- partitioning strategy and key column (NULL for an expression or a
-- multi-column key). Answers no row when the table does not exist or is not
-- partitioned (the caller refuses it, as it does a key other than the
-- declared one: bounds computed for one column must not land on another).
SELECT p.partstrat,
       CASE WHEN p.partnatts = 1 THEN
           (SELECT a.attname FROM pg_attribute a
             WHERE a.attrelid = p.partrelid AND a.attnum = p.partattrs[0])
       END,
       c.relname
  FROM pg_partitioned_table p
  LEFT JOIN pg_inherits i ON i.inhparent = p.partrelid
  LEFT JOIN pg_class c ON c.oid = i.inhrelid
 WHERE p.partrelid = to_regclass(%(table)s)
 ORDER BY c.relname;


-- name: outbox_retention
-- Published outbox messages past RETENTION["done"], oldest first, one batch
-- (run on OUTBOX_DATABASE). Unpublished ones are never touched: a message
-- waiting for its publish is the job itself.
WITH gone AS (
    DELETE FROM ultimate_jobs_outbox
     WHERE id IN (SELECT id FROM ultimate_jobs_outbox
                   WHERE published_at IS NOT NULL AND published_at < %(before)s
                   ORDER BY published_at
                   LIMIT %(batch)s)
    RETURNING 1
)
SELECT count(*), 0 FROM gone;
