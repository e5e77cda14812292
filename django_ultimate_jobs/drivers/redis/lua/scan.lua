-- scan: the listing and the bulk verbs over one queue's rows.
-- ARGV: verb ('page' | 'count' | 'requeue' | 'remove' | 'promote'), now,
-- wake channel, limit, before?, then the filter: states (JSON list or
-- ''), name?, tenant?, id_min?, id_max?, created_from? (us),
-- created_to? (us), error_code?
local verb, now, channel = ARGV[1], clock(ARGV[2]), ARGV[3]
local limit, before = tonumber(ARGV[4]), opt(ARGV[5])
local states
if ARGV[6] ~= '' then
  states = cjson.decode(ARGV[6])
else
  states = { 'ready', 'delayed', 'running', 'suspended', 'done', 'failed', 'dead', 'cancelled' }
end
local name, tenant = opt(ARGV[7]), opt(ARGV[8])
local id_min, id_max = opt(ARGV[9]), opt(ARGV[10])
local created_from, created_to = opt(ARGV[11]), opt(ARGV[12])
local code = opt(ARGV[13])
created_from = created_from and tonumber(created_from)
created_to = created_to and tonumber(created_to)

local function error_code(text)
  if text == nil then return nil end
  local i = string.find(text, ':', 1, true)
  if i then return string.sub(text, 1, i - 1) end
  return text
end

local function matches(id)
  if not (name or tenant or created_from or created_to or code) then return true end
  local f = redis.call('HMGET', jkey(id), 'name', 'ten', 'cre', 'err')
  if name and f[1] ~= name then return false end
  if tenant and f[2] ~= tenant then return false end
  if created_from and tonumber(f[3]) < created_from then return false end
  if created_to and tonumber(f[3]) >= created_to then return false end
  if code and error_code(f[4] or nil) ~= code then return false end
  return true
end

-- The ids of the wanted states in the id range, newest (or oldest) first.
local function ids(newest_first, upto)
  local lo = id_min and ('[' .. id_min) or '-'
  local hi = id_max and ('[' .. id_max) or '+'
  if before and (id_max == nil or before <= id_max) then hi = '(' .. before end
  local found = {}
  for _, state in ipairs(states) do
    local key = P .. 'x:' .. state
    local got = 0
    local offset = 0
    while upto == nil or got < upto do
      local chunk
      if newest_first then
        chunk = redis.call('ZREVRANGEBYLEX', key, hi, lo, 'LIMIT', offset, 500)
      else
        chunk = redis.call('ZRANGEBYLEX', key, lo, hi, 'LIMIT', offset, 500)
      end
      offset = offset + #chunk
      for _, id in ipairs(chunk) do
        if matches(id) then
          found[#found + 1] = id
          got = got + 1
          if upto and got >= upto then break end
        end
      end
      if #chunk < 500 then break end
    end
  end
  table.sort(found, function(x, y)
    if newest_first then return x > y end
    return x < y
  end)
  return found
end

local function wake(queue)
  if channel ~= '' then redis.call('PUBLISH', channel, queue) end
end

if verb == 'page' then
  local out = {}
  for i, id in ipairs(ids(true, limit)) do
    if i > limit then break end
    out[#out + 1] = flat(id)
  end
  return out
elseif verb == 'count' then
  if not (name or tenant or created_from or created_to or code or id_min or id_max) then
    local n = 0
    for _, state in ipairs(states) do n = n + redis.call('ZCARD', P .. 'x:' .. state) end
    return n
  end
  return #ids(true, nil)
end

-- The bulk verbs: oldest first, at most `limit`; answers {moved, remaining}.
local eligible, order = {}, {}
for _, id in ipairs(ids(false, nil)) do
  local r = load(id)
  local ok = false
  local slot = id
  if verb == 'requeue' then
    if not LIVE[r.st] and not (r.key and redis.call('HEXISTS', P .. 'ik', nskey(r)) == 1) then
      ok = true
      if r.key then slot = nskey(r) end
    end
  elseif verb == 'remove' then
    ok = r.st ~= 'running'
  elseif verb == 'promote' then
    ok = r.st == 'delayed' or (r.st == 'ready' and tonumber(r.at) > now)
  end
  if ok and eligible[slot] == nil then
    r.id = id
    eligible[slot] = r
    order[#order + 1] = r
  end
end
local moved = math.min(#order, limit)
local queue
for i = 1, moved do
  local r = order[i]
  local id = r.id
  queue = r.queue
  if verb == 'requeue' then
    retried(id, r, now, nil)
    unfinish(id, r)
    setstate(id, r, 'ready')
    r.at = fmt(now)
    redis.call('HSET', jkey(id), 'att', '0', 'at', r.at, 'upd', fmt(now))
    redis.call('HDEL', jkey(id), 'vis', 'cb')
    if r.key then redis.call('HSET', P .. 'ik', nskey(r), id) end
    place(id, r, now)
  elseif verb == 'promote' then
    unplace(id, r)
    setstate(id, r, 'ready')
    r.at = fmt(math.min(tonumber(r.at), now))
    redis.call('HSET', jkey(id), 'at', r.at, 'upd', fmt(now))
    place(id, r, now)
  else
    if WAITING[r.st] then unplace(id, r) else unfinish(id, r) end
    redis.call('ZREM', P .. 'x:' .. r.st, id)
    if LIVE[r.st] then unkey(id, r) end
    redis.call('DEL', jkey(id), P .. 'st:' .. r.run)
    if r.run ~= id then redis.call('HDEL', P .. 'runs', r.run) end
  end
end
if queue and verb ~= 'remove' then wake(queue) end
return { moved, #order - moved }
