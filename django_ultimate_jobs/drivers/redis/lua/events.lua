-- events: published events, in the events' own slot ("uj:{e}:").
--   seq          counter   publish order
--   e:<seq>      hash      one event: id, name, payload, key, pub, exp
--   n:<name>     zset      the event's seqs (score = seq)
--   x            zset      seqs by expiry
--   w:<name>     set       runs that wait on the event: "queue \n id \n step"
--   t:<id>       set       the waits that took the event: "run \n step"
-- ARGV[1] is the verb:
--   publish now, id, name, payload, key?, ttl_ms -> {seq, pub, exp, waiters...}
--   find    now, name, key?, snapshot, started us, cursor us?, cursor id?
--   mark    now -> {seq, now}
--   wait    name, entry   /  unwait name, entry
--   purge   now, limit
--   took    event id, entry   (a completed wait records the event it took)
--   list    now, name?, limit -> {id, name, payload, key, pub, exp, n, entries...}...
local verb = ARGV[1]
if verb == 'publish' then
  local now = clock(ARGV[2])
  local seq = redis.call('INCR', P .. 'seq')
  local pub = math.floor(now / 1000) * 1000
  local exp = now + tonumber(ARGV[7]) * 1000
  local fields = { 'id', ARGV[3], 'name', ARGV[4], 'payload', ARGV[5], 'pub', fmt(pub), 'exp', fmt(exp) }
  local key = opt(ARGV[6])
  if key then
    fields[#fields + 1] = 'key'
    fields[#fields + 1] = key
  end
  redis.call('HSET', P .. 'e:' .. seq, unpack(fields))
  redis.call('ZADD', P .. 'n:' .. ARGV[4], seq, seq)
  redis.call('ZADD', P .. 'x', fmt(exp), seq)
  local out = { seq, fmt(pub), fmt(exp) }
  for _, w in ipairs(redis.call('SMEMBERS', P .. 'w:' .. ARGV[4])) do
    out[#out + 1] = w
  end
  return out
elseif verb == 'find' then
  local now = clock(ARGV[2])
  local name, key = ARGV[3], opt(ARGV[4])
  local snapshot, started = tonumber(ARGV[5]), tonumber(ARGV[6])
  local cursor_at, cursor_id = opt(ARGV[7]), opt(ARGV[8])
  cursor_at = cursor_at and tonumber(cursor_at)
  for _, seq in ipairs(redis.call('ZRANGE', P .. 'n:' .. name, 0, -1)) do
    local f = redis.call('HMGET', P .. 'e:' .. seq, 'id', 'payload', 'key', 'pub', 'exp')
    local pub, exp = tonumber(f[4]), tonumber(f[5])
    local ok = f[1] and exp > now
    if ok and key and f[3] ~= key then ok = false end
    if ok and tonumber(seq) <= snapshot and pub < started then ok = false end
    if ok and cursor_at and (pub < cursor_at or (pub == cursor_at and f[1] <= (cursor_id or ''))) then
      ok = false
    end
    if ok then
      return { f[1], f[2], f[3] or '', f[4], f[5] }
    end
  end
  return false
elseif verb == 'mark' then
  local now = clock(ARGV[2])
  return { redis.call('GET', P .. 'seq') or '0', fmt(now) }
elseif verb == 'wait' then
  return redis.call('SADD', P .. 'w:' .. ARGV[2], ARGV[3])
elseif verb == 'unwait' then
  return redis.call('SREM', P .. 'w:' .. ARGV[2], ARGV[3])
elseif verb == 'purge' then
  local now, limit = clock(ARGV[2]), tonumber(ARGV[3])
  local gone = redis.call('ZRANGEBYSCORE', P .. 'x', '-inf', fmt(now), 'LIMIT', 0, limit)
  for _, seq in ipairs(gone) do
    local f = redis.call('HMGET', P .. 'e:' .. seq, 'name', 'id')
    if f[1] then redis.call('ZREM', P .. 'n:' .. f[1], seq) end
    if f[2] then redis.call('DEL', P .. 't:' .. f[2]) end
    redis.call('DEL', P .. 'e:' .. seq)
    redis.call('ZREM', P .. 'x', seq)
  end
  return #gone
elseif verb == 'took' then
  return redis.call('SADD', P .. 't:' .. ARGV[2], ARGV[3])
elseif verb == 'list' then
  -- Newest first: by sequence, of one name (its zset) or of all (the
  -- expiry zset holds every stored event; sorted here, the admin's page).
  local name, limit = opt(ARGV[3]), tonumber(ARGV[4])
  local seqs
  if name then
    seqs = redis.call('ZREVRANGE', P .. 'n:' .. name, 0, limit - 1)
  else
    seqs = redis.call('ZRANGE', P .. 'x', 0, -1)
    table.sort(seqs, function(a, b) return tonumber(a) > tonumber(b) end)
  end
  local out = {}
  for i = 1, math.min(#seqs, limit) do
    local f = redis.call('HMGET', P .. 'e:' .. seqs[i], 'id', 'name', 'payload', 'key', 'pub', 'exp')
    if f[1] then
      local took = redis.call('SMEMBERS', P .. 't:' .. f[1])
      out[#out + 1] = { f[1], f[2], f[3], f[4] or '', f[5], f[6], took }
    end
  end
  return out
end
return redis.error_reply('unknown verb ' .. verb)
