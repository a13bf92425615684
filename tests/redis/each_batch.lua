-- floodgate tests: the definition the batch scripts that reply per decision
-- (src/redis/sliding_window_batch.lua, sliding_log_batch.lua) are tested against: a
-- one-decision script made `local function decide(KEYS, ARGV, t)` (its own TIME call taken
-- out; tests/redis/batch_scripts.rs assembles it), run once per decision, in order, with the
-- server's TIME read once for the call (as if the decisions arrived together). Until those
-- batch scripts, the crate sent this. Format (RedisBackend::eval_batch):
-- KEYS: each limiter key's keys once (`per` each). ARGV: per, the four shared arguments, the
-- slot of n + 1, the n's (one number when all are the same, else one per decision, separated
-- by spaces), the earliest deadline in us on the server's clock (0: none has one), the
-- deadlines, each as its distance from the earliest plus 1 (0: none; a distance takes fewer
-- digits than a deadline), separated by spaces, then, only when KEYS holds more than one
-- limiter key, each decision's limiter key's index (from 1), separated by spaces.
-- Reply: the server's time; five fields per decision (decide's reply without the time; a
-- decision that raised an error: 3, the error's index in the messages); the error messages.
local t = redis.call('TIME')
-- TIME's two fields and the shared arguments as numbers, once for the batch (decide reads
-- each by arithmetic, `ARGV[1] + 0`, which on a number converts nothing): a string's
-- conversion is a strtod, about 500 instructions, and decide made it once per decision. The
-- script run this way (the sliding window's; the sliding log has a batch script of its own)
-- uses its arguments only as numbers.
t = {t[1] + 0, t[2] + 0}
local now = t[1] * 1000000 + t[2]
local per = ARGV[1] + 0
local slot = ARGV[6] + 0
local shared = {}
for i = 1, 4 do
  -- The slot of n is a placeholder (each decision's n goes there): not converted.
  if i ~= slot then shared[i] = ARGV[i + 1] + 0 end
end
local out = {now}
local errors = {}
local d = 0
local n = not ARGV[7]:find(' ', 1, true) and ARGV[7] + 0
local next_n = not n and ARGV[7]:gmatch('%d+')
-- Each decision's own deadline is needed only once the earliest has passed: until then none
-- has, and every decision is decided as one without (0).
local earliest = ARGV[8] + 0
local check = earliest > 0 and now > earliest
local next_g = #KEYS > per and ARGV[10]:gmatch('%d+')
for distance in ARGV[9]:gmatch('%d+') do
  local g = next_g and next_g() - 1 or 0
  local keys = {}
  for j = 1, per do keys[j] = KEYS[g * per + j] end
  local deadline = 0
  if check and distance ~= '0' then deadline = earliest + distance - 1 end
  local argv = {shared[1], shared[2], shared[3], shared[4], deadline}
  argv[slot] = next_n and next_n() + 0 or n
  -- The deadline also follows n: the sliding log's script reads three arguments, then the
  -- deadline (ARGV[4], over its unused fourth shared argument); the window's reads it at 5.
  argv[slot + 1] = deadline
  local ok, r = pcall(decide, keys, argv, t)
  if type(r) == 'table' and r.err then errors[#errors + 1] = r.err; r = {3, #errors, 0, 0, 0}
  elseif not ok then errors[#errors + 1] = tostring(r); r = {3, #errors, 0, 0, 0} end
  for f = 1, 5 do out[1 + d * 5 + f] = r[f] end
  d = d + 1
end
for _, e in ipairs(errors) do out[#out + 1] = e end
return out
