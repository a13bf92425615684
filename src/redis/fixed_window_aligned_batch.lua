-- floodgate: a batch of aligned fixed-window decisions, decided in order as
-- fixed_window_aligned.lua would decide them one call after another at the same instant.
-- Tally format (see RedisBackend::eval_tally): the reply carries the server's time, each key's
-- window index and count as first read here, and the decisions refused past their deadline;
-- the client replays the decisions from it exactly as below (FixedWindow's aligned replay).
-- KEYS: each limiter key's hash {i = window index, c = count} once. ARGV: limit, window in us,
-- D (decisions), the earliest deadline in us on the server's clock (0: none has one); then D
-- n's; then D deadlines (0: none); then, only when KEYS holds more than one key, D indices
-- into KEYS.
-- Reply: now_us; per key {error index (0: none), window index, count} as read (0, 0, 0: never
-- read); the number of decisions past their deadline, their indices (from 1); the error
-- messages (a key of another type, or a field that is not an exact integer: see corrupt).
-- Each key is read once; its decisions are then worked out here and written once at the end.
-- Stored values are read with exact() and corrupt(): exact.lua, prepended to this script.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local earliest = tonumber(ARGV[4])
local check = earliest > 0 and now > earliest
local multi = #KEYS > 1

local function int(x) return string.format('%d', x) end

local current = math.floor(now / window)
if current * window > now then current = current - 1 elseif (current + 1) * window <= now then current = current + 1 end

local out = {now}
for k = 1, #KEYS do out[k * 3 - 1] = 0; out[k * 3] = 0; out[k * 3 + 1] = 0 end
local late = {}
local errors = {}
local state = {}
for i = 1, count do
  local arg = ARGV[4 + i]
  local n = arg == '1' and 1 or tonumber(arg)
  local k = multi and tonumber(ARGV[4 + 2 * count + i]) or 1
  local deadline = check and tonumber(ARGV[4 + count + i]) or 0
  if deadline > 0 and now > deadline then
    late[#late + 1] = i
  else
    local s = state[k]
    if not s then
      local stored = redis.pcall('HMGET', KEYS[k], 'i', 'c')
      s = {index = current, count = 0, taken = false, denied = false}
      local err = stored.err
      if not err and corrupt(stored, window) then
        err = 'floodgate: ' .. KEYS[k] .. ' does not hold a counter'
      end
      if err then
        errors[#errors + 1] = err
        s.err = true
        out[k * 3 - 1] = #errors
        stored = {}
      end
      local stored_index = exact(stored[1])
      local stored_count = exact(stored[2])
      if s.err then
        -- Its decisions fail with the error.
      elseif stored_index and stored_count then
        if stored_index == current then
          s.count = stored_count
        elseif stored_index > current then
          -- Written when the server's clock read later (a failover, a clock step): never go back.
          s.index = stored_index
          s.count = stored_count
        end
      end
      if not s.err then
        out[k * 3] = s.index
        out[k * 3 + 1] = s.count
      end
      state[k] = s
    end
    if s.err then
      -- Decided by the client as the error.
    elseif s.count + n <= limit then
      s.count = s.count + n
      s.taken = true
    else
      s.denied = true
    end
  end
end
for k, s in pairs(state) do
  local window_end = (s.index + 1) * window
  if s.taken then
    redis.call('HSET', KEYS[k], 'i', int(s.index), 'c', int(s.count))
    redis.call('PEXPIREAT', KEYS[k], int(window_end / 1000))
  elseif s.denied and redis.call('PTTL', KEYS[k]) == -1 then
    redis.call('PEXPIREAT', KEYS[k], int(window_end / 1000))
  end
end
out[#out + 1] = #late
for _, i in ipairs(late) do out[#out + 1] = i end
for _, e in ipairs(errors) do out[#out + 1] = e end
return out
