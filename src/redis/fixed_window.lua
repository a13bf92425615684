-- floodgate: fixed window anchored at the first request (INCRBY + PEXPIRE on the first hit).
-- KEYS[1] counter (string). ARGV: limit, window in ms, n.
-- ARGV[4]: deadline in us on the server's clock (0: none).
-- Reply: allowed, limit, remaining, retry_after_us, reset_after_us, now_us, as one string
-- (decided(): decided.lua); allowed = 2: past the deadline, nothing changed.
-- Time is the server's: the window is the counter's TTL. A denial only reads (it writes just
-- to repair a counter found without a TTL, which would otherwise stick forever).
-- Stored values are read with exact_count(): exact.lua and count.lua, prepended.
local key = KEYS[1]
local limit = ARGV[1] + 0
local n = ARGV[3] + 0
-- The window in ms (ARGV[2]) is converted only where a window opens or is repaired: a
-- conversion is a strtod on the server, and the common call (an open window) needs none.

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local deadline = ARGV[4] + 0
-- Past the caller's deadline (server clock): refuse, changing nothing (the caller has given up).
if deadline > 0 and now > deadline then return string.format('2 0 0 0 0 %d', now) end

local stored = redis.call('GET', key)
local count = 0
if stored then
  count = exact_count(stored)
  if not count then
    return redis.error_reply('floodgate: ' .. key .. ' does not hold a counter')
  end
end
local ttl_ms
if stored then
  ttl_ms = redis.call('PTTL', key)
  if ttl_ms == -1 then
    -- Found without a TTL: its window is taken to start now.
    redis.call('PEXPIRE', key, ARGV[2])
    ttl_ms = ARGV[2] + 0
  end
else
  -- No counter (no PTTL to ask: time stands still in a script, so it would read -2): a window
  -- would open now.
  ttl_ms = ARGV[2] + 0
end

if count + n <= limit then
  local taken = redis.call('INCRBY', key, ARGV[3])
  if taken == n then
    redis.call('PEXPIRE', key, ARGV[2])
    ttl_ms = ARGV[2] + 0
  end
  return string.format('1 %d %d 0 %d %d', limit, limit - taken, ttl_ms * 1000, now)
end
local remaining = limit - count
if remaining < 0 then remaining = 0 end
-- PTTL rounds down: under 1 ms left reads as 0; never announce a retry of nothing.
if ttl_ms < 1 then ttl_ms = 1 end
return decided(0, limit, remaining, ttl_ms * 1000, ttl_ms * 1000, now)
