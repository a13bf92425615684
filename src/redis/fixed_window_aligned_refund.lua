-- floodgate: gives `unused` permits of an aligned fixed window's lease back, exactly or not at
-- all: only when the hash still holds the lease's own window index, count and stamp (the same
-- hash, not one lost and counted up again since; nothing was decided in that window since) is
-- the count lowered by `unused`, leaving the window exactly as if the lease had asked for
-- fewer. Otherwise nothing changes (the permits die with the window).
-- Once: a copy of this refund (redis-rs's cluster client re-sends a request whose connection
-- dropped before its reply came) does not land again, even where decisions since counted the
-- window back up to the lease's count (a per-call decision leaves the stamp as it is): it finds
-- the mark the first landing left (KEYS[2]) and replies that the refund landed. So does a retry
-- the client sends under the same name after a failed call.
-- KEYS[1] hash {i, c, l}, KEYS[2] this refund's mark (a name no other refund has, in KEYS[1]'s
-- slot). ARGV: the lease's stamp (its server time in us, written as l; its window index is the
-- one that time falls in), the lease's count, unused, the window in us.
-- ARGV[5]: deadline in us on the server's clock (0: none, and then nothing is refunded: the mark
-- lives until the deadline has passed, after which every copy is refused as late).
-- Reply: {refunded (1/0), 0, 0, 0, 0, now_us}; 2 first: past the deadline, nothing changed.
local key = KEYS[1]
local stamp = ARGV[1] + 0
local word = ARGV[2] + 0
local unused = ARGV[3] + 0
local window = ARGV[4] + 0

local function int(x) return string.format('%d', x) end

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local deadline = ARGV[5] + 0
if deadline > 0 and now > deadline then return {2, 0, 0, 0, 0, now} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {1, 0, 0, 0, 0, now} end
-- The window the lease's time falls in, as the lease script computed it (a lease that took a
-- later window's index written by a clock that read later finds another index: not refunded).
local index = math.floor(stamp / window)
if index * window > stamp then index = index - 1 elseif (index + 1) * window <= stamp then index = index + 1 end
local stored = redis.call('HMGET', key, 'i', 'c', 'l')
if deadline == 0 or tonumber(stored[1]) ~= index or tonumber(stored[2]) ~= word
  or tonumber(stored[3]) ~= stamp or unused < 1 or unused > word then
  return {0, 0, 0, 0, 0, now}
end
redis.call('HSET', key, 'c', int(word - unused))
-- Marked until past the deadline and the lease's window, whichever ends later: to the
-- millisecond after it, on the server's clock (at an absolute time, not one counted from Redis's
-- cached clock read). A retry of this refund (same name, sent after a failed call, perhaps after
-- this one's deadline) finds the mark for as long as the hash can hold the window's index; past
-- the window's end a refund that lands changes nothing (a decision then counts a new window).
redis.call('SET', KEYS[2], '1')
local marked_until = math.max(deadline, (index + 1) * window)
redis.call('PEXPIREAT', KEYS[2], int(math.floor(marked_until / 1000) + 1))
return {1, 0, 0, 0, 0, now}
