-- floodgate: sliding log, exact: a sorted set of one entry per permit, scored by the server's
-- time in us; a request is admitted if the entries of the last `window` us plus n fit the limit.
-- A denial adds nothing (it writes only to repair a log found without a TTL).
-- The sequence is read with exact(): exact.lua, prepended to this script.
-- KEYS[1] sorted set, KEYS[2] sequence counter (unique member names). ARGV: limit, window in us, n.
-- ARGV[4]: deadline in us on the server's clock (0: none).
-- Reply: {allowed, limit, remaining, retry_after_us, reset_after_us, now_us}; allowed = 2: past
-- the deadline, nothing changed.
local log = KEYS[1]
local seq = KEYS[2]
local limit = ARGV[1] + 0
local window = ARGV[2] + 0
local n = ARGV[3] + 0

local function int(x) return string.format('%d', x) end

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local deadline = ARGV[4] + 0
-- Past the caller's deadline (server clock): refuse, changing nothing (the caller has given up).
if deadline > 0 and now > deadline then return {2, 0, 0, 0, 0, now} end

-- Stored values, checked before any write: the sequence an exact integer (exact(): exact.lua,
-- prepended to this script) whose next n names stay below 2^53 (past that Lua's numbers cannot
-- count them: naming the entries never ended), the newest entry's score an integer whose window
-- ends below 2^53 (an infinite or huge score is cast into the reply). Anything else was not
-- written by this script. A score is Redis's text of a double, not the script's: a whole one
-- may read "1.795887e+15" (Redis 7.2 writes the shortest form), so it is compared as a number.
local stored_seq = redis.call('GET', seq)
local top = redis.call('ZRANGE', log, '-1', '-1', 'WITHSCORES')[2]
local newest_score = tonumber(top)
local stored_last = stored_seq and exact(stored_seq)
if stored_seq and not (stored_last and stored_last + n < 2^53) then
  return redis.error_reply('floodgate: ' .. seq .. ' does not hold a sliding log sequence')
end
if top and not (newest_score and newest_score == math.floor(newest_score)
    and newest_score > -2^53 and newest_score + window < 2^53) then
  return redis.error_reply('floodgate: ' .. log .. ' does not hold a sliding log')
end
local since = '(' .. int(now - window)
local count = redis.call('ZCOUNT', log, since, '+inf')

if count + n <= limit then
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
  -- The log lives until its newest entry leaves the window. That is now + window, unless an
  -- entry is scored after now (the server's clock stepped back since it was added): it counts
  -- until its own score + window (see the denial below), and an expiry of now + window would
  -- drop it, and its count, early. The sequence lives as long (its names stay unique).
  local lives_to = now
  if newest_score and newest_score > now then lives_to = newest_score end
  local expire_at = int(math.ceil((lives_to + window) / 1000))
  redis.call('PEXPIREAT', log, expire_at)
  redis.call('PEXPIREAT', seq, expire_at)
  return {1, limit, limit - count - n, 0, window, now}
end

-- Denied: wait until the entry that must leave for n to fit is out of the window, exact on the
-- server's clock. An entry scored after now (written when the server's clock read later: a
-- failover, a clock step back by S) still counts until the clock passes its score + window, so
-- the log stays full for up to S + window and the wait says so: never go back (as the aligned
-- window keeps a later window's count). A wait clamped to the window would announce a time at
-- which the same request is denied again.
local function leaves(entry) return tonumber(entry[2]) + window - now end
local needed = count + n - limit
local retry = window
local reset = 0
local blocking = redis.call('ZRANGEBYSCORE', log, since, '+inf', 'WITHSCORES', 'LIMIT', int(needed - 1), '1')
if #blocking == 2 then retry = leaves(blocking) end
local newest = redis.call('ZREVRANGEBYSCORE', log, '+inf', since, 'WITHSCORES', 'LIMIT', '0', '1')
if #newest == 2 then
  reset = leaves(newest)
  if redis.call('PTTL', log) == -1 then
    redis.call('PEXPIREAT', log, int(math.ceil((tonumber(newest[2]) + window) / 1000)))
  end
end
if redis.call('PTTL', seq) == -1 then redis.call('PEXPIRE', seq, int(window / 1000)) end
local remaining = limit - count
if remaining < 0 then remaining = 0 end
return {0, limit, remaining, retry, reset, now}
