-- verbs: the operator's one-row verbs and the queue's own reads.
-- ARGV[1] is the verb, ARGV[2] the time (us, '' = the server's), ARGV[3]
-- the wake channel; the rest per verb:
--   requeue  id, from_step?    promote id        cancel id, reason?
--   remove   id                stats             pause / resume
local verb = ARGV[1]
local now = clock(ARGV[2])
local channel = ARGV[3]

local function wake(queue)
  if channel ~= '' then redis.call('PUBLISH', channel, queue) end
end

-- A step value is "<attempts>|<started us>|<json>".
local function step_started(value)
  local _, started = string.match(value, '^(%d+)|(%-?%d+)|')
  return tonumber(started)
end

local function to_ready(id, r, from)
  retried(id, r, now, from)
  unfinish(id, r)
  setstate(id, r, 'ready')
  r.at = fmt(now)
  redis.call('HSET', jkey(id), 'att', '0', 'at', r.at, 'upd', fmt(now))
  redis.call('HDEL', jkey(id), 'vis', 'cb')
  if r.key then redis.call('HSET', P .. 'ik', nskey(r), id) end
  place(id, r, now)
end

local function delete_row(id, r)
  if r.st == 'running' then
    redis.call('ZREM', P .. 'r', id)
  elseif WAITING[r.st] then
    unplace(id, r)
  else
    unfinish(id, r)
  end
  redis.call('ZREM', P .. 'x:' .. r.st, id)
  if LIVE[r.st] then unkey(id, r) end
  local steps = redis.call('HLEN', P .. 'st:' .. r.run)
  redis.call('DEL', jkey(id), P .. 'st:' .. r.run)
  if r.run ~= id then redis.call('HDEL', P .. 'runs', r.run) end
  return steps
end

if verb == 'requeue' then
  local id, from = ARGV[4], opt(ARGV[5])
  local r = load(id)
  if r == nil then return { 'notfound' } end
  if r.key then
    local holder = redis.call('HGET', P .. 'ik', nskey(r))
    if holder and holder ~= id then return { 'dup', holder } end
  end
  if LIVE[r.st] then return { 'state', r.st } end
  local sk = P .. 'st:' .. r.run
  if from then
    local pivot = redis.call('HGET', sk, from)
    if not pivot then
      local listed = { 'nostep' }
      local all = redis.call('HGETALL', sk)
      for i = 1, #all, 2 do
        listed[#listed + 1] = all[i]
        listed[#listed + 1] = fmt(step_started(all[i + 1]))
      end
      return listed
    end
    -- the step and every step started after it (by millisecond) run again
    local cut = math.floor(step_started(pivot) / 1000)
    local all = redis.call('HGETALL', sk)
    for i = 1, #all, 2 do
      if math.floor(step_started(all[i + 1]) / 1000) > cut then
        redis.call('HDEL', sk, all[i])
      end
    end
    redis.call('HDEL', sk, from)
  end
  to_ready(id, r, from)
  wake(r.queue)
  local row = flat(id)
  table.insert(row, 1, 'ok')
  return row
elseif verb == 'promote' then
  local id = ARGV[4]
  local r = load(id)
  if r == nil then return { 'notfound' } end
  if r.st ~= 'ready' and r.st ~= 'delayed' then return { 'state', r.st } end
  unplace(id, r)
  setstate(id, r, 'ready')
  r.at = fmt(math.min(tonumber(r.at), now))
  redis.call('HSET', jkey(id), 'at', r.at, 'upd', fmt(now))
  place(id, r, now)
  wake(r.queue)
  local row = flat(id)
  table.insert(row, 1, 'ok')
  return row
elseif verb == 'cancel' then
  local id, reason = ARGV[4], opt(ARGV[5])
  local r = load(id)
  if r == nil or not LIVE[r.st] then return { 'no' } end
  if r.st == 'running' then
    redis.call('ZREM', P .. 'r', id)
  else
    unplace(id, r)
  end
  redis.call('HDEL', jkey(id), 'vis', 'cb')
  if reason then redis.call('HSET', jkey(id), 'err', reason) end
  redis.call('HSET', jkey(id), 'upd', fmt(now))
  finish(id, r, 'cancelled', now)
  local row = flat(id)
  table.insert(row, 1, 'ok')
  return row
elseif verb == 'remove' then
  local id = ARGV[4]
  local r = load(id)
  if r == nil then return { 'notfound' } end
  if r.st == 'running' then return { 'running' } end
  delete_row(id, r)
  return { 'ok' }
elseif verb == 'purge' then
  -- retention: delete the given finished rows still finished before `before`
  local before, jobs, steps = tonumber(ARGV[4]), 0, 0
  for i = 5, #ARGV do
    local r = load(ARGV[i])
    if r and not LIVE[r.st] and tonumber(r.upd) < before then
      steps = steps + delete_row(ARGV[i], r)
      jobs = jobs + 1
    end
  end
  return { jobs, steps }
elseif verb == 'stats' then
  local ready = redis.call('ZCOUNT', P .. 't', '-inf', fmt(now))
  local delayed = redis.call('ZCOUNT', P .. 't', '(' .. fmt(now), '+inf')
  local oldest = redis.call('ZRANGEBYSCORE', P .. 't', '-inf', fmt(now), 'WITHSCORES', 'LIMIT', 0, 1)
  return {
    ready, delayed,
    redis.call('ZCARD', P .. 'x:running'), redis.call('ZCARD', P .. 'x:suspended'),
    redis.call('ZCARD', P .. 'x:failed'), redis.call('ZCARD', P .. 'x:dead'),
    oldest[2] or '', fmt(now),
  }
elseif verb == 'pause' then
  redis.call('SET', P .. 'pz', fmt(now), 'NX')
  return redis.call('GET', P .. 'pz')
elseif verb == 'resume' then
  local queue = ARGV[4]
  if redis.call('DEL', P .. 'pz') == 1 then wake(queue) end
  return 1
end
return redis.error_reply('unknown verb ' .. verb)
