-- The shared part of the politeness scripts: the clock, one key's state and its rate.
-- KEYS = {state hash, index sorted set}; ARGV = {now_ms ('' = Redis TIME), rate0, min_rate,
-- max_rate, burst, ...}. Times are milliseconds on the scripts' clock; numbers are written and
-- returned as strings (Redis would truncate a Lua number to an integer).
local SK, INDEX = KEYS[1], KEYS[2]
local NOW = tonumber(ARGV[1]) or now_ms()
local RATE0, MIN, MAX, BURST = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local FIELDS = {'tat', 'rate', 'cap', 'cool', 'window', 'oks', 'bans', 'banned'}
local S = {}
do
  local got = redis.call('HMGET', SK, unpack(FIELDS))
  -- never used, never banned: as if long ago
  local NEVER = {tat = -1e15, banned = -1e15}
  for i, name in ipairs(FIELDS) do S[name] = tonumber(got[i]) or NEVER[name] or 0 end
  if S.rate <= 0 then S.rate, S.window = RATE0, NOW end
  S.rate = math.min(math.max(S.rate, MIN), MAX)
end
-- the rate slots are handed out at: the adaptive rate, capped by robots.txt's Crawl-delay
local function effective()
  if S.cap > 0 then return math.min(S.rate, S.cap) end
  return S.rate
end
local function num(v) return string.format('%.17g', v) end
local function save()
  local flat = {}
  for _, name in ipairs(FIELDS) do
    flat[#flat + 1] = name
    flat[#flat + 1] = num(S[name])
  end
  redis.call('HSET', SK, unpack(flat))
  redis.call('PEXPIRE', SK, 86400000)
end
