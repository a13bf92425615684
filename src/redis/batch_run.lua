-- floodgate: runs a batch's decisions in order (see batch_frame.lua), each past its deadline
-- refused before anything is read (as the one-decision scripts refuse it), then writes what
-- the decisions left unwritten. A write that raises there (Redis out of memory) fails the
-- whole call: its decisions reach no caller, and what was written is only taken from the limit
-- (under-admission), never handed out twice.
local out = {now}
local errors = {}
local uniform_n = not ARGV[7]:find(' ', 1, true) and ARGV[7] + 0
local next_n = not uniform_n and ARGV[7]:gmatch('%d+')
-- Each decision's own deadline is needed only once the earliest has passed: until then none
-- has, and every decision is decided as one without.
local earliest = ARGV[8] + 0
local check = earliest > 0 and now > earliest
local next_g = #KEYS > per and ARGV[10]:gmatch('%d+')
local late = {2, 0, 0, 0, 0}
local d = 0
for distance in ARGV[9]:gmatch('%d+') do
  local g = next_g and next_g() + 0 or 1
  local n = next_n and next_n() + 0 or uniform_n
  local r = late
  if not (check and distance ~= '0' and now > earliest + distance - 1) then
    local ok, message
    ok, r, message = pcall(decide, g, n)
    if not ok then
      errors[#errors + 1] = type(r) == 'table' and r.err or tostring(r)
      r = {3, #errors, 0, 0, 0}
    elseif not r then
      errors[#errors + 1] = message
      r = {3, #errors, 0, 0, 0}
    end
  end
  for f = 1, 5 do out[1 + d * 5 + f] = r[f] end
  d = d + 1
end
for g, s in pairs(state) do
  if s.dirty then flush(g, s) end
end
for _, e in ipairs(errors) do out[#out + 1] = e end
return out
