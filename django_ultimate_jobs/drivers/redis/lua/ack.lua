-- ack: settle successful attempts of one queue, each fenced on its claim.
-- ARGV: now, count, then per ack: id, worker, claim, counted (1/0),
-- duration_ms, result? ('' = none, '=' .. JSON).
local now = clock(ARGV[1])
local n = tonumber(ARGV[2])
local landed = {}
for i = 0, n - 1 do
  local a = 2 + i * 6
  local id = ARGV[a + 1]
  local r = load(id)
  if owned(r, ARGV[a + 2], ARGV[a + 3]) then
    free_slot(id, r)
    history(id, r, r.cb, now, nil)
    redis.call('ZREM', P .. 'r', id)
    redis.call('HDEL', jkey(id), 'vis', 'cb')
    local result = opt(ARGV[a + 6])
    if result then
      redis.call('HSET', jkey(id), 'res', result)
    else
      redis.call('HDEL', jkey(id), 'res')
    end
    redis.call('HSET', jkey(id), 'upd', fmt(now))
    finish(id, r, 'done', now)
    landed[id] = true
    if ARGV[a + 4] == '1' then
      count(r.name, now, 'done', tonumber(ARGV[a + 5]), pickup_of(r))
    end
  end
end
local out = {}
for i = 0, n - 1 do
  out[#out + 1] = landed[ARGV[2 + i * 6 + 1]] and 1 or 0
end
return out
