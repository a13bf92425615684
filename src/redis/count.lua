-- floodgate: prepended (after exact.lua) to the fixed window's scripts (anchored and aligned:
-- one call, batch, lease): a stored count.

-- A stored count: an exact integer from 0. The scripts never write a count below zero; one read
-- as such would admit that many permits past the limit.
local function exact_count(s)
  local x = exact(s)
  if x and x >= 0 then return x end
  return nil
end
