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
local state = {}
each_decision(function(k, n)
  local s = state[k]
  if not s then
    local key = KEYS[k]
    local stored = redis.pcall('GET', key)
    if type(stored) == 'table' and stored.err then
      errors[#errors + 1] = stored.err
      s = {err = true}
      out[k * 3 - 1] = #errors
    elseif stored and not exact(stored) then
      errors[#errors + 1] = 'floodgate: ' .. key .. ' does not hold a time'
      s = {err = true}
      out[k * 3 - 1] = #errors
    else
      -- stored: the key exists; checked: its TTL was looked at (or it was written here).
      s = {tat = stored and exact(stored) or now, stored = stored and true or false, dirty = false, checked = false}
      out[k * 3] = s.tat
    end
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
    elseif s.stored and not s.checked then
      -- As gcra.lua: a key found without a TTL is given one (or removed if full again).
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
end)
for k, s in pairs(state) do
  if s.dirty then
    redis.call('SET', KEYS[k], int(s.tat), 'PX', int(math.ceil((s.tat - now) / 1000)))
  end
end
return tally_reply()
