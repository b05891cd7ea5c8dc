-- The shared part of the politeness scripts: the clock, one key's state and its rate.
-- KEYS = {state hash, index sorted set}; ARGV = {now_ms ('' = Redis TIME), rate0, min_rate,
-- max_rate (0: no ceiling), burst, memory_ms (how long an unused key's state is kept), ...}. Times are milliseconds on the scripts' clock; numbers
-- are written and returned as strings (Redis would truncate a Lua number to an integer).
--
-- What a key has learned (crawlfleet.politeness.budget explains the controller): `good` the
-- highest rate that carried a clean, loaded window since the last ban at or below it (0: none),
-- `bad` the rate of the last ban (0: no ceiling seen), `probe` when a rate above `good` may be
-- tried, `gap` the pause between probes near the ceiling, `lat`/`latn` the window's response
-- times (ms, summed) and `base` the key's baseline response time, `learned` when `good` or
-- `bad` last changed and `why` what changed the rate last (WHY below); `pok` and `pwin` the
-- clean responses and length (ms) of the window before this one (for status).
local SK, INDEX = KEYS[1], KEYS[2]
local NOW = tonumber(ARGV[1]) or now_ms()
local RATE0, MIN, MAX, BURST = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local MEMORY = tonumber(ARGV[6])
if MAX <= 0 then MAX = 1e9 end
local FIELDS = {'tat', 'rate', 'cap', 'cool', 'window', 'oks', 'bans', 'banned',
  'good', 'bad', 'probe', 'gap', 'lat', 'latn', 'base', 'learned', 'why', 'pok', 'pwin'}
-- why the rate last changed: 0 the start rate, 1 a clean window grew it, 2 a ban backed it off,
-- 3 the target slowed down, 4 a probe above the last clean rate, 5 held at the last clean rate
local WHY = {start = 0, grow = 1, ban = 2, slow = 3, probe = 4, hold = 5}
local S = {}
local NEW  -- the key had no state: it starts here
do
  local got = redis.call('HMGET', SK, unpack(FIELDS))
  -- never used, never banned: as if long ago
  local NEVER = {tat = -1e15, banned = -1e15}
  for i, name in ipairs(FIELDS) do S[name] = tonumber(got[i]) or NEVER[name] or 0 end
  NEW = S.rate <= 0
  if NEW then S.rate, S.window = RATE0, NOW end
  S.rate = math.min(math.max(S.rate, MIN), MAX)
end
-- the rate slots are handed out at: the adaptive rate, capped by robots.txt's Crawl-delay
local function effective()
  if S.cap > 0 then return math.min(S.rate, S.cap) end
  return S.rate
end
local function num(v) return string.format('%.17g', v) end
-- a ban (or a slow-down) drawn at rate DREW: it becomes the ceiling, and the rate falls back
-- below it. To the last clean rate when one is known below; when DREW itself had carried a
-- clean window — the site lowered its limit, or that window was luck (a late request in a
-- one-second window) — the clean rate is forgotten and the key holds just under DREW
-- (`precision` below); with no clean rate known (a second ban there) by `backoff`.
local function fall_back(drew, backoff, precision)
  local rate
  if S.good >= drew * (1 - 1e-9) then
    S.good, rate = 0, drew * (1 - precision)
  elseif S.good > 0 then
    rate = S.good
  else
    rate = drew * backoff
  end
  S.bad = drew
  return rate
end
-- how the rate moved, for the dashboard's chart: KEYS[HIST] of the calling script
local function remember(hist, why)
  redis.call('RPUSH', hist, string.format('%d %.6g %d %s', NOW, effective(), why, SK))
  redis.call('LTRIM', hist, -5000, -1)
  redis.call('PEXPIRE', hist, MEMORY)
end
-- a window ends: keep its count and length, start the next
local function next_window()
  S.pok, S.pwin = S.oks, NOW - S.window
  S.window, S.oks, S.lat, S.latn = NOW, 0, 0, 0
end
local function save()
  local flat = {}
  for _, name in ipairs(FIELDS) do
    flat[#flat + 1] = name
    flat[#flat + 1] = num(S[name])
  end
  redis.call('HSET', SK, unpack(flat))
  redis.call('PEXPIRE', SK, MEMORY)
end
