-- floodgate: prepended (after exact.lua) to the tally batch scripts of the fixed window
-- (anchored and aligned) and GCRA: the frame they share. Tally format (see
-- RedisBackend::eval_tally):
-- KEYS: each limiter key once. ARGV: two shared arguments (read by each script), D (decisions),
-- the earliest deadline in us on the server's clock (0: none has one); then the n's: one number
-- when every decision asks the same n, else the D n's separated by spaces; then the D deadlines,
-- each as its distance from the earliest plus 1 (0: none; a distance takes fewer digits than a
-- deadline), separated by spaces, in one argument; then, only when KEYS holds more than one key,
-- the D indices into KEYS, separated by spaces, in one argument. (An argument costs the server
-- more than a decision's arithmetic: Redis makes an object of it and Lua interns it as a
-- string, about 860 instructions. Lists are split here only when read: the deadlines only once
-- the earliest has passed.)
-- Reply (tally_reply): now_us; per key three integers as the script sets them in out (the index
-- in errors of the error its read raised, 0: none; then its state as first read; 0, 0, 0:
-- never read); the number of decisions past their deadline, their indices (from 1); the error
-- messages.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
-- Built at its size for one key (the common batch), with the late count's slot: the table
-- constructor sizes it once, where filling it slot by slot regrows it (rehash) on the way.
local out
if #KEYS == 1 then
  out = {now, 0, 0, 0, 0}
else
  out = {now}
  for k = 1, #KEYS do out[k * 3 - 1] = 0; out[k * 3] = 0; out[k * 3 + 1] = 0 end
end
local errors = {}
local late = {}

-- Calls decide(k, n) for each decision in order (k: its key's index in KEYS, n: its permits),
-- except those past their deadline, which are only counted late. Only when the earliest
-- deadline has passed is each decision's own looked at.
local function each_decision(decide)
  local count = ARGV[3] + 0
  local earliest = ARGV[4] + 0
  local check = earliest > 0 and now > earliest
  local ns = ARGV[5]
  -- One n for all (no space), else the next of the list for each decision.
  local n = not ns:find(' ', 1, true) and ns + 0
  local next_n = not n and ns:gmatch('%d+')
  local next_deadline = check and ARGV[6]:gmatch('%d+')
  local next_k = #KEYS > 1 and ARGV[7]:gmatch('%d+')
  for i = 1, count do
    if next_n then n = next_n() + 0 end
    local k = next_k and next_k() + 0 or 1
    local deadline = next_deadline and next_deadline() + 0 or 0
    if deadline > 0 then deadline = earliest + deadline - 1 end
    if deadline > 0 and now > deadline then
      late[#late + 1] = i
    else
      decide(k, n)
    end
  end
end

-- D and n when the batch's decisions are uniform: at least one, on one key, one n of at least 1,
-- and the earliest deadline not passed (so none is); else nil. On one key, decisions of one n are
-- allowed while they fit and denied after (a denial changes nothing), so such a batch is
-- decided without a step per decision: the first min(D, floor(room / n)) are allowed.
local function uniform()
  local earliest = ARGV[4] + 0
  if #KEYS > 1 or (earliest > 0 and now > earliest) or ARGV[5]:find(' ', 1, true) then
    return nil
  end
  local n = ARGV[5] + 0
  local d = ARGV[3] + 0
  -- (The client sends no empty batch; the loop decides one as nothing.)
  if n < 1 or d < 1 then return nil end
  return d, n
end

-- The reply: out, then the decisions past their deadline, then the error messages.
local function tally_reply()
  out[#KEYS * 3 + 2] = #late
  for _, i in ipairs(late) do out[#out + 1] = i end
  for _, e in ipairs(errors) do out[#out + 1] = e end
  return out
end
