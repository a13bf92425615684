-- floodgate: GCRA / token bucket on one key holding the theoretical arrival time (TAT) in us on
-- the server's clock:  base = max(tat, now); new_tat = base + n*T; allowed iff
-- new_tat <= now + capacity*T. The key expires when the bucket is full again.
-- KEYS[1] TAT (string). ARGV: T (interval per permit) in us, capacity, n.
-- ARGV[4]: deadline in us on the server's clock (0: none).
-- Reply: allowed, limit, remaining, retry_after_us, reset_after_us, now_us, as one string
-- (decided(): decided.lua); allowed = 2: past the deadline, nothing changed.
-- Stored values are read with exact(): exact.lua, prepended to this script.
local key = KEYS[1]
local interval = ARGV[1] + 0
local capacity = ARGV[2] + 0
local n = ARGV[3] + 0

local function int(x) return string.format('%d', x) end

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local deadline = ARGV[4] + 0
-- Past the caller's deadline (server clock): refuse, changing nothing (the caller has given up).
if deadline > 0 and now > deadline then return string.format('2 0 0 0 0 %d', now) end
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
local new_tat = base + n * interval
if new_tat <= horizon then
  redis.call('SET', key, int(new_tat), 'PX', int(math.ceil((new_tat - now) / 1000)))
  local remaining = math.floor((horizon - new_tat) / interval)
  return string.format('1 %d %d 0 %d %d', capacity, remaining, new_tat - now, now)
end
if stored and redis.call('PTTL', key) == -1 then
  if base > now then
    redis.call('PEXPIRE', key, int(math.ceil((base - now) / 1000)))
  else
    redis.call('DEL', key)
  end
end
return decided(0, capacity, math.floor((horizon - base) / interval), new_tat - horizon, base - now, now)
