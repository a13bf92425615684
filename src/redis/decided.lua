-- floodgate: prepended (after exact.lua) to the one-decision fixed window (anchored and
-- aligned) and GCRA scripts: their reply.

-- A one-decision script's reply: its six integer fields as one string, space-separated. A
-- client parses one string much faster than an array of six integers (RedisBackend::eval's
-- Fields); the fields are formatted as an array reply would carry them (truncated to integers).
local function decided(allowed, limit, remaining, retry_us, reset_us, now)
  return string.format('%d %d %d %d %d %d', allowed, limit, remaining, retry_us, reset_us, now)
end
-- The scripts write the replies whose fields are partly constant (allowed: `1 limit remaining 0
-- reset now`; past the deadline: `2 0 0 0 0 now`) with string.format directly, the constants in
-- the format: the same bytes as decided(), without a sprintf per constant field or a call
-- (callgrind: -2.5K of a fixed-window call's ~60K instructions on the server; a helper
-- function here instead costs a closure per call, which ate most of it).
