-- nack: hand one attempt back, fenced on its claim; the new state is
-- nack_state's (dead > failed > suspended > ready).
-- ARGV: now, id, worker, claim, state, counts (1/0), run_at? (us),
-- delay_ms, error?, stack?, duration_ms.
local now = clock(ARGV[1])
local id = ARGV[2]
local r = load(id)
if not owned(r, ARGV[3], ARGV[4]) then
  return 0
end
local state = ARGV[5]
local counts = ARGV[6] == '1'
-- measured before the hand-back moves run_at
local pickup = pickup_of(r)
free_slot(id, r)
if counts then
  history(id, r, r.cb, now, opt(ARGV[9]))
end
redis.call('ZREM', P .. 'r', id)
local at = opt(ARGV[7])
at = at and tonumber(at) or now + tonumber(ARGV[8]) * 1000
local att = tonumber(r.att)
if not counts then att = math.max(att - 1, 0) end
redis.call('HDEL', jkey(id), 'vis', 'cb')
local err = opt(ARGV[9])
if err then
  redis.call('HSET', jkey(id), 'err', err)
  local stack = opt(ARGV[10])
  if stack then
    redis.call('HSET', jkey(id), 'stk', stack)
  else
    redis.call('HDEL', jkey(id), 'stk')
  end
end
redis.call('HSET', jkey(id), 'att', fmt(att), 'at', fmt(at), 'upd', fmt(now))
r.at = fmt(at)
local duration = tonumber(ARGV[11])
if state == 'dead' or state == 'failed' then
  finish(id, r, state, now)
  count(r.name, now, state, duration, pickup)
else
  setstate(id, r, state)
  place(id, r, now)
  if state == 'ready' and counts then
    count(r.name, now, 'retried', duration, pickup)
  end
end
return 1
