-- floodgate: a batch of GCRA decisions, decided in order as gcra.lua would decide them one call
-- after another at the same instant.
-- KEYS[d]: decision d's TAT. ARGV[1]: keys per decision (1); then five per decision: T (interval
-- per permit) in us, capacity, n, (unused), deadline in us on the server's clock (0: none).
-- Reply: one entry per decision, as gcra.lua's ({2, ...}: past its deadline, nothing changed),
-- or {3, message} for a key that does not hold a time.
-- Each key is read once; its decisions are then worked out here and its TAT written once at the
-- end (SET ... PX, as one call would leave it).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function int(x) return string.format('%d', x) end

local keys = {}
local state = {}
local out = {}
local d = 0
for i = 2, #ARGV, 5 do
  d = d + 1
  local key = KEYS[d]
  local interval = tonumber(ARGV[i])
  local capacity = tonumber(ARGV[i + 1])
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
        s = {err = 'floodgate: ' .. key .. ' does not hold a time'}
      else
        -- stored: the key exists; checked: its TTL was looked at (or it was written here).
        s = {tat = tonumber(stored) or now, stored = stored and true or false, dirty = false, checked = false}
      end
      state[key] = s
      keys[#keys + 1] = key
    end
    if s.err then
      out[d] = {3, s.err}
    else
      local horizon = now + capacity * interval
      local base = math.max(s.tat, now)
      local new_tat = base + n * interval
      if new_tat <= horizon then
        s.tat = new_tat
        s.stored = true
        s.dirty = true
        s.checked = true
        out[d] = {1, capacity, math.floor((horizon - new_tat) / interval), 0, new_tat - now, now}
      else
        if s.stored and not s.checked then
          s.checked = true
          if redis.call('PTTL', key) == -1 then
            if base > now then
              redis.call('PEXPIRE', key, int(math.ceil((base - now) / 1000)))
            else
              redis.call('DEL', key)
              s.stored = false
              s.tat = now
            end
          end
        end
        out[d] = {0, capacity, math.floor((horizon - base) / interval), new_tat - horizon, base - now, now}
      end
    end
  end
end
for _, key in ipairs(keys) do
  local s = state[key]
  if not s.err and s.dirty then
    redis.call('SET', key, int(s.tat), 'PX', int(math.ceil((s.tat - now) / 1000)))
  end
end
return out
