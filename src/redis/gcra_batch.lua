-- floodgate: a batch of GCRA decisions, decided in order as gcra.lua would decide them one call
-- after another at the same instant.
-- Tally format (see RedisBackend::eval_tally): the reply carries the server's time, each key's
-- TAT as first read here and the decisions refused past their deadline; the client replays the
-- decisions from it exactly as below (Gcra's replay).
-- KEYS: each limiter key's TAT once. ARGV: T (interval per permit) in us, capacity, D
-- (decisions), the earliest deadline in us on the server's clock (0: none has one); then D n's;
-- then D deadlines (0: none); then, only when KEYS holds more than one key, D indices into KEYS.
-- Reply: now_us; per key {error index (0: none), TAT (now if none), 0} as read (0, 0, 0: never
-- read); the number of decisions past their deadline, their indices (from 1); the error messages.
-- Each key is read once; its decisions are then worked out here and its TAT written once at the
-- end (SET ... PX, as one call would leave it).
-- Stored values are read with exact(): exact.lua, prepended to this script.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local earliest = tonumber(ARGV[4])
local horizon = now + capacity * interval
local check = earliest > 0 and now > earliest
local multi = #KEYS > 1

local function int(x) return string.format('%d', x) end

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
  end
end
for k, s in pairs(state) do
  if s.dirty then
    redis.call('SET', KEYS[k], int(s.tat), 'PX', int(math.ceil((s.tat - now) / 1000)))
  end
end
out[#out + 1] = #late
for _, i in ipairs(late) do out[#out + 1] = i end
for _, e in ipairs(errors) do out[#out + 1] = e end
return out
