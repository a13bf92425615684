-- floodgate: gives `unused` permits of an aligned fixed window's lease back while the hash still
-- holds the lease's window index: the count is lowered by `unused`, leaving the window exactly
-- as if the lease had asked for fewer (a window's count is a sum: what was decided in it since
-- stays counted). In a later window (another index, or the hash expired) nothing changes: the
-- permits died with their window. Refusing a refund because another decision or lease wrote the
-- window since stranded a lease's unused permits whenever processes shared the key.
-- KEYS[1] hash {i, c}. ARGV: the lease's window index, the lease's count, unused, 0.
-- ARGV[5]: deadline in us on the server's clock (0: none).
-- Reply: {refunded (1/0), 0, 0, 0, 0, now_us}; 2 first: past the deadline, nothing changed.
-- Stored values are read with exact() / exact_count(): exact.lua, prepended to this script.
local key = KEYS[1]
local index = tonumber(ARGV[1])
local word = tonumber(ARGV[2])
local unused = tonumber(ARGV[3])

local function int(x) return string.format('%d', x) end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local deadline = tonumber(ARGV[5])
if deadline > 0 and now > deadline then return {2, 0, 0, 0, 0, now} end
local stored = redis.call('HMGET', key, 'i', 'c')
local count = exact_count(stored[2])
if exact(stored[1]) ~= index or not count or unused < 1 or unused > word or unused > count then
  return {0, 0, 0, 0, 0, now}
end
redis.call('HSET', key, 'c', int(count - unused))
return {1, 0, 0, 0, 0, now}
