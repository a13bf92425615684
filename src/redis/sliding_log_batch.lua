-- floodgate: a batch of sliding log decisions, decided in order exactly as sliding_log.lua would
-- decide them one call after another at the same instant (the server's TIME read once for the
-- call), but reading each log once: a key's sequence, newest score and count in the window are
-- read at its first decision; its admissions are counted here and written at once (one trim,
-- one INCRBY, the entries' ZADDs, the expiries) before its first denial, which reads the log as
-- sliding_log.lua's denial does, or at the end. A denial writes nothing but the TTL repairs
-- sliding_log.lua makes; a later denial of the same n on the same key, with no admission between,
-- is the same answer and reads nothing again.
-- Stored values are read with exact(): exact.lua, prepended to this script.
-- Between batch_frame.lua and batch_run.lua (their format), after exact.lua. KEYS: each
-- limiter key's two keys (the sorted set, the sequence). Shared arguments: limit, window in us,
-- n, 0.
local limit = ARGV[2] + 0
local window = ARGV[3] + 0
local since = '(' .. int(now - window)

-- Key g's state, read at its first decision: {seq_bad (the sequence is not an exact integer),
-- top_bad (the newest score is not an exact time), last (the sequence, 0 if none), newest (the
-- newest entry's score, nil if none), count (entries in the window, this batch's admissions
-- included), pending (permits admitted here not yet written), dirty (an admission not yet
-- written, n = 0 included), denied (n -> the reply of a denial since the last admission)}. A
-- read that raises (a key of another type) keeps nothing: the next decision on the key reads
-- it again, as a call of its own would.
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
  -- Cleared once written: a write that raised (inside a denial's pcall) leaves them to the end.
  s.pending = 0
  s.dirty = false
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

local function decide(g, n)
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
