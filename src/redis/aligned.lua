-- floodgate: prepended (after exact.lua and count.lua) to the aligned fixed window's scripts (one call,
-- batch, lease): the check of its stored hash.

-- Whether an HMGET of {i, c} (the aligned window's hash) holds an index that is not an exact
-- integer, a count that is not an exact_count, or a window index whose window ends past Lua's
-- exact integers: not a count these scripts keep.
local function corrupt(stored, window)
  local index = exact(stored[1])
  return (stored[1] and not index) or (stored[2] and not exact_count(stored[2]))
    or (index and (index + 1) * window >= 2^53)
end
