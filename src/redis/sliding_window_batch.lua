-- floodgate: a batch of sliding window decisions, decided in order exactly as sliding_window.lua
-- would decide them one call after another at the same instant (the server's TIME read once for
-- the call), but reading each key's hash once: its cells are read and checked at the key's first
-- decision, its decisions are worked out here, and its admissions written at the end (one
-- HINCRBY of their sum into the current cell, the expired cells deleted, the expiry set), as the
-- calls one after another would have left it. A denial writes nothing but the expiry repair
-- sliding_window.lua makes; a later denial of the same n on the same key, with no admission
-- between, is the same answer and is not worked out again.
-- Stored values are read with exact(): exact.lua, prepended to this script.
-- Between batch_frame.lua and batch_run.lua (their format), after exact.lua. KEYS: each
-- limiter key's hash. Shared arguments: limit, cell length in us, cells per window, n.
local limit = ARGV[2] + 0
local cell = ARGV[3] + 0
local cells = ARGV[4] + 0

local current = math.floor(now / cell)
if current * cell > now then current = current - 1 elseif (current + 1) * cell <= now then current = current + 1 end
local oldest = current - cells + 1
-- A cell leaves the window when the current index reaches index + cells.
local function leaves(index) return (index + cells) * cell - now end

-- Key g's state, read at its first decision: {bad (the hash holds something sliding_window.lua
-- did not write), live (index -> permits taken, the current cell's including this batch's
-- admissions), expired (the fields to delete at the first write), count (permits in the window),
-- newest (the newest live index, at least the current one), pending (permits admitted here, not
-- yet written), dirty (an admission not yet written, n = 0 included), ttl_checked (a denial
-- looked at the expiry, or an admission will set it), denied (n -> the reply of a denial since
-- the last admission), order (built at the first denial, see sorted())}. A read that raises (a
-- key of another type) keeps nothing: the next decision on the key reads it again, as a call of
-- its own would.
local function read(g)
  local fields = redis.call('HGETALL', KEYS[g])
  local s = {bad = false, live = {}, expired = {}, count = 0, newest = current, pending = 0,
             dirty = false, ttl_checked = false, denied = {}}
  for i = 1, #fields, 2 do
    -- As sliding_window.lua: a cell is an exact integer index whose window ends within Lua's
    -- exact integers, holding an exact count of at least 0.
    local index = exact(fields[i])
    local taken = exact(fields[i + 1])
    if not index or not taken or taken < 0 or (index + cells) * cell >= 2^53 then
      s.bad = true
      return s
    end
    if index < oldest then
      s.expired[#s.expired + 1] = fields[i]
    else
      s.live[index] = taken
      s.count = s.count + taken
      if index > s.newest then s.newest = index end
    end
  end
  return s
end

-- Whether this call has written yet. Until it has, an admission writes its HINCRBY at once:
-- a server out of memory refuses a script's first write that may grow memory (and none after
-- it), so that admission fails alone, as sliding_window.lua's HINCRBY would, and the batch's
-- other decisions are still decided (a denial writes at most an expiry, which Redis allows).
local wrote = false

-- Writes key g's admissions not yet written as sliding_window.lua's would have left the hash.
local function flush(g, s)
  local key = KEYS[g]
  redis.call('HINCRBY', key, int(current), int(s.pending))
  for i = 1, #s.expired, 1000 do
    redis.call('HDEL', key, unpack(s.expired, i, math.min(i + 999, #s.expired)))
  end
  redis.call('PEXPIREAT', key, int((s.newest + cells) * cell / 1000))
end

-- Key g's live cells in index order, once per key: {index[], prefix[] (permits up to and
-- including each cell, as read, the current cell's as at the sort), at (the current cell's
-- place), base (its count then), last (the last cell with permits other than the current)}.
-- Admissions change only the current cell's count, so a denial finds its cell by a binary
-- search on the prefix sums, the current cell's later admissions added from its place on.
local function sorted(s)
  if s.order then return s.order end
  if not s.live[current] then s.live[current] = 0 end
  local index = {}
  for i in pairs(s.live) do index[#index + 1] = i end
  table.sort(index)
  local o = {index = index, prefix = {}, at = 0, base = s.live[current], last = 0}
  local sum = 0
  for k, i in ipairs(index) do
    sum = sum + s.live[i]
    o.prefix[k] = sum
    if i == current then o.at = k elseif s.live[i] > 0 then o.last = k end
  end
  s.order = o
  return o
end

-- A denial of n on key g: sliding_window.lua's, on the cells as they are now (this batch's
-- admissions counted in the current cell). Its wait: until the cells that free `needed`
-- permits, oldest first, have left the window (the newest cell's end if they never do); the
-- reset: until the last cell holding permits has.
local function deny(g, s, n)
  local o = sorted(s)
  local added = s.live[current] - o.base
  local function freed(k) return o.prefix[k] + (k >= o.at and added or 0) end
  local needed = s.count + n - limit
  local retry = leaves(s.newest)
  local cells_held = #o.index
  if cells_held > 0 and freed(cells_held) >= needed then
    -- The first cell whose prefix reaches needed (needed > 0: it holds permits).
    local lo, hi = 1, cells_held
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if freed(mid) >= needed then hi = mid else lo = mid + 1 end
    end
    retry = leaves(o.index[lo])
  end
  local last = o.last
  if s.live[current] > 0 and o.at > last then last = o.at end
  local reset = 0
  if last > 0 then reset = leaves(o.index[last]) end
  -- sliding_window.lua repairs an expiry found missing; after an admission (written at the end,
  -- with its expiry) it finds one. Once looked at, it is there.
  if not s.ttl_checked then
    s.ttl_checked = true
    if redis.call('PTTL', KEYS[g]) == -1 then
      redis.call('PEXPIREAT', KEYS[g], int((s.newest + cells) * cell / 1000))
    end
  end
  local remaining = limit - s.count
  if remaining < 0 then remaining = 0 end
  return {0, limit, remaining, retry, reset}
end

local function decide(g, n)
  local s = state[g]
  if not s then
    s = read(g)
    state[g] = s
  end
  if s.bad then return nil, 'floodgate: ' .. KEYS[g] .. ' does not hold a sliding window' end
  if s.count + n <= limit then
    if wrote then
      s.pending = s.pending + n
    else
      -- Raises when the server is out of memory: this decision's error, nothing counted.
      redis.call('HINCRBY', KEYS[g], int(current), int(n))
      wrote = true
    end
    s.count = s.count + n
    s.live[current] = (s.live[current] or 0) + n
    s.dirty = true
    s.ttl_checked = true
    s.denied = {}
    return {1, limit, limit - s.count, 0, leaves(s.newest)}
  end
  local r = s.denied[n]
  if r then return r end
  r = deny(g, s, n)
  s.denied[n] = r
  return r
end
