-- floodgate: a batch of fixed-window decisions (anchored at the first request), decided in order
-- as fixed_window.lua would decide them one call after another at the same instant.
-- KEYS[d]: decision d's counter. ARGV[1]: keys per decision (1); then five per decision: limit,
-- window in ms, n, (unused), deadline in us on the server's clock (0: none).
-- Reply: one entry per decision, as fixed_window.lua's ({2, ...}: past its deadline, nothing
-- changed), or {3, message} for a key that does not hold a counter.
-- Each key is read once; its decisions are then worked out here and written once at the end
-- (INCRBY of what they took, PEXPIRE if the window opened in this batch).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local keys = {}
local state = {}
local out = {}
local d = 0
for i = 2, #ARGV, 5 do
  d = d + 1
  local key = KEYS[d]
  local limit = tonumber(ARGV[i])
  local window_ms = tonumber(ARGV[i + 1])
  local n = tonumber(ARGV[i + 2])
  local deadline = tonumber(ARGV[i + 4])
  local s = state[key]
  if deadline > 0 and now > deadline then
    out[d] = {2, 0, 0, 0, 0, now}
  else
    if not s then
      local stored = redis.pcall('GET', key)
      if type(stored) == 'table' and stored.err then
        s = {err = stored.err}
      elseif stored and not tonumber(stored) then
        s = {err = 'floodgate: ' .. key .. ' does not hold a counter'}
      else
        local count = tonumber(stored) or 0
        local ttl_ms = redis.call('PTTL', key)
        if ttl_ms == -1 then
          -- Found without a TTL: its window is taken to start now.
          redis.call('PEXPIRE', key, window_ms)
          ttl_ms = window_ms
        elseif ttl_ms < 0 then
          count = 0
          ttl_ms = window_ms
        end
        s = {count = count, ttl_ms = ttl_ms, taken = 0, opened = false, window_ms = window_ms}
      end
      state[key] = s
      keys[#keys + 1] = key
    end
    if s.err then
      out[d] = {3, s.err}
    elseif s.count + n <= limit then
      if s.count == 0 then
        -- INCRBY from nothing opens the window: PEXPIRE follows it.
        s.opened = true
        s.ttl_ms = window_ms
        s.window_ms = window_ms
      end
      s.count = s.count + n
      s.taken = s.taken + n
      out[d] = {1, limit, limit - s.count, 0, s.ttl_ms * 1000, now}
    else
      local remaining = limit - s.count
      if remaining < 0 then remaining = 0 end
      local ttl_ms = s.ttl_ms
      if ttl_ms < 1 then ttl_ms = 1 end
      out[d] = {0, limit, remaining, ttl_ms * 1000, ttl_ms * 1000, now}
    end
  end
end
for _, key in ipairs(keys) do
  local s = state[key]
  if not s.err and s.taken > 0 then
    redis.call('INCRBY', key, s.taken)
    if s.opened then redis.call('PEXPIRE', key, s.window_ms) end
  end
end
return out
