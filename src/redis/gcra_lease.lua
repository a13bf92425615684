-- floodgate: a lease from the GCRA / token bucket on one key holding the theoretical arrival
-- time (TAT) in us on the server's clock (the key gcra.lua keeps: leases and per-call decisions
-- share one limit). Grants as many permits as fit, between min and max, in one decision:
--   base = max(tat, now); fit = floor((now + capacity*T - base) / T);
--   fit >= min: k = min(max, fit), new_tat = base + k*T (as gcra.lua for n = k); else a denial
--   for min permits, changing nothing (as gcra.lua for n = min).
-- KEYS[1] TAT (string). ARGV: T (interval per permit) in us, capacity, min, max.
-- ARGV[5]: deadline in us on the server's clock (0: none).
-- Reply: {allowed, limit, remaining, retry_after_us, reset_after_us, granted, new_tat, 0,
-- now_us}; allowed = 2: past the deadline, nothing changed. new_tat is the lease's receipt: the
-- word a refund (gcra_refund.lua) must still find to give permits back.
-- Stored values are read with exact(): exact.lua, prepended to this script.
local key = KEYS[1]
local interval = ARGV[1] + 0
local capacity = ARGV[2] + 0
local min = ARGV[3] + 0
local max = ARGV[4] + 0

local function int(x) return string.format('%d', x) end

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local deadline = ARGV[5] + 0
-- Past the caller's deadline (server clock): refuse, changing nothing (the caller has given up).
if deadline > 0 and now > deadline then return {2, 0, 0, 0, 0, 0, 0, 0, now} end
local stored = redis.call('GET', key)
local tat = now
if stored then
  tat = exact(stored)
  if not tat then
    return redis.error_reply('floodgate: ' .. key .. ' does not hold a time')
  end
end

local horizon = now + capacity * interval
local base = math.max(tat, now)
local fit = math.floor((horizon - base) / interval)
if fit >= min then
  local k = math.min(max, fit)
  local new_tat = base + k * interval
  redis.call('SET', key, int(new_tat), 'PX', int(math.ceil((new_tat - now) / 1000)))
  return {1, capacity, fit - k, 0, new_tat - now, k, new_tat, 0, now}
end
if stored and redis.call('PTTL', key) == -1 then
  if base > now then
    redis.call('PEXPIRE', key, int(math.ceil((base - now) / 1000)))
  else
    redis.call('DEL', key)
  end
end
if fit < 0 then fit = 0 end
return {0, capacity, fit, base + min * interval - horizon, base - now, 0, 0, 0, now}
