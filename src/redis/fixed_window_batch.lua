-- floodgate: a batch of fixed-window decisions (anchored at the first request), decided in order
-- as fixed_window.lua would decide them one call after another at the same instant.
-- KEYS: each limiter key's counter once. ARGV: keys per limiter key (1); limit, window in ms,
-- (n: per decision), (unused); the slot of n (3); then three per decision: its key's index in
-- KEYS, n, deadline in us on the server's clock (0: none).
-- Reply: now_us, then five fields per decision as fixed_window.lua's ({2, ...}: past its
-- deadline, nothing changed; {3, i, ...}: error message i, after the fields).
-- Each key is read once; its decisions are then worked out here and written once at the end
-- (INCRBY of what they took, PEXPIRE if the window opened in this batch).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[2])
local window_ms = tonumber(ARGV[3])
local out = {now}
local errors = {}
local state = {}
local used = {}
local d = 1
local function put(a, b, c, e, f)
  out[d + 1] = a; out[d + 2] = b; out[d + 3] = c; out[d + 4] = e; out[d + 5] = f
  d = d + 5
end
for i = 7, #ARGV, 3 do
  local key = KEYS[tonumber(ARGV[i])]
  local n = tonumber(ARGV[i + 1])
  local deadline = tonumber(ARGV[i + 2])
  if deadline > 0 and now > deadline then
    put(2, 0, 0, 0, 0)
  else
    local s = state[key]
    if not s then
      local stored = redis.pcall('GET', key)
      if type(stored) == 'table' and stored.err then
        errors[#errors + 1] = stored.err
        s = {err = #errors}
      elseif stored and not tonumber(stored) then
        errors[#errors + 1] = 'floodgate: ' .. key .. ' does not hold a counter'
        s = {err = #errors}
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
        s = {count = count, ttl_ms = ttl_ms, taken = 0, opened = false}
      end
      state[key] = s
      used[#used + 1] = key
    end
    if s.err then
      put(3, s.err, 0, 0, 0)
    elseif s.count + n <= limit then
      if s.count == 0 then
        -- INCRBY from nothing opens the window: PEXPIRE follows it.
        s.opened = true
        s.ttl_ms = window_ms
      end
      s.count = s.count + n
      s.taken = s.taken + n
      put(1, limit, limit - s.count, 0, s.ttl_ms * 1000)
    else
      local remaining = limit - s.count
      if remaining < 0 then remaining = 0 end
      local ttl_ms = s.ttl_ms
      -- PTTL rounds down: under 1 ms left reads as 0; never announce a retry of nothing.
      if ttl_ms < 1 then ttl_ms = 1 end
      put(0, limit, remaining, ttl_ms * 1000, ttl_ms * 1000)
    end
  end
end
for _, key in ipairs(used) do
  local s = state[key]
  if not s.err and s.taken > 0 then
    redis.call('INCRBY', key, s.taken)
    if s.opened then redis.call('PEXPIRE', key, window_ms) end
  end
end
for _, e in ipairs(errors) do out[#out + 1] = e end
return out
