-- floodgate: gives `unused` permits of a GCRA lease back, exactly or not at all. Only when the
-- key still holds the lease's own word (the TAT its grant wrote: nothing was decided on the key
-- since, and it has not expired) is the TAT moved back by unused*T: the key is then exactly as
-- if the lease had asked for `unused` fewer permits. Otherwise nothing changes (the permits stay
-- taken until the TAT passes them: under-admission, never over-admission).
-- Once: a copy of this refund (redis-rs's cluster client re-sends a request whose connection
-- dropped before its reply came) does not land again, even where decisions since brought the key
-- back to the lease's very word (a refund, then a decision of as many permits): it finds the mark
-- the first landing left (KEYS[2]) and replies that the refund landed. So does a retry the
-- client sends under the same name after a failed call.
-- KEYS[1] TAT (string), KEYS[2] this refund's mark (a name no other refund has, in KEYS[1]'s
-- slot). ARGV: T (interval per permit) in us, the lease's word, unused, 0.
-- ARGV[5]: deadline in us on the server's clock (0: none, and then nothing is refunded: the mark
-- lives until the deadline has passed, after which every copy is refused as late).
-- Reply: {refunded (1/0), 0, 0, 0, 0, now_us}; 2 first: past the deadline, nothing changed.
local key = KEYS[1]
local interval = ARGV[1] + 0
local word = ARGV[2] + 0
local unused = ARGV[3] + 0

local function int(x) return string.format('%d', x) end

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local deadline = ARGV[5] + 0
if deadline > 0 and now > deadline then return {2, 0, 0, 0, 0, now} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {1, 0, 0, 0, 0, now} end
local stored = redis.call('GET', key)
if deadline == 0 or not stored or tonumber(stored) ~= word or unused < 1 then
  return {0, 0, 0, 0, 0, now}
end
-- Marked until past the deadline and the lease's word, whichever is later: to the millisecond
-- after it, on the server's clock (at an absolute time, not one counted from Redis's cached clock
-- read). A retry of this refund (same name, sent after a failed call, perhaps after this one's
-- deadline) finds the mark for as long as the key can hold the word again; past the word's time
-- a refund that lands changes nothing (the bucket is full at any TAT not after now).
redis.call('SET', KEYS[2], '1')
redis.call('PEXPIREAT', KEYS[2], int(math.floor(math.max(deadline, word) / 1000) + 1))
local tat = word - unused * interval
if tat > now then
  redis.call('SET', key, int(tat), 'PX', int(math.ceil((tat - now) / 1000)))
else
  -- Full again: as the bucket would be had the key expired.
  redis.call('DEL', key)
end
return {1, 0, 0, 0, 0, now}
