-- floodgate: prepended to the fixed window and GCRA scripts (one call, batch and lease: see
-- their `Script::new`), so that each reads a stored counter, window index or time the same way.
-- The per-call scripts (one decision and batch, of every algorithm) read the arguments and
-- TIME by arithmetic (`ARGV[1] + 0`, `t[1] * 1000000`), not tonumber(): the same conversion
-- (Lua 5.1's luaO_str2d), done once, where tonumber() does it twice (lua_isnumber, then
-- lua_tonumber), each a strtod: ~9% of a one-decision script's instructions on the server
-- (callgrind). They all hold decimal integers (the client's, TIME's); a missing or
-- non-numeric one is a script error either way. An argument passed on to a command as the
-- client sent it (`INCRBY key ARGV[3]`) is not formatted back from a number (%.17g).

-- A stored integer as INCRBY reads one ("0", or digits with no leading zero after an optional
-- '-') within Lua's exact integers (|x| < 2^53); nil for anything else ("1.5", "1e300", " 7",
-- "0x3", "007"): no value is worked with that INCRBY would refuse or a reply could not carry.
local function exact(s)
  if s ~= '0' and not (type(s) == 'string' and #s <= 17 and s:match('^%-?[1-9]%d*$')) then
    return nil
  end
  local x = s + 0
  if x <= -2^53 or x >= 2^53 then return nil end
  return x
end

-- A stored count: an exact integer from 0. The scripts never write a count below zero; one read
-- as such would admit that many permits past the limit.
local function exact_count(s)
  local x = exact(s)
  if x and x >= 0 then return x end
  return nil
end

-- Whether an HMGET of {i, c} (the aligned window's hash) holds an index that is not an exact
-- integer, a count that is not an exact_count, or a window index whose window ends past Lua's
-- exact integers: not a count these scripts keep.
local function corrupt(stored, window)
  local index = exact(stored[1])
  return (stored[1] and not index) or (stored[2] and not exact_count(stored[2]))
    or (index and (index + 1) * window >= 2^53)
end


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
