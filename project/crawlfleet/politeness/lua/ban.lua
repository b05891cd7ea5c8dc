-- A ban signal for one key: back the rate off (at most once per HOLDOFF ms: responses to requests
-- sent before the first backoff are the same ban), no slot before Retry-After, and for a proxied
-- key a cool-down of COOL ms. ARGV[6..] = {backoff, holdoff_ms, retry_after_ms, cool_ms}.
-- KEYS[3]: the namespace's recent bans (sorted set "<n> <state hash>" -> ms; for status), kept
-- ten minutes and at most 1000 entries. Returns {rate, cool-down end - now (ms)}.
local BACKOFF, HOLDOFF = tonumber(ARGV[6]), tonumber(ARGV[7])
local RETRY, COOL = tonumber(ARGV[8]), tonumber(ARGV[9])
if NOW - S.banned >= HOLDOFF then
  S.rate = math.max(S.rate * BACKOFF, MIN)
  S.banned = NOW
end
S.bans = S.bans + 1
S.window, S.oks = NOW, 0
S.tat = math.max(S.tat, NOW + RETRY)
if COOL > 0 then S.cool = math.max(S.cool, NOW + COOL) end
save()
redis.call('ZADD', INDEX, NOW, SK)
local BANS = KEYS[3]
redis.call('ZADD', BANS, NOW, S.bans .. ' ' .. SK)
redis.call('ZREMRANGEBYSCORE', BANS, '-inf', NOW - 600000)
redis.call('ZREMRANGEBYRANK', BANS, 0, -1001)
redis.call('PEXPIRE', BANS, 86400000)
return {num(effective()), num(math.max(S.cool - NOW, 0))}
