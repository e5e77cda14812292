-- counters: fold or drop one queue's counter buckets ("k": fields
-- "name \31 width \31 start us \31 field"). ARGV: verb ('rollup' | 'drop'),
-- now. rollup folds 1-minute buckets past 24 h into 5-minute ones, 5-minute
-- past 7 days into hours and drops hours past 30 days, every tier decided
-- from one snapshot (as counter_rollup); drop deletes hours past 30 days.
-- Answers how many buckets moved.
local verb, now = ARGV[1], clock(ARGV[2])
local MIN, FIVE, HOUR = 60000, 300000, 3600000
local DAY = 86400000000
local all = redis.call('HGETALL', P .. 'k')
local buckets, order = {}, {}
for i = 1, #all, 2 do
  local name, width, start, field = string.match(all[i], '^(.*)\31(%d+)\31(%-?%d+)\31(.*)$')
  local b = name .. '\31' .. width .. '\31' .. start
  if not buckets[b] then
    buckets[b] = { name = name, width = tonumber(width), start = tonumber(start), counts = {} }
    order[#order + 1] = b
  end
  buckets[b].counts[field] = tonumber(all[i + 1])
end
local function move(b, width, start)
  for field, n in pairs(b.counts) do
    redis.call('HDEL', P .. 'k', b.name .. '\31' .. fmt(b.width) .. '\31' .. fmt(b.start) .. '\31' .. field)
    if width then
      redis.call('HINCRBY', P .. 'k', b.name .. '\31' .. fmt(width) .. '\31' .. fmt(start) .. '\31' .. field, n)
    end
  end
end
local moved = 0
for _, key in ipairs(order) do
  local b = buckets[key]
  if verb == 'rollup' and b.width == MIN and b.start < now - DAY then
    move(b, FIVE, b.start - b.start % (FIVE * 1000))
    moved = moved + 1
  elseif verb == 'rollup' and b.width == FIVE and b.start < now - 7 * DAY then
    move(b, HOUR, b.start - b.start % (HOUR * 1000))
    moved = moved + 1
  elseif b.width == HOUR and b.start < now - 30 * DAY then
    move(b, nil, nil)
    moved = moved + 1
  end
end
return moved
