-- floodgate: a batch of sliding window decisions, decided in order exactly as sliding_window.lua
-- would decide them one call after another at the same instant (the server's TIME read once for
-- the call), but reading each key's hash once: its cells are read and checked at the key's first
-- decision, its decisions are worked out here, and its admissions written at the end (one
-- HINCRBY of their sum into the current cell, the expired cells deleted, the expiry set), as the
-- calls one after another would have left it. A denial writes nothing but the expiry repair
-- sliding_window.lua makes; a later denial of the same n on the same key, with no admission
-- between, is the same answer and is not worked out again.
-- Stored values are read with exact(): exact.lua, prepended to this script.
-- Format: each_batch.lua's (RedisBackend::eval_batch). KEYS: each limiter key's hash once.
-- ARGV: per (1), the four shared arguments (limit, cell length in us, cells per window, the slot
-- of n), the slot of n (4), the n's, the earliest deadline, the deadlines' distances, the
-- decisions' key indexes when KEYS holds more than one.
-- Reply: the server's time; five fields per decision ({allowed, limit, remaining,
-- retry_after_us, reset_after_us}; allowed = 2: past its deadline, nothing changed; 3: an error,
-- the message's index); the error messages.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local limit = ARGV[2] + 0
local cell = ARGV[3] + 0
local cells = ARGV[4] + 0
local out = {now}
local errors = {}
local d = 0
local uniform_n = not ARGV[7]:find(' ', 1, true) and ARGV[7] + 0
local next_n = not uniform_n and ARGV[7]:gmatch('%d+')
local earliest = ARGV[8] + 0
local check = earliest > 0 and now > earliest
local next_g = #KEYS > 1 and ARGV[10]:gmatch('%d+')

local function int(x) return string.format('%d', x) end

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
-- the last admission)}. A read that raises (a key of another type) keeps nothing: the next
-- decision on the key reads it again, as a call of its own would.
local state = {}
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

-- Writes key g's admissions as sliding_window.lua's would have left the hash.
local function flush(g, s)
  local key = KEYS[g]
  redis.call('HINCRBY', key, int(current), s.pending)
  for i = 1, #s.expired, 1000 do
    redis.call('HDEL', key, unpack(s.expired, i, math.min(i + 999, #s.expired)))
  end
  redis.call('PEXPIREAT', key, int((s.newest + cells) * cell / 1000))
end

-- A denial of n on key g: sliding_window.lua's, on the cells as they are now (this batch's
-- admissions counted in the current cell).
local function deny(g, s, n)
  local live = {}
  for index, taken in pairs(s.live) do live[#live + 1] = {index, taken} end
  table.sort(live, function(a, b) return a[1] < b[1] end)
  local needed = s.count + n - limit
  local freed = 0
  local retry = 0
  local reset = 0
  for _, entry in ipairs(live) do
    if entry[2] > 0 then
      freed = freed + entry[2]
      if retry == 0 and freed >= needed then retry = leaves(entry[1]) end
      reset = leaves(entry[1])
    end
  end
  if retry == 0 then retry = leaves(s.newest) end
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

local function decide(g, n, deadline)
  -- Past the caller's deadline (server clock): refused, nothing changed.
  if deadline > 0 and now > deadline then return {2, 0, 0, 0, 0} end
  local s = state[g]
  if not s then
    s = read(g)
    state[g] = s
  end
  if s.bad then return nil, 'floodgate: ' .. KEYS[g] .. ' does not hold a sliding window' end
  if s.count + n <= limit then
    s.count = s.count + n
    s.live[current] = (s.live[current] or 0) + n
    s.pending = s.pending + n
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

for distance in ARGV[9]:gmatch('%d+') do
  local g = next_g and next_g() + 0 or 1
  local n = next_n and next_n() + 0 or uniform_n
  local deadline = 0
  if check and distance ~= '0' then deadline = earliest + distance - 1 end
  local ok, r, message = pcall(decide, g, n, deadline)
  if not ok then
    errors[#errors + 1] = type(r) == 'table' and r.err or tostring(r)
    r = {3, #errors, 0, 0, 0}
  elseif not r then
    errors[#errors + 1] = message
    r = {3, #errors, 0, 0, 0}
  end
  for f = 1, 5 do out[1 + d * 5 + f] = r[f] end
  d = d + 1
end
-- The admissions, written once per key. A write that raises here (Redis out of memory) fails
-- the whole call: its decisions reach no caller, and what was written is only taken from the
-- limit (under-admission), never handed out twice.
for g, s in pairs(state) do
  if s.dirty then flush(g, s) end
end
for _, e in ipairs(errors) do out[#out + 1] = e end
return out
