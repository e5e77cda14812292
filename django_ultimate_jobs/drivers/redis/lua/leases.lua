-- leases: the slots of one lease key ("s:<key>" under KEYS[1]): a job's
-- concurrency cap in its queue's slot, a lock or the leader lease in a
-- slot of its own. ARGV[1] is the verb, ARGV[2] the time, ARGV[3] the key:
--   acquire limit, ttl_ms, holder, fence -> {slot, fence, expires} or false
--   renew   slot, holder, ttl_ms -> 1/0       release slot, holder -> 1/0
--   rows    -> {now, {slot, holder, fence, expires}, ...} in slot order
--   evict   -> the rows, deleted
--   lead    holder, ttl_ms -> 1/0 (slot 0; the fence counts takeovers)
--   resign  holder
--   purge   before, limit -> how many lapsed rows were deleted
local verb, now = ARGV[1], clock(ARGV[2])
local sk = P .. 's:' .. ARGV[3]

local function sorted_rows()
  local rows = slot_rows(sk)
  local slots = {}
  for n in pairs(rows) do slots[#slots + 1] = n end
  table.sort(slots)
  local out = { fmt(now) }
  for _, n in ipairs(slots) do
    local row = rows[n]
    out[#out + 1] = { n, row.h, fmt(row.f), fmt(row.e) }
  end
  return out
end

if verb == 'acquire' then
  local ttl = tonumber(ARGV[5])
  local n, f = take_slot(sk, tonumber(ARGV[4]), ARGV[6], now, now + ttl * 1000, tonumber(ARGV[7]))
  if n == nil then return false end
  return { n, fmt(f), fmt(now + ttl * 1000) }
elseif verb == 'renew' then
  local n = ARGV[4]
  local f = redis.call('HMGET', sk, 'h' .. n, 'e' .. n)
  if f[1] ~= ARGV[5] or tonumber(f[2]) <= now then return 0 end
  redis.call('HSET', sk, 'e' .. n, fmt(now + tonumber(ARGV[6]) * 1000))
  return 1
elseif verb == 'release' then
  local n = ARGV[4]
  if redis.call('HGET', sk, 'h' .. n) ~= ARGV[5] then return 0 end
  drop_slot(sk, tonumber(n))
  return 1
elseif verb == 'rows' then
  return sorted_rows()
elseif verb == 'evict' then
  local out = sorted_rows()
  redis.call('DEL', sk)
  return out
elseif verb == 'lead' then
  local holder, ttl = ARGV[4], tonumber(ARGV[5])
  local f = redis.call('HMGET', sk, 'h0', 'f0', 'e0')
  if f[1] and f[1] ~= holder and tonumber(f[3]) > now then return 0 end
  local fence = 1
  if f[1] then
    fence = tonumber(f[2])
    if f[1] ~= holder then fence = fence + 1 end
  end
  redis.call('HSET', sk, 'h0', holder, 'f0', fmt(fence), 'e0', fmt(now + ttl * 1000))
  return 1
elseif verb == 'resign' then
  if redis.call('HGET', sk, 'h0') == ARGV[4] then drop_slot(sk, 0) end
  return 1
elseif verb == 'purge' then
  local before, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
  local rows = slot_rows(sk)
  local gone = 0
  for n, row in pairs(rows) do
    if gone < limit and row.e < before then
      drop_slot(sk, n)
      gone = gone + 1
    end
  end
  return gone
end
return redis.error_reply('unknown verb ' .. verb)
