-- steps: a run's step records (in its queue's slot, beside the job row).
-- ARGV[1] is the verb:
--   put   job id ('' = unfenced), worker, claim, run, name, started us, json
--         -> 1, or 0 when the fence failed (nothing written)
--   list  run -> flat name/value list
--   wake  now, channel, job id, step, event, key? -> 'woke', 'due', 'other'
--         (waits for another key) or 'stale' (no longer waits on it)
--   waiting now, job id, step -> the step's value while the run is parked
--   probe run -> 1 when this queue holds the run (a job or steps)
local verb = ARGV[1]
if verb == 'put' then
  local id = ARGV[2]
  if id ~= '' and not owned(load(id), ARGV[3], ARGV[4]) then
    return 0
  end
  local sk = P .. 'st:' .. ARGV[5]
  local earlier = redis.call('HGET', sk, ARGV[6])
  local attempts = 1
  if earlier then attempts = tonumber(string.match(earlier, '^(%d+)|')) + 1 end
  redis.call('HSET', sk, ARGV[6], fmt(attempts) .. '|' .. ARGV[7] .. '|' .. ARGV[8])
  return 1
elseif verb == 'list' then
  return redis.call('HGETALL', P .. 'st:' .. ARGV[2])
elseif verb == 'probe' then
  local run = ARGV[2]
  if redis.call('EXISTS', jkey(run)) == 1 or redis.call('HEXISTS', P .. 'runs', run) == 1
    or redis.call('EXISTS', P .. 'st:' .. run) == 1 then
    return 1
  end
  return 0
elseif verb == 'wake' then
  -- a publish (or a parked wait) makes a run parked on `step` due now
  local now, channel, id, step = clock(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
  local event, key = ARGV[6], opt(ARGV[7])
  local r = load(id)
  if r == nil or r.st ~= 'suspended' then return 'stale' end
  local value = redis.call('HGET', P .. 'st:' .. r.run, step)
  if value == nil or value == false then return 'stale' end
  local record = cjson.decode(string.match(value, '^%d+|%-?%d+|(.*)$'))
  if record.status ~= 'waiting' or record.event ~= event then return 'stale' end
  local wanted = record.correlation_key
  if wanted ~= nil and wanted ~= cjson.null and wanted ~= key then
    return 'other'
  end
  if tonumber(r.at) <= now then return 'due' end
  unplace(id, r)
  r.at = fmt(now)
  redis.call('HSET', jkey(id), 'at', r.at)
  place(id, r, now)
  if channel ~= '' then redis.call('PUBLISH', channel, r.queue) end
  return 'woke'
elseif verb == 'waiting' then
  -- the step a parked run waits on, while the run is parked and not due
  local now, id, step = clock(ARGV[2]), ARGV[3], ARGV[4]
  local r = load(id)
  if r == nil or r.st ~= 'suspended' or tonumber(r.at) <= now then return false end
  return redis.call('HGET', P .. 'st:' .. r.run, step)
end
return redis.error_reply('unknown verb ' .. verb)
