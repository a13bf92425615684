-- floodgate: sliding window of cells (the seeds' "precision"): the window is `cells` cells of
-- `cell` us each, aligned to the server's clock; a request counts against the current cell and
-- the `cells - 1` before it. All cells of one limiter key live in one hash (field = cell index).
-- Stored values are read with exact(): exact.lua, prepended to this script.
-- KEYS[1] hash. ARGV: limit, cell length in us, cells per window, n.
-- ARGV[5]: deadline in us on the server's clock (0: none).
-- Reply: {allowed, limit, remaining, retry_after_us, reset_after_us, now_us}; allowed = 2: past
-- the deadline, nothing changed.
local key = KEYS[1]
local limit = ARGV[1] + 0
local cell = ARGV[2] + 0
local cells = ARGV[3] + 0
local n = ARGV[4] + 0

local function int(x) return string.format('%d', x) end

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local deadline = ARGV[5] + 0
-- Past the caller's deadline (server clock): refuse, changing nothing (the caller has given up).
if deadline > 0 and now > deadline then return {2, 0, 0, 0, 0, now} end
local current = math.floor(now / cell)
if current * cell > now then current = current - 1 elseif (current + 1) * cell <= now then current = current + 1 end
local oldest = current - cells + 1

-- Live cells (index >= oldest; one above `current` was written when the clock read later and
-- counts too), and the expired fields to delete on the next write.
local live = {}
local expired = {}
local count = 0
local newest = current
local fields = redis.call('HGETALL', key)
for i = 1, #fields, 2 do
  -- A cell is an exact integer index whose window ends within Lua's exact integers, holding an
  -- exact count of at least 0 (exact(): exact.lua, prepended to this script). Anything else was
  -- not written by this script: a negative count would admit past the limit, an index past 2^53
  -- µs would be cast into an expiry in the past or into the reply.
  local index = exact(fields[i])
  local taken = exact(fields[i + 1])
  if not index or not taken or taken < 0 or (index + cells) * cell >= 2^53 then
    return redis.error_reply('floodgate: ' .. key .. ' does not hold a sliding window')
  end
  if index < oldest then
    expired[#expired + 1] = fields[i]
  else
    live[#live + 1] = {index, taken}
    count = count + taken
    if index > newest then newest = index end
  end
end
-- A cell leaves the window when the current index reaches index + cells.
local function leaves(index) return (index + cells) * cell - now end

if count + n <= limit then
  redis.call('HINCRBY', key, int(current), n)
  for i = 1, #expired, 1000 do
    redis.call('HDEL', key, unpack(expired, i, math.min(i + 999, #expired)))
  end
  redis.call('PEXPIREAT', key, int((newest + cells) * cell / 1000))
  return {1, limit, limit - count - n, 0, leaves(newest), now}
end

-- Denied: the wait is until enough of the oldest cells have left the window.
table.sort(live, function(a, b) return a[1] < b[1] end)
local needed = count + n - limit
local freed = 0
local retry = 0
local reset = 0
for _, entry in ipairs(live) do
  if entry[2] > 0 then
    freed = freed + entry[2]
    if retry == 0 and freed >= needed then retry = leaves(entry[1]) end
    reset = leaves(entry[1])
  end
end
if retry == 0 then retry = leaves(newest) end
if redis.call('PTTL', key) == -1 then
  redis.call('PEXPIREAT', key, int((newest + cells) * cell / 1000))
end
local remaining = limit - count
if remaining < 0 then remaining = 0 end
return {0, limit, remaining, retry, reset, now}
