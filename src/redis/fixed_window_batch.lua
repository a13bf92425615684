-- floodgate: a batch of fixed-window decisions (anchored at the first request), decided in order
-- as fixed_window.lua would decide them one call after another at the same instant.
-- Tally format (tally.lua, prepended with exact.lua): the client knows each decision's n and the
-- shared arguments, so the reply only carries what it cannot know: the server's time, each
-- key's state as first read here, and the decisions refused past their deadline. The client
-- replays the decisions from that state exactly as below (FixedWindow's replay), so no
-- per-decision field is formatted here or parsed there.
-- KEYS: each limiter key's counter. ARGV: limit, window in ms, then the frame's (tally.lua).
-- Per key in the reply: {error index (0: none), count, ttl_ms} as read.
-- Each key is read once, when its first decision in time comes; its decisions are then worked
-- out here and written once at the end (INCRBY of what they took, PEXPIRE if the window opened).
-- Stored values are read with exact_count(): exact.lua and count.lua.
local limit = ARGV[1] + 0
local window_ms = ARGV[2] + 0

-- Reads key k into out: its count (0 for a missing key) and TTL in ms, the TTL repaired if it
-- had none; returns the count, or false (the error recorded) if it holds no counter.
local function read(k)
  local key = KEYS[k]
  local stored = redis.pcall('GET', key)
  local c = 0
  if type(stored) == 'table' and stored.err then
    errors[#errors + 1] = stored.err
    c = false
  elseif stored then
    -- Read once: exact_count() is a pattern match and a conversion.
    c = exact_count(stored)
    if not c then
      errors[#errors + 1] = 'floodgate: ' .. key .. ' does not hold a counter'
      c = false
    end
  end
  if c then
    -- No counter: a window would open now (no PTTL to ask: time stands still in a script,
    -- so it would read -2).
    local ttl_ms = window_ms
    if stored then
      ttl_ms = redis.call('PTTL', key)
      if ttl_ms == -1 then
        -- Found without a TTL: its window is taken to start now.
        redis.call('PEXPIRE', key, window_ms)
        ttl_ms = window_ms
      end
    end
    out[k * 3] = c
    out[k * 3 + 1] = ttl_ms
  end
  if c == false then out[k * 3 - 1] = #errors end
  return c
end

-- What the decisions took of each key, and whether they opened its window (INCRBY from nothing:
-- PEXPIRE follows it).
local taken = {}
local opened = {}
local d, n = uniform()
if d then
  -- One key, one n (tally.lua's uniform()): the first floor(room / n) decisions, at most d.
  local c = read(1)
  if c then
    local allowed = math.floor((limit - c) / n)
    if allowed > d then allowed = d end
    if allowed > 0 then
      taken[1] = allowed * n
      opened[1] = c == 0
    end
  end
else
  local counts = {}
  each_decision(function(k, n)
    local c = counts[k]
    if c == nil then
      c = read(k)
      counts[k] = c
      if c then taken[k] = 0 end
    end
    if c and c + n <= limit then
      if c == 0 then opened[k] = true end
      counts[k] = c + n
      taken[k] = taken[k] + n
    end
  end)
end
for k, n in pairs(taken) do
  if n > 0 then
    redis.call('INCRBY', KEYS[k], n)
    if opened[k] then redis.call('PEXPIRE', KEYS[k], window_ms) end
  end
end
return tally_reply()
