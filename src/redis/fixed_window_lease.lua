-- floodgate: a lease from the fixed window anchored at the first request (the counter
-- fixed_window.lua keeps: leases and per-call decisions share one limit). Grants as many
-- permits as fit, between min and max, in one decision: fit = limit - count; fit >= min:
-- k = min(max, fit), INCRBY k (as fixed_window.lua for n = k); else a denial for min permits.
-- KEYS[1] counter (string). ARGV: limit, window in ms, min, max.
-- ARGV[5]: deadline in us on the server's clock (0: none).
-- Reply: {allowed, limit, remaining, retry_after_us, reset_after_us, granted, count, 0, now_us};
-- allowed = 2: past the deadline, nothing changed. reset_after_us is the time to the end of the
-- window that counted the lease (its permits die with it: never refunded). For a grant it is
-- never more than the time from `now` to the counter's expiry, so that a lease served for
-- reset_after_us from a clock read taken before `now` ends by the time the counter expires and
-- a new window opens ("never over the limit"): PEXPIRETIME (Redis 7.0+) gives the expiry to the
-- millisecond, exactly; PTTL (older servers) counts from a millisecond-truncated time no earlier
-- than the millisecond `now` falls in, and overstates the time left by up to 1 ms: 1 ms less.
-- Stored values are read with exact_count(): exact.lua and count.lua, prepended.
local key = KEYS[1]
local limit = ARGV[1] + 0
local window_ms = ARGV[2] + 0
local min = ARGV[3] + 0
local max = ARGV[4] + 0

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local deadline = ARGV[5] + 0
if deadline > 0 and now > deadline then return {2, 0, 0, 0, 0, 0, 0, 0, now} end

local stored = redis.call('GET', key)
local count = 0
if stored then
  count = exact_count(stored)
  if not count then
    return redis.error_reply('floodgate: ' .. key .. ' does not hold a counter')
  end
end
local ttl_ms = redis.call('PTTL', key)
if ttl_ms == -1 then
  redis.call('PEXPIRE', key, window_ms)
  ttl_ms = window_ms
elseif ttl_ms < 0 then
  count = 0
  ttl_ms = window_ms
end

local fit = limit - count
if fit >= min then
  local k = math.min(max, fit)
  local taken = redis.call('INCRBY', key, k)
  if taken == k then
    redis.call('PEXPIRE', key, window_ms)
  end
  local left_us
  local expires_ms = redis.pcall('PEXPIRETIME', key)
  if type(expires_ms) == 'number' and expires_ms >= 0 then
    left_us = expires_ms * 1000 - now
  else
    left_us = (redis.call('PTTL', key) - 1) * 1000
  end
  if left_us < 0 then left_us = 0 end
  return {1, limit, limit - taken, 0, left_us, k, taken, 0, now}
end
if fit < 0 then fit = 0 end
if ttl_ms < 1 then ttl_ms = 1 end
return {0, limit, fit, ttl_ms * 1000, ttl_ms * 1000, 0, 0, 0, now}
