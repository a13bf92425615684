-- floodgate: the frame of the batch scripts that reply per decision (sliding_window_batch.lua,
-- sliding_log_batch.lua): each is put between this and batch_run.lua, after exact.lua. The
-- script defines `decide(g, n)` (the decision of n permits on limiter key g, from 1, in
-- order: its reply {allowed, limit, remaining, retry_after_us, reset_after_us}, or nil and an
-- error message) and `flush(g, s)` (writes what key g's state s holds unwritten, when
-- `s.dirty`), and keeps each key's state in `state[g]`; batch_run.lua runs the decisions.
-- Format (RedisBackend::eval_batch): KEYS: each limiter key's keys once (`per` each). ARGV:
-- per, the four shared arguments (the algorithm's; n's place holds the first n), n's slot
-- among them (from 1), the n's (one number when all are the same, else one per decision,
-- separated by spaces), the earliest deadline in us on the server's clock (0: none has one),
-- the deadlines, each as its distance from the earliest plus 1 (0: none), separated by spaces,
-- then, only when KEYS holds more than one limiter key, each decision's limiter key's index
-- (from 1), separated by spaces.
-- Reply: the server's time; five fields per decision ({allowed, limit, remaining,
-- retry_after_us, reset_after_us}; allowed = 2: past its deadline, nothing read or changed; 3:
-- an error, the message's index); the error messages.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local per = ARGV[1] + 0
local function int(x) return string.format('%d', x) end
local state = {}
