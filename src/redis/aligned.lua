-- floodgate: prepended (after exact.lua and count.lua) to the aligned fixed window's scripts (one call,
-- batch, lease): the reading of its stored hash.

-- An HMGET of {i, c} (the aligned window's hash) read once: whether it holds an index that is not
-- an exact integer, a count that is not an exact_count, or a window index whose window ends past
-- Lua's exact integers (not a count these scripts keep); then the index and the count as read
-- (nil where missing or not kept).
local function read_stored(stored, window)
  local index = exact(stored[1])
  local count = exact_count(stored[2])
  local corrupt = (stored[1] and not index) or (stored[2] and not count)
    or (index and (index + 1) * window >= 2^53)
  return corrupt, index, count
end
