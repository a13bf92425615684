-- floodgate: fixed window aligned to the server's clock (PEXPIREAT at the window's end).
-- KEYS[1] hash {i = window index, c = count}. ARGV: limit, window in us, n.
-- ARGV[4]: deadline in us on the server's clock (0: none).
-- Reply: allowed, limit, remaining, retry_after_us, reset_after_us, now_us, as one string
-- (decided(): decided.lua); allowed = 2: past the deadline, nothing changed.
-- The window index is stored with the count, so a key read a moment before its expiry (Redis
-- freezes expiry time during a script) is never taken for the next window's count.
-- Stored values are read with read_stored(): exact.lua and aligned.lua, prepended.
local key = KEYS[1]
local limit = ARGV[1] + 0
local window = ARGV[2] + 0
local n = ARGV[3] + 0

local function int(x) return string.format('%d', x) end

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local deadline = ARGV[4] + 0
-- Past the caller's deadline (server clock): refuse, changing nothing (the caller has given up).
if deadline > 0 and now > deadline then return string.format('2 0 0 0 0 %d', now) end
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
    -- Written when the server's clock read later (a failover, a clock step): never go back.
    index = stored_index
    count = stored_count
  end
end
local window_end = (index + 1) * window

if count + n <= limit then
  redis.call('HSET', key, 'i', int(index), 'c', int(count + n))
  redis.call('PEXPIREAT', key, int(window_end / 1000))
  return string.format('1 %d %d 0 %d %d', limit, limit - count - n, window_end - now, now)
end
if redis.call('PTTL', key) == -1 then
  redis.call('PEXPIREAT', key, int(window_end / 1000))
end
local remaining = limit - count
if remaining < 0 then remaining = 0 end
return decided(0, limit, remaining, window_end - now, window_end - now, now)
