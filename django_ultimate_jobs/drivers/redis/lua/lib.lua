-- lib.lua: the helpers every script of the Redis driver starts with.
--
-- A script runs over the keys of ONE hash slot: KEYS[1] is the prefix of
-- that slot's keys (a queue's "uj:{q:default}:", the fleet's "uj:{f}:",
-- a lock's "uj:{l:...}:"), and every key the script touches is that
-- prefix plus a suffix, so Redis Cluster routes the call by KEYS[1] and
-- every key it builds lives on the same node. See docs/howto/redis.md for
-- the layout; the suffixes of a queue's keys:
--   j:<id>      hash   one job row (fields: see rows.py)
--   t           zset   ready/delayed rows by run_at (stats: due or not)
--   d           zset   waiting rows (ready, delayed, suspended) not yet
--                      promoted, by run_at
--   a, c        zset   promoted (due) rows without / with a concurrency
--                      key: score -priority, member "<run_at:%016d>:<id>",
--                      so ZRANGE is the claim order (priority desc, run_at, id)
--   r           zset   running rows by visible_at (a lapsed lease is due)
--   x:<state>   zset   ids by state, all scores 0 (lex order = id order)
--   fd, ff      zset   finished rows by updated_at (done; failed, dead, cancelled)
--   ik          hash   live idempotency namespace (name \0 tenant \0 key) -> id
--   runs        hash   run id -> job id (only where they differ)
--   st:<run>    hash   step name -> step JSON
--   s:<lease>   hash   the slots of a concurrency key (h<n>, f<n>, e<n>, last)
--   k           hash   counter buckets ("name \31 width \31 start \31 field")
--   pz          string the queue's pause (paused_at)
-- Times are integer microseconds since the epoch, always formatted with
-- fmt(): Lua turns a number into text with 14 digits, which would round them.

local P = KEYS[1]

local function fmt(n)
  return string.format('%d', n)
end

local function clock(arg)
  if arg ~= nil and arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- An optional string argument: '' is None, '=' .. value is value.
local function opt(arg)
  if arg == nil or arg == '' then
    return nil
  end
  return string.sub(arg, 2)
end

local function jkey(id)
  return P .. 'j:' .. id
end

local function load(id)
  local flat = redis.call('HGETALL', jkey(id))
  if #flat == 0 then
    return nil
  end
  local r = {}
  for i = 1, #flat, 2 do
    r[flat[i]] = flat[i + 1]
  end
  return r
end

local LIVE = { ready = true, delayed = true, running = true, suspended = true }
local WAITING = { ready = true, delayed = true, suspended = true }

local function member(id, at)
  return string.format('%016d', math.max(at, 0)) .. ':' .. id
end

local function avail(r)
  if r.ck then
    return P .. 'c'
  end
  return P .. 'a'
end

-- A due waiting row joins the claim order.
local function promote1(id, r)
  local m = member(id, tonumber(r.at))
  redis.call('ZADD', avail(r), fmt(-tonumber(r.pri)), m)
  redis.call('HSET', jkey(id), 'm', m)
  r.m = m
end

-- Put a waiting row where the claim and the stats find it.
local function place(id, r, now)
  if r.st == 'ready' or r.st == 'delayed' then
    redis.call('ZADD', P .. 't', r.at, id)
  end
  if tonumber(r.at) <= now then
    promote1(id, r)
  else
    redis.call('ZADD', P .. 'd', r.at, id)
  end
end

-- Take a waiting row out of every waiting structure.
local function unplace(id, r)
  if r.m then
    redis.call('ZREM', avail(r), r.m)
    redis.call('HDEL', jkey(id), 'm')
    r.m = nil
  else
    redis.call('ZREM', P .. 'd', id)
  end
  redis.call('ZREM', P .. 't', id)
end

-- Move due rows from "d" into the claim order (at most `cap` per call).
local function promote_due(now, cap)
  local due = redis.call('ZRANGEBYSCORE', P .. 'd', '-inf', fmt(now), 'LIMIT', 0, cap)
  for _, id in ipairs(due) do
    redis.call('ZREM', P .. 'd', id)
    local fields = redis.call('HMGET', jkey(id), 'at', 'pri', 'ck')
    if fields[1] then
      promote1(id, { at = fields[1], pri = fields[2], ck = fields[3] or nil })
    end
  end
end

local function setstate(id, r, state)
  if r.st ~= state then
    redis.call('ZREM', P .. 'x:' .. r.st, id)
    redis.call('ZADD', P .. 'x:' .. state, 0, id)
    r.st = state
  end
  redis.call('HSET', jkey(id), 'st', state)
end

local function nskey(r)
  return r.name .. '\0' .. (r.ten or '') .. '\0' .. r.key
end

-- Free the row's idempotency key (only if this row holds it).
local function unkey(id, r)
  if r.key then
    local nk = nskey(r)
    if redis.call('HGET', P .. 'ik', nk) == id then
      redis.call('HDEL', P .. 'ik', nk)
    end
  end
end

local function finished_set(state)
  if state == 'done' then
    return P .. 'fd'
  end
  return P .. 'ff'
end

-- The row leaves the live states: its key is freed, retention finds it.
local function finish(id, r, state, now)
  setstate(id, r, state)
  unkey(id, r)
  redis.call('ZADD', finished_set(state), fmt(now), id)
end

local function unfinish(id, r)
  redis.call('ZREM', finished_set(r.st), id)
end

local function owned(r, worker, claim)
  return r ~= nil and r.st == 'running' and r.cb == worker and r.clm == claim
end

local function append_history(id, r, e)
  local h = r.hist
  if h == nil or h == '' then
    h = '[' .. e .. ']'
  else
    h = string.sub(h, 1, -2) .. ',' .. e .. ']'
  end
  redis.call('HSET', jkey(id), 'hist', h)
  r.hist = h
end

-- Append one attempt's entry to the row's history (JSON text, "at" in us).
local function history(id, r, worker, now, err)
  local e = '{"attempt":' .. r.att .. ',"worker":'
  if worker then
    e = e .. cjson.encode(worker)
  else
    e = e .. 'null'
  end
  e = e .. ',"at":' .. fmt(now)
  if err then
    e = e .. ',"error":' .. cjson.encode(err)
  end
  append_history(id, r, e .. '}')
end

-- Append an operator's retry to the row's history (attempts restart at 1).
local function retried(id, r, now, from)
  local e = '{"event":"retried","at":' .. fmt(now)
  if from then
    e = e .. ',"from_step":' .. cjson.encode(from)
  end
  append_history(id, r, e .. '}')
end

-- A claimed row's pickup latency in ms: due (at) to claimed (cat),
-- rounded half up as the Postgres driver rounds it, never below zero.
local function pickup_of(r)
  if r.cat == nil or r.at == nil then
    return 0
  end
  local d = tonumber(r.cat) - tonumber(r.at)
  if d <= 0 then
    return 0
  end
  return math.floor((d + 500) / 1000)
end

-- Add to the job's current 1-minute counter bucket (the queue's hash: a
-- bucket is per job name and queue). pickup (ms, or nil: a burial) adds
-- one pickup sample.
local function count(name, now, field, duration, pickup)
  local start = math.floor(now / 60000000) * 60000000
  local base = name .. '\31' .. '60000' .. '\31' .. fmt(start) .. '\31'
  redis.call('HINCRBY', P .. 'k', base .. field, 1)
  if duration and duration > 0 then
    redis.call('HINCRBY', P .. 'k', base .. 'duration_ms', duration)
  end
  if pickup ~= nil then
    redis.call('HINCRBY', P .. 'k', base .. 'pickups', 1)
    if pickup > 0 then
      redis.call('HINCRBY', P .. 'k', base .. 'pickup_ms', pickup)
    end
  end
end

-- -- slots of a lease key (concurrency caps and locks) ---------------------

local function slot_rows(sk)
  local flat = redis.call('HGETALL', sk)
  local rows, last = {}, 0
  for i = 1, #flat, 2 do
    local f, v = flat[i], flat[i + 1]
    if f == 'last' then
      last = tonumber(v)
    else
      local kind, n = string.sub(f, 1, 1), tonumber(string.sub(f, 2))
      rows[n] = rows[n] or {}
      if kind == 'h' then
        rows[n].h = v
      elseif kind == 'f' then
        rows[n].f = tonumber(v)
      else
        rows[n].e = tonumber(v)
      end
    end
  end
  return rows, last
end

local function live_slots(rows, now)
  local n = 0
  for _, row in pairs(rows) do
    if row.e > now then
      n = n + 1
    end
  end
  return n
end

-- Grant the lowest free slot below `limit`; nil when the key is full.
-- `fence` is drawn from the fleet's sequence by the caller; a key never
-- hands out a fence below one it handed out before.
local function take_slot(sk, limit, holder, now, expires, fence)
  local rows, last = slot_rows(sk)
  if live_slots(rows, now) >= limit then
    return nil
  end
  for n = 0, limit - 1 do
    local row = rows[n]
    if row == nil or row.e <= now then
      local f = math.max(fence, last + 1)
      redis.call('HSET', sk, 'h' .. n, holder, 'f' .. n, fmt(f), 'e' .. n, fmt(expires), 'last', fmt(f))
      return n, f
    end
  end
  return nil
end

local function drop_slot(sk, n)
  redis.call('HDEL', sk, 'h' .. n, 'f' .. n, 'e' .. n)
  if redis.call('HLEN', sk) <= 1 and redis.call('HEXISTS', sk, 'last') == 1 then
    -- keep "last" only while the key has rows: the fleet sequence orders
    -- the next grant anyway
    redis.call('DEL', sk)
  end
end

local function renew_slots(sk, holder, now, expires)
  local rows = slot_rows(sk)
  local renewed = false
  for n, row in pairs(rows) do
    if row.h == holder and row.e > now then
      redis.call('HSET', sk, 'e' .. n, fmt(expires))
      renewed = true
    end
  end
  return renewed
end

local function release_slots(sk, holder)
  local rows = slot_rows(sk)
  for n, row in pairs(rows) do
    if row.h == holder then
      drop_slot(sk, n)
    end
  end
end

local function busy_for(sk, limit, id, now)
  local rows = slot_rows(sk)
  local suffix = ':' .. id
  local others = 0
  for _, row in pairs(rows) do
    if row.e > now and string.sub(row.h, -#suffix) ~= suffix then
      others = others + 1
    end
  end
  return others >= limit
end

local function free_slot(id, r)
  if r.ck then
    release_slots(P .. 's:' .. r.ck, r.cb .. ':' .. id)
  end
end

-- The row as a flat field/value list (what HGETALL answers).
local function flat(id)
  return redis.call('HGETALL', jkey(id))
end
