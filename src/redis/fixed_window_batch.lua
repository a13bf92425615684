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
local counts = {}
local taken = {}
local opened = {}
each_decision(function(k, n)
  local c = counts[k]
  if c == nil then
    local key = KEYS[k]
    local stored = redis.pcall('GET', key)
    if type(stored) == 'table' and stored.err then
      errors[#errors + 1] = stored.err
      c = false
    elseif stored and not exact_count(stored) then
      errors[#errors + 1] = 'floodgate: ' .. key .. ' does not hold a counter'
      c = false
    else
      c = stored and exact_count(stored) or 0
      local ttl_ms = redis.call('PTTL', key)
      if ttl_ms == -1 then
        -- Found without a TTL: its window is taken to start now.
        redis.call('PEXPIRE', key, window_ms)
        ttl_ms = window_ms
      elseif ttl_ms < 0 then
        c = 0
        ttl_ms = window_ms
      end
      out[k * 3] = c
      out[k * 3 + 1] = ttl_ms
      taken[k] = 0
    end
    if c == false then out[k * 3 - 1] = #errors end
    counts[k] = c
  end
  if c and c + n <= limit then
    -- INCRBY from nothing opens the window: PEXPIRE follows it.
    if c == 0 then opened[k] = true end
    counts[k] = c + n
    taken[k] = taken[k] + n
  end
end)
for k, n in pairs(taken) do
  if n > 0 then
    redis.call('INCRBY', KEYS[k], n)
    if opened[k] then redis.call('PEXPIRE', KEYS[k], window_ms) end
  end
end
return tally_reply()
