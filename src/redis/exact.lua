-- floodgate: prepended to the fixed window, GCRA and sliding scripts (one call, batch and
-- lease: see their `lua_script!`), so that each reads a stored counter, window index or time
-- the same way. What only some of them call is in its own file, prepended to those alone (each
-- `local function` is a closure built on every call of the script): exact_count() in count.lua,
-- read_stored() in aligned.lua, decided() in decided.lua.
-- The per-call scripts (one decision and batch, of every algorithm), the lease scripts and the
-- refund scripts read the arguments and TIME by arithmetic (`ARGV[1] + 0`, `t[1] * 1000000`),
-- not tonumber(): the same conversion (Lua 5.1's luaO_str2d), done once, where tonumber() does
-- it twice (lua_isnumber, then lua_tonumber), each a strtod: ~9% of a one-decision script's
-- instructions on the server, 7-9% of a lease's, 11-12% of a refund's (callgrind). They all hold
-- decimal integers (the client's, TIME's); a missing or non-numeric one is a script error
-- either way. An argument passed on to a command as the
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
