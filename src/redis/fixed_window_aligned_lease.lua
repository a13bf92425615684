-- floodgate: a lease from the fixed window aligned to the server's clock (the hash
-- fixed_window_aligned.lua keeps: leases and per-call decisions share one limit). Grants as
-- many permits as fit, between min and max, in one decision: fit = limit - count; fit >= min:
-- k = min(max, fit), count += k (as fixed_window_aligned.lua for n = k); else a denial for min.
-- KEYS[1] hash {i = window index, c = count}. ARGV: limit, window in us, min, max.
-- ARGV[5]: deadline in us on the server's clock (0: none).
-- Reply: {allowed, limit, remaining, retry_after_us, reset_after_us, granted, count, now_us,
-- now_us}; allowed = 2: past the deadline, nothing changed. (count, now_us) is the lease's
-- receipt: what a refund (fixed_window_aligned_refund.lua) must still find. A grant stamps the
-- hash with its own time (field l): a hash lost (deleted, evicted, a failover, a restart) and
-- counted up again in the same window to the same count holds no stamp, or another lease's,
-- so no refund of a lease it never counted lands in it.
-- Stored values are read with read_stored(): exact.lua and aligned.lua, prepended.
local key = KEYS[1]
local limit = ARGV[1] + 0
local window = ARGV[2] + 0
local min = ARGV[3] + 0
local max = ARGV[4] + 0

local function int(x) return string.format('%d', x) end

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local deadline = ARGV[5] + 0
if deadline > 0 and now > deadline then return {2, 0, 0, 0, 0, 0, 0, 0, now} end
local index = math.floor(now / window)
if index * window > now then index = index - 1 elseif (index + 1) * window <= now then index = index + 1 end

local stored = redis.call('HMGET', key, 'i', 'c')
local corrupt, stored_index, stored_count = read_stored(stored, window)
if corrupt then
  return redis.error_reply('floodgate: ' .. key .. ' does not hold a counter')
end
local count = 0
if stored_index and stored_count then
  if stored_index == index then
    count = stored_count
  elseif stored_index > index then
    index = stored_index
    count = stored_count
  end
end
local window_end = (index + 1) * window

local fit = limit - count
if fit >= min then
  local k = math.min(max, fit)
  redis.call('HSET', key, 'i', int(index), 'c', int(count + k), 'l', int(now))
  redis.call('PEXPIREAT', key, int(window_end / 1000))
  return {1, limit, fit - k, 0, window_end - now, k, count + k, now, now}
end
if redis.call('PTTL', key) == -1 then
  redis.call('PEXPIREAT', key, int(window_end / 1000))
end
if fit < 0 then fit = 0 end
return {0, limit, fit, window_end - now, window_end - now, 0, 0, 0, now}
