-- floodgate: gives `unused` permits of an aligned fixed window's lease back, exactly or not at
-- all: only when the hash still holds the lease's own window index and count (nothing was
-- decided in that window since) is the count lowered by `unused`, leaving the window exactly as
-- if the lease had asked for fewer. Otherwise nothing changes (the permits die with the window).
-- KEYS[1] hash {i, c}. ARGV: the lease's window index, the lease's count, unused, 0.
-- ARGV[5]: deadline in us on the server's clock (0: none).
-- Reply: {refunded (1/0), 0, 0, 0, 0, now_us}; 2 first: past the deadline, nothing changed.
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
if tonumber(stored[1]) ~= index or tonumber(stored[2]) ~= word or unused < 1 or unused > word then
  return {0, 0, 0, 0, 0, now}
end
redis.call('HSET', key, 'c', int(word - unused))
return {1, 0, 0, 0, 0, now}
