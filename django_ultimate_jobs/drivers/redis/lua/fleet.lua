-- fleet: what belongs to no queue, in the fleet's slot ("uj:{f}:"):
--   queues     set    every queue that ever held a row (the listings walk it)
--   pin        hash   job name -> the one queue its keyed or capped rows use
--   lk         hash   lease key -> where its slots live ("q:<queue>" or "l")
--   fence      string the fence sequence of every grant
--   wk         hash   worker id -> JSON registry row
--   ct:<task>  hash   a cron task (cron, tz, wm, last, fired, next, upd)
--   cn         set    cron task names
--   cf         hash   task -> a fire whose jobs are being inserted (JSON)
--   cp         hash   task -> paused_at
-- ARGV[1] is the verb, ARGV[2] the time:
--   announce id, json, ttl_ms        refresh id, ttl_ms       forget id
--   workers                          sync name, cron, tz, wm, next? (per task)
--   fire name, expected, wm, occurrence, next?, marker
--   tasks                            pause task / resume task / paused
local verb, now = ARGV[1], clock(ARGV[2])

if verb == 'announce' or verb == 'refresh' then
  local id = ARGV[3]
  local known = redis.call('HGET', P .. 'wk', id)
  local row
  if verb == 'announce' then
    row = cjson.decode(ARGV[4])
    if known then
      local old = cjson.decode(known)
      row.host, row.pid, row.queues = old.host, old.pid, old.queues
      row.concurrency, row.started_at = old.concurrency, old.started_at
    else
      row.started_at = fmt(now)
    end
  else
    if not known then return 0 end
    row = cjson.decode(known)
    row.in_flight = {}
  end
  local ttl = tonumber(verb == 'announce' and ARGV[5] or ARGV[4])
  row.heartbeat_at = fmt(now)
  row.expires_at = fmt(now + ttl * 1000)
  redis.call('HSET', P .. 'wk', id, cjson.encode(row))
  return 1
elseif verb == 'forget' then
  return redis.call('HDEL', P .. 'wk', ARGV[3])
elseif verb == 'workers' then
  local out = {}
  local all = redis.call('HGETALL', P .. 'wk')
  for i = 1, #all, 2 do
    local row = cjson.decode(all[i + 1])
    if tonumber(row.expires_at) <= now then
      redis.call('HDEL', P .. 'wk', all[i])
    else
      out[#out + 1] = all[i + 1]
    end
  end
  return out
elseif verb == 'sync' then
  local out = {}
  for i = 3, #ARGV, 5 do
    local name = ARGV[i]
    local tk = P .. 'ct:' .. name
    local f = redis.call('HMGET', tk, 'cron', 'tz', 'wm')
    if not f[3] then
      redis.call('HSET', tk, 'cron', ARGV[i + 1], 'tz', ARGV[i + 2], 'wm', ARGV[i + 3], 'upd', fmt(now))
      if opt(ARGV[i + 4]) then redis.call('HSET', tk, 'next', opt(ARGV[i + 4])) end
      redis.call('SADD', P .. 'cn', name)
      out[#out + 1] = ARGV[i + 3]
    else
      if f[1] ~= ARGV[i + 1] or f[2] ~= ARGV[i + 2] then
        redis.call('HSET', tk, 'cron', ARGV[i + 1], 'tz', ARGV[i + 2], 'upd', fmt(now))
        if opt(ARGV[i + 4]) then
          redis.call('HSET', tk, 'next', opt(ARGV[i + 4]))
        else
          redis.call('HDEL', tk, 'next')
        end
      end
      out[#out + 1] = f[3]
    end
  end
  return out
elseif verb == 'fire' then
  local tk = P .. 'ct:' .. ARGV[3]
  local wm = redis.call('HGET', tk, 'wm')
  if not wm or wm ~= ARGV[4] or tonumber(wm) >= tonumber(ARGV[6]) then return 0 end
  redis.call('HSET', tk, 'wm', ARGV[5], 'last', ARGV[6], 'fired', fmt(now), 'upd', fmt(now))
  if opt(ARGV[7]) then redis.call('HSET', tk, 'next', opt(ARGV[7])) else redis.call('HDEL', tk, 'next') end
  redis.call('HSET', P .. 'cf', ARGV[3], ARGV[8])
  return 1
elseif verb == 'fired' then
  if redis.call('HGET', P .. 'cf', ARGV[3]) == ARGV[4] then redis.call('HDEL', P .. 'cf', ARGV[3]) end
  return 1
elseif verb == 'tasks' then
  local out = {}
  for _, name in ipairs(redis.call('SMEMBERS', P .. 'cn')) do
    local row = redis.call('HGETALL', P .. 'ct:' .. name)
    table.insert(row, 1, name)
    row[#row + 1] = 'paused'
    row[#row + 1] = redis.call('HGET', P .. 'cp', name) or ''
    out[#out + 1] = row
  end
  return out
elseif verb == 'pause' then
  redis.call('HSETNX', P .. 'cp', ARGV[3], fmt(now))
  return redis.call('HGETALL', P .. 'cp')
elseif verb == 'resume' then
  redis.call('HDEL', P .. 'cp', ARGV[3])
  return redis.call('HGETALL', P .. 'cp')
elseif verb == 'paused' then
  return redis.call('HGETALL', P .. 'cp')
end
return redis.error_reply('unknown verb ' .. verb)
