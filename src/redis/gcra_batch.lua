-- floodgate: a batch of GCRA decisions, decided in order as gcra.lua would decide them one call
-- after another at the same instant.
-- KEYS: each limiter key's TAT once. ARGV: keys per limiter key (1); T (interval per permit) in
-- us, capacity, (n: per decision), (unused); the slot of n (3); then three per decision: its
-- key's index in KEYS, n, deadline in us on the server's clock (0: none).
-- Reply: now_us, then five fields per decision as gcra.lua's ({2, ...}: past its deadline,
-- nothing changed; {3, i, ...}: error message i, after the fields).
-- Each key is read once; its decisions are then worked out here and its TAT written once at the
-- end (SET ... PX, as one call would leave it).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local horizon = now + capacity * interval

local function int(x) return string.format('%d', x) end

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
        errors[#errors + 1] = 'floodgate: ' .. key .. ' does not hold a time'
        s = {err = #errors}
      else
        -- stored: the key exists; checked: its TTL was looked at (or it was written here).
        s = {tat = tonumber(stored) or now, stored = stored and true or false, dirty = false, checked = false}
      end
      state[key] = s
      used[#used + 1] = key
    end
    if s.err then
      put(3, s.err, 0, 0, 0)
    else
      local base = math.max(s.tat, now)
      local new_tat = base + n * interval
      if new_tat <= horizon then
        s.tat = new_tat
        s.stored = true
        s.dirty = true
        s.checked = true
        put(1, capacity, math.floor((horizon - new_tat) / interval), 0, new_tat - now)
      else
        if s.stored and not s.checked then
          -- As gcra.lua: a key found without a TTL is given one (or removed if full again).
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
        put(0, capacity, math.floor((horizon - base) / interval), new_tat - horizon, base - now)
      end
    end
  end
end
for _, key in ipairs(used) do
  local s = state[key]
  if not s.err and s.dirty then
    redis.call('SET', key, int(s.tat), 'PX', int(math.ceil((s.tat - now) / 1000)))
  end
end
for _, e in ipairs(errors) do out[#out + 1] = e end
return out
