-- floodgate: a batch of aligned fixed-window decisions, decided in order as
-- fixed_window_aligned.lua would decide them one call after another at the same instant.
-- Tally format (tally.lua, prepended with exact.lua): the reply carries the server's time, each
-- key's window index and count as first read here, and the decisions refused past their
-- deadline; the client replays the decisions from it exactly as below (FixedWindow's aligned
-- replay).
-- KEYS: each limiter key's hash {i = window index, c = count}. ARGV: limit, window in us, then
-- the frame's (tally.lua).
-- Per key in the reply: {error index (0: none), window index, count} as read; the error
-- messages: a key of another type, or a field that is not an exact integer (see read_stored).
-- Each key is read once; its decisions are then worked out here and written once at the end.
-- Stored values are read with read_stored(): exact.lua, count.lua and aligned.lua.
local function int(x) return string.format('%d', x) end
local limit = ARGV[1] + 0
local window = ARGV[2] + 0

local current = math.floor(now / window)
if current * window > now then current = current - 1 elseif (current + 1) * window <= now then current = current + 1 end

-- Reads key k into out: its state {index, count, taken, denied} (the current window and 0 for
-- a missing or older one), or {err = true} (the error recorded; nothing to write) if it holds
-- no counter.
local function read(k)
  local stored = redis.pcall('HMGET', KEYS[k], 'i', 'c')
  local err = stored.err
  local corrupt, stored_index, stored_count
  if not err then
    corrupt, stored_index, stored_count = read_stored(stored, window)
    if corrupt then
      err = 'floodgate: ' .. KEYS[k] .. ' does not hold a counter'
    end
  end
  if err then
    errors[#errors + 1] = err
    out[k * 3 - 1] = #errors
    return {err = true, index = current}
  end
  local s = {index = current, count = 0, taken = false, denied = false}
  if stored_index and stored_count then
    if stored_index == current then
      s.count = stored_count
    elseif stored_index > current then
      -- Written when the server's clock read later (a failover, a clock step): never go back.
      s.index = stored_index
      s.count = stored_count
    end
  end
  out[k * 3] = s.index
  out[k * 3 + 1] = s.count
  return s
end

local state = {}
local d, n = uniform()
if d then
  -- One key, one n (tally.lua's uniform()): the first floor(room / n) decisions, at most d.
  local s = read(1)
  state[1] = s
  if not s.err then
    local allowed = math.floor((limit - s.count) / n)
    if allowed > d then allowed = d end
    if allowed > 0 then
      s.count = s.count + allowed * n
      s.taken = true
    end
    s.denied = allowed < d
  end
else
  each_decision(function(k, n)
    local s = state[k]
    if not s then
      s = read(k)
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
  end)
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
return tally_reply()
