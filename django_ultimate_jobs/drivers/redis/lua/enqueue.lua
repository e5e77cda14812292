-- enqueue: insert a batch of jobs into one queue, or dedupe each onto the
-- row with its id (any state: an outbox re-publish) or onto the live
-- holder of its idempotency key. An on_conflict="error" request that meets
-- a live key refuses the whole batch before anything is written.
-- ARGV: now, queue, wake channel, count, then 15 per request: id, name,
-- input, key?, tenant?, run, max, priority, run_at? (us), delay_ms,
-- conflict ('e' or 'd'), enqueued_by?, traceparent?, concurrency key?,
-- concurrency limit?  (? = '' for None, '=' .. value otherwise)
local now = clock(ARGV[1])
local queue, channel, n = ARGV[2], ARGV[3], tonumber(ARGV[4])
local W = 15

local reqs = {}
for i = 0, n - 1 do
  local a = 4 + i * W
  reqs[#reqs + 1] = {
    id = ARGV[a + 1], name = ARGV[a + 2], input = ARGV[a + 3], key = opt(ARGV[a + 4]),
    ten = opt(ARGV[a + 5]), run = ARGV[a + 6], max = ARGV[a + 7], pri = ARGV[a + 8],
    at = opt(ARGV[a + 9]), delay = tonumber(ARGV[a + 10]), conflict = ARGV[a + 11],
    by = opt(ARGV[a + 12]), tp = opt(ARGV[a + 13]), ck = opt(ARGV[a + 14]), cl = opt(ARGV[a + 15]),
  }
end

-- First pass: decide every answer, writing nothing.
local batch_ids, batch_keys = {}, {}
for _, q in ipairs(reqs) do
  local known = batch_ids[q.id]
  if known == nil and redis.call('EXISTS', jkey(q.id)) == 1 then
    known = redis.call('HGET', jkey(q.id), 'run')
  end
  if known then
    q.answer = { q.id, known, '1', '' }
  else
    if q.key then
      local nk = nskey(q)
      local holder = batch_keys[nk]
      local holder_run
      if holder then
        holder_run = batch_ids[holder]
      else
        holder = redis.call('HGET', P .. 'ik', nk)
        if holder then holder_run = redis.call('HGET', jkey(holder), 'run') end
      end
      if holder then
        if q.conflict == 'e' then
          return { 'dup', holder, q.name }
        end
        q.answer = { holder, holder_run, '1', '' }
      else
        batch_keys[nk] = q.id
      end
    end
    if q.answer == nil then
      batch_ids[q.id] = q.run
      q.insert = true
      q.answer = { q.id, q.run, '0', fmt(now) }
    end
  end
end

-- Second pass: insert.
local woken = false
local soonest = nil -- the earliest row due later (within the hour), in us
local out = {}
for _, q in ipairs(reqs) do
  if q.insert then
    local at = q.at and tonumber(q.at) or now + q.delay * 1000
    local state = at > now and 'delayed' or 'ready'
    local fields = {
      'id', q.id, 'name', q.name, 'queue', queue, 'input', q.input, 'run', q.run,
      'att', '0', 'max', q.max, 'pri', q.pri, 'st', state, 'at', fmt(at),
      'cre', fmt(now), 'upd', fmt(now), 'clm', '0', 'stc', '0',
    }
    for _, f in ipairs({ 'key', 'ten', 'by', 'tp', 'ck', 'cl' }) do
      if q[f] then
        fields[#fields + 1] = f
        fields[#fields + 1] = q[f]
      end
    end
    redis.call('HSET', jkey(q.id), unpack(fields))
    local r = { st = state, at = fmt(at), pri = q.pri, ck = q.ck }
    redis.call('ZADD', P .. 'x:' .. state, 0, q.id)
    place(q.id, r, now)
    if q.key then
      redis.call('HSET', P .. 'ik', nskey(q), q.id)
    end
    if q.run ~= q.id then
      redis.call('HSET', P .. 'runs', q.run, q.id)
    end
    if at <= now then
      woken = true
    elseif at <= now + 3600000000 and (soonest == nil or at < soonest) then
      soonest = at
    end
  end
  out[#out + 1] = q.answer
end
if woken and channel ~= '' then
  redis.call('PUBLISH', channel, queue)
end
-- A timed wake (wake.py): the queue, a tab and when the row falls due in
-- Unix ms, so an idle worker sleeps until then rather than to its next poll.
if soonest and channel ~= '' then
  redis.call('PUBLISH', channel, queue .. '\t' .. string.format('%d', math.ceil(soonest / 1000)))
end
return out
