-- fenced: one small write of a running attempt, fenced on its claim.
-- ARGV: id, worker, claim, what ('start' | 'progress'), value.
local id = ARGV[1]
local r = load(id)
if not owned(r, ARGV[2], ARGV[3]) then
  return 0
end
if ARGV[4] == 'start' then
  redis.call('HSET', jkey(id), 'stc', r.clm)
else
  redis.call('HSET', jkey(id), 'prog', ARGV[5])
end
return 1
