-- claim: claim due rows of one queue; re-take lapsed leases; bury lapsed
-- final attempts (no reaper). The memory driver's claim, step for step.
-- ARGV: now, limit, worker, visibility_ms, retake, start_now, capped,
-- uncapped (1/0), skip tenants (JSON; null = rows without a tenant),
-- refuse_busy names (JSON), drop_exhausted names (JSON), first fence,
-- reclaimed text, unstarted text, final text.
local now = clock(ARGV[1])
local limit = tonumber(ARGV[2])
local worker = ARGV[3]
local lease = now + tonumber(ARGV[4]) * 1000
local retake = tonumber(ARGV[5])
local start_now = tonumber(ARGV[6])
local capped = tonumber(ARGV[7])
local uncapped = ARGV[8] == '1'
local skip, skip_none = {}, false
for _, t in ipairs(cjson.decode(ARGV[9])) do
  if t == cjson.null then skip_none = true else skip[t] = true end
end
local refuse, drop = {}, {}
for _, n in ipairs(cjson.decode(ARGV[10])) do refuse[n] = true end
for _, n in ipairs(cjson.decode(ARGV[11])) do drop[n] = true end
local fence = tonumber(ARGV[12])
local RECLAIMED, UNSTARTED, FINAL = ARGV[13], ARGV[14], ARGV[15]
local MAX_SCAN = 10000

if limit <= 0 or redis.call('EXISTS', P .. 'pz') == 1 then
  return {}
end
promote_due(now, 10000)

local function exhausted(r)
  return r.stc == r.clm and tonumber(r.att) >= tonumber(r.max)
end

-- Lapsed leases, in claim order, at most `retake` of them.
local lapsed = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'r', '-inf', fmt(now), 'LIMIT', 0, 1000)) do
  local r = load(id)
  local wanted
  if exhausted(r) then
    wanted = uncapped
  elseif r.ck then
    wanted = capped > 0
  else
    wanted = uncapped
  end
  if wanted then
    r.id = id
    r.score = -tonumber(r.pri)
    r.mem = member(id, tonumber(r.at))
    lapsed[#lapsed + 1] = r
  end
end
table.sort(lapsed, function(x, y)
  if x.score ~= y.score then return x.score < y.score end
  return x.mem < y.mem
end)
if retake < 0 then retake = limit end

-- A promoted zset read in claim order, rows of skipped tenants passed over.
local function stream(key, on)
  -- `fetched` entries read so far, `removed` of them claimed (and so gone
  -- from the zset): the next chunk starts at rank fetched - removed.
  return { key = key, fetched = 0, removed = 0, buf = {}, i = 1, done = not on, scanned = 0 }
end
local CHUNK = math.min(limit * 2 + 16, 1000)
local function peek(s)
  while true do
    if s.i > #s.buf then
      if s.done then return nil end
      local from = s.fetched - s.removed
      s.buf = redis.call('ZRANGE', s.key, from, from + CHUNK - 1, 'WITHSCORES')
      s.fetched = s.fetched + #s.buf / 2
      s.i = 1
      if #s.buf < 2 * CHUNK then s.done = true end
      if #s.buf == 0 then return nil end
    end
    local m = s.buf[s.i]
    local id = string.sub(m, 18)
    local pass = true
    if skip_none or next(skip) ~= nil then
      local ten = redis.call('HGET', jkey(id), 'ten')
      if ten then pass = not skip[ten] else pass = not skip_none end
    end
    if pass then
      return tonumber(s.buf[s.i + 1]), m, id
    end
    s.i = s.i + 2
    s.scanned = s.scanned + 1
    if s.scanned > MAX_SCAN then s.done = true; s.buf = {} end
  end
end
local function advance(s)
  s.i = s.i + 2
  s.scanned = s.scanned + 1
  if s.scanned > MAX_SCAN then s.done = true; s.buf = {} end
end

local A = stream(P .. 'a', uncapped)
local C = stream(P .. 'c', capped > 0)
local li = 1

local out = {}
local taken, heads, slots_taken = 0, 0, 0
while taken < limit do
  -- the next row in claim order among the three sources
  local best, bscore, bmem, bid = nil, nil, nil, nil
  if li <= #lapsed and li <= retake then
    best, bscore, bmem, bid = 'L', lapsed[li].score, lapsed[li].mem, lapsed[li].id
  end
  for _, s in ipairs({ A, C }) do
    local sc, m, id = peek(s)
    if sc and (best == nil or sc < bscore or (sc == bscore and m < bmem)) then
      best, bscore, bmem, bid = s, sc, m, id
    end
  end
  if best == nil then break end
  local r
  local retaken = best == 'L'
  if retaken then
    r = lapsed[li]
    li = li + 1
  else
    advance(best)
    r = load(bid)
  end
  local id = bid
  local proven = retaken and r.stc == r.clm
  if proven and tonumber(r.att) >= tonumber(r.max) then
    -- the final attempt lapsed: buried, never handed out again
    local state = drop[r.name] and 'failed' or 'dead'
    history(id, r, r.cb, now, FINAL)
    redis.call('ZREM', P .. 'r', id)
    redis.call('HDEL', jkey(id), 'vis', 'cb', 'stk')
    redis.call('HSET', jkey(id), 'err', FINAL, 'upd', fmt(now))
    finish(id, r, state, now)
    count(r.name, now, state, 0)
    taken = taken + 1
    local row = flat(id)
    table.insert(row, 1, 'b')
    out[#out + 1] = row
  else
    local busy, skipped = false, false
    if r.ck then
      if slots_taken >= capped then
        skipped = true
      else
        local n, f = take_slot(P .. 's:' .. r.ck, tonumber(r.cl or '1'), worker .. ':' .. id, now, lease, fence)
        if n == nil then
          busy = (not retaken) and refuse[r.name] == true
            and busy_for(P .. 's:' .. r.ck, tonumber(r.cl or '1'), id, now)
          skipped = not busy
        else
          fence = f + 1
          slots_taken = slots_taken + 1
        end
      end
    end
    if not skipped then
      if retaken then
        history(id, r, r.cb, now, proven and RECLAIMED or UNSTARTED)
      else
        unplace(id, r)
        best.removed = best.removed + 1
      end
      setstate(id, r, 'running')
      local att = tonumber(r.att)
      if proven or not retaken then att = att + 1 end
      local clm = tonumber(r.clm) + 1
      local stc = r.stc
      if not retaken and not busy and heads < start_now then
        heads = heads + 1
        stc = fmt(clm)
      end
      redis.call('HSET', jkey(id), 'att', fmt(att), 'clm', fmt(clm), 'stc', stc,
        'cb', worker, 'cat', fmt(now), 'upd', fmt(now), 'vis', fmt(lease))
      redis.call('ZADD', P .. 'r', fmt(lease), id)
      taken = taken + 1
      local row = flat(id)
      table.insert(row, 1, busy and '1' or '0')
      table.insert(row, 1, stc == fmt(clm) and '1' or '0')
      table.insert(row, 1, retaken and '1' or '0')
      table.insert(row, 1, 'c')
      out[#out + 1] = row
    end
  end
end
return out
