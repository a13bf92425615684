-- floodgate: a batch of GCRA decisions, decided in order as gcra.lua would decide them one call
-- after another at the same instant.
-- Tally format (tally.lua, prepended with exact.lua): the reply carries the server's time, each
-- key's TAT as first read here and the decisions refused past their deadline; the client
-- replays the decisions from it exactly as below (Gcra's replay).
-- KEYS: each limiter key's TAT. ARGV: T (interval per permit) in us, capacity, then the frame's
-- (tally.lua).
-- Per key in the reply: {error index (0: none), TAT (now if none), 0} as read.
-- Each key is read once; its decisions are then worked out here and its TAT written once at the
-- end (SET ... PX, as one call would leave it).
-- Stored values are read with exact(): exact.lua.
local function int(x) return string.format('%d', x) end
local interval = ARGV[1] + 0
local capacity = ARGV[2] + 0
local horizon = now + capacity * interval

-- Reads key k into out: its state {tat (now if none), stored (the key exists), dirty (to be
-- written), checked (its TTL was looked at, or it is to be written)}, or {err = true} (the
-- error recorded) if it holds no time.
local function read(k)
  local key = KEYS[k]
  local stored = redis.pcall('GET', key)
  if type(stored) == 'table' and stored.err then
    errors[#errors + 1] = stored.err
    out[k * 3 - 1] = #errors
    return {err = true}
  end
  -- Read once: exact() is a pattern match and a conversion.
  local tat = now
  if stored then
    tat = exact(stored)
    if not tat then
      errors[#errors + 1] = 'floodgate: ' .. key .. ' does not hold a time'
      out[k * 3 - 1] = #errors
      return {err = true}
    end
  end
  out[k * 3] = tat
  return {tat = tat, stored = stored and true or false, dirty = false, checked = false}
end

-- A denial of s (key k) at base = max(tat, now), as gcra.lua's: a key found without a TTL is
-- given one (or removed if full again), once.
local function denied(k, s, base)
  if s.stored and not s.checked then
    s.checked = true
    if redis.call('PTTL', KEYS[k]) == -1 then
      if base > now then
        redis.call('PEXPIRE', KEYS[k], int(math.ceil((base - now) / 1000)))
      else
        redis.call('DEL', KEYS[k])
        s.stored = false
        s.tat = now
      end
    end
  end
end

local state = {}
local d, n = uniform()
if d then
  -- One key, one n (tally.lua's uniform()): each allowed decision moves the TAT on by n*T from
  -- max(tat, now), so the first floor((horizon - base) / (n*T)) are allowed, at most d.
  local s = read(1)
  state[1] = s
  if not s.err then
    local base = math.max(s.tat, now)
    local allowed = math.floor((horizon - base) / (n * interval))
    if allowed > d then allowed = d end
    if allowed > 0 then
      s.tat = base + allowed * n * interval
      s.dirty = true
    else
      denied(1, s, base)
    end
  end
else
  each_decision(function(k, n)
    local s = state[k]
    if not s then
      s = read(k)
      state[k] = s
    end
    if not s.err then
      local base = math.max(s.tat, now)
      local new_tat = base + n * interval
      if new_tat <= horizon then
        s.tat = new_tat
        s.stored = true
        s.dirty = true
        s.checked = true
      else
        denied(k, s, base)
      end
    end
  end)
end
for k, s in pairs(state) do
  if s.dirty then
    redis.call('SET', KEYS[k], int(s.tat), 'PX', int(math.ceil((s.tat - now) / 1000)))
  end
end
return tally_reply()
