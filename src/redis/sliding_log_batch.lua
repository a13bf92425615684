-- floodgate: a batch of sliding log decisions, decided in order exactly as sliding_log.lua would
-- decide them one call after another at the same instant (the server's TIME read once for the
-- call), but reading each log once: a key's sequence, newest score and count in the window are
-- read at its first decision; its admissions are counted here and written at once (one trim,
-- one INCRBY, the entries' ZADDs, the expiries) before its first denial, which reads the log as
-- sliding_log.lua's denial does, or at the end. A denial writes nothing but the TTL repairs
-- sliding_log.lua makes; a later denial of the same n on the same key, with no admission between,
-- is the same answer and reads nothing again.
-- Stored values are read with exact(): exact.lua, prepended to this script.
-- Format: each_batch.lua's (RedisBackend::eval_batch). KEYS: each limiter key's two keys once
-- (the sorted set, the sequence). ARGV: per (2), the four shared arguments (limit, window in us,
-- the slot of n, 0), the slot of n (3), the n's, the earliest deadline, the deadlines' distances,
-- the decisions' limiter key indexes when KEYS holds more than one.
-- Reply: the server's time; five fields per decision ({allowed, limit, remaining,
-- retry_after_us, reset_after_us}; allowed = 2: past its deadline, nothing changed; 3: an error,
-- the message's index); the error messages.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local per = ARGV[1] + 0
local limit = ARGV[2] + 0
local window = ARGV[3] + 0
local out = {now}
local errors = {}
local d = 0
local uniform_n = not ARGV[7]:find(' ', 1, true) and ARGV[7] + 0
local next_n = not uniform_n and ARGV[7]:gmatch('%d+')
local earliest = ARGV[8] + 0
local check = earliest > 0 and now > earliest
local next_g = #KEYS > per and ARGV[10]:gmatch('%d+')

local function int(x) return string.format('%d', x) end
local since = '(' .. int(now - window)

-- Key g's state, read at its first decision: {seq_bad (the sequence is not an exact integer),
-- top_bad (the newest score is not an exact time), last (the sequence, 0 if none), newest (the newest entry's score, nil if none), count (entries in the window, this batch's
-- admissions included), pending (permits admitted here not yet written), dirty (an admission
-- not yet written, n = 0 included), denied (n -> the reply of a denial since the last
-- admission)}. A read that raises (a key of another type) keeps nothing: the next decision on
-- the key reads it again, as a call of its own would.
local state = {}
local function read(g)
  local log, seq = KEYS[g * 2 - 1], KEYS[g * 2]
  local stored_seq = redis.call('GET', seq)
  local top = redis.call('ZRANGE', log, '-1', '-1', 'WITHSCORES')[2]
  local newest = tonumber(top)
  local last = stored_seq and exact(stored_seq)
  local s = {seq_bad = stored_seq and not last, last = last or 0, newest = newest, count = 0,
             pending = 0, dirty = false, denied = {}}
  s.top_bad = top and not (newest and newest == math.floor(newest)
      and newest > -2^53 and newest + window < 2^53)
  if not s.seq_bad and not s.top_bad then s.count = redis.call('ZCOUNT', log, since, '+inf') end
  return s
end

-- Writes key g's admissions as sliding_log.lua's admissions would have left the log: expired
-- entries trimmed, one entry per permit scored now and named by the sequence, the log and the
-- sequence living until the newest entry leaves the window.
local function flush(g, s)
  local log, seq = KEYS[g * 2 - 1], KEYS[g * 2]
  local n = s.pending
  s.pending = 0
  s.dirty = false
  redis.call('ZREMRANGEBYSCORE', log, '-inf', int(now - window))
  local last = redis.call('INCRBY', seq, int(n))
  local score = int(now)
  local entries = {}
  for i = last - n + 1, last do
    entries[#entries + 1] = score
    entries[#entries + 1] = score .. ':' .. int(i)
    if #entries >= 1000 then
      redis.call('ZADD', log, unpack(entries))
      entries = {}
    end
  end
  if #entries > 0 then redis.call('ZADD', log, unpack(entries)) end
  -- As sliding_log.lua: until now + window, or an entry's scored after now + window (the
  -- clock stepped back). s.newest stays as read: the entries added here are scored now, which
  -- lives_to counts already.
  local lives_to = now
  if s.newest and s.newest > now then lives_to = s.newest end
  local expire_at = int(math.ceil((lives_to + window) / 1000))
  redis.call('PEXPIREAT', log, expire_at)
  redis.call('PEXPIREAT', seq, expire_at)
  s.last = last
end

-- A denial of n on key g: sliding_log.lua's, on the log as it is now (admissions written).
local function deny(g, s, n)
  local log, seq = KEYS[g * 2 - 1], KEYS[g * 2]
  local function leaves(entry) return tonumber(entry[2]) + window - now end
  local needed = s.count + n - limit
  local retry = window
  local reset = 0
  local blocking = redis.call('ZRANGEBYSCORE', log, since, '+inf', 'WITHSCORES', 'LIMIT',
    int(needed - 1), '1')
  if #blocking == 2 then retry = leaves(blocking) end
  local newest = redis.call('ZREVRANGEBYSCORE', log, '+inf', since, 'WITHSCORES', 'LIMIT', '0', '1')
  if #newest == 2 then
    reset = leaves(newest)
    if redis.call('PTTL', log) == -1 then
      redis.call('PEXPIREAT', log, int(math.ceil((tonumber(newest[2]) + window) / 1000)))
    end
  end
  if redis.call('PTTL', seq) == -1 then redis.call('PEXPIRE', seq, int(window / 1000)) end
  local remaining = limit - s.count
  if remaining < 0 then remaining = 0 end
  return {0, limit, remaining, retry, reset}
end

local function decide(g, n, deadline)
  -- Past the caller's deadline (server clock): refused, nothing changed.
  if deadline > 0 and now > deadline then return {2, 0, 0, 0, 0} end
  local s = state[g]
  if not s then
    s = read(g)
    state[g] = s
  end
  -- sliding_log.lua's checks, in its order: the sequence's next n names below 2^53 (past that
  -- Lua's numbers cannot count them; with no sequence stored, last is 0 and n far below), the
  -- newest score an exact time.
  if s.seq_bad or not (s.last + s.pending + n < 2^53) then
    return nil, 'floodgate: ' .. KEYS[g * 2] .. ' does not hold a sliding log sequence'
  end
  if s.top_bad then return nil, 'floodgate: ' .. KEYS[g * 2 - 1] .. ' does not hold a sliding log' end
  if s.count + n <= limit then
    s.count = s.count + n
    s.pending = s.pending + n
    s.dirty = true
    s.denied = {}
    return {1, limit, limit - s.count, 0, window}
  end
  local r = s.denied[n]
  if r then return r end
  if s.dirty then flush(g, s) end
  r = deny(g, s, n)
  s.denied[n] = r
  return r
end

for distance in ARGV[9]:gmatch('%d+') do
  local g = next_g and next_g() + 0 or 1
  local n = next_n and next_n() + 0 or uniform_n
  local deadline = 0
  if check and distance ~= '0' then deadline = earliest + distance - 1 end
  local ok, r, message = pcall(decide, g, n, deadline)
  if not ok then
    errors[#errors + 1] = type(r) == 'table' and r.err or tostring(r)
    r = {3, #errors, 0, 0, 0}
  elseif not r then
    errors[#errors + 1] = message
    r = {3, #errors, 0, 0, 0}
  end
  for f = 1, 5 do out[1 + d * 5 + f] = r[f] end
  d = d + 1
end
-- Admissions not yet written (no denial followed them on their key). A write that raises here
-- (Redis out of memory) fails the whole call: its decisions reach no caller, and what was
-- written is only taken from the limit (under-admission), never handed out twice.
for g, s in pairs(state) do
  if s.dirty then flush(g, s) end
end
for _, e in ipairs(errors) do out[#out + 1] = e end
return out
