-- heartbeat: extend running leases of one queue (and their slots).
-- ARGV: now, visibility_ms, count, then per lease: id, worker? , claim?
-- ('' = any claim). Answers per lease: 0 missed, 1 renewed, 2 renewed but
-- its slot was lost.
local now = clock(ARGV[1])
local lease = now + tonumber(ARGV[2]) * 1000
local n = tonumber(ARGV[3])
local out = {}
for i = 0, n - 1 do
  local a = 3 + i * 3
  local id, worker, claim = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local r = load(id)
  local answer = 0
  if r and r.st == 'running' and (worker == '' or (r.cb == worker and r.clm == claim)) then
    redis.call('HSET', jkey(id), 'vis', fmt(lease))
    redis.call('ZADD', P .. 'r', fmt(lease), id)
    answer = 1
    if r.ck and not renew_slots(P .. 's:' .. r.ck, r.cb .. ':' .. id, now, lease) then
      answer = 2
    end
  end
  out[#out + 1] = answer
end
return out
