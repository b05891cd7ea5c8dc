-- A ban signal for one key (a ban status, a ban marker, Retry-After): the rate falls back below
-- the rate that drew it (fall_back in state.lua) —
-- at most once per HOLDOFF ms (responses to requests sent before the first backoff are the same
-- ban); no slot before Retry-After, and for a proxied key without Retry-After a cool-down of
-- COOL ms. The rate that drew it becomes the key's ceiling (`bad`). A ban during the search
-- (well above the last clean rate) lets the search go on after the rest and a window; a failed
-- probe near the ceiling doubles the pause before the next probe, up to 16 probe intervals;
-- any other ban (a rate known clean, or one growing back) waits one pause.
-- ARGV[7..] = {backoff, holdoff_ms, retry_after_ms, cool_ms, precision, probe_interval_ms,
-- window_ms}. KEYS[3]: the namespace's recent bans (sorted set "<n> <state hash>" -> ms; for
-- status), kept ten minutes and at most 1000 entries; KEYS[4] its rate history (`remember`).
-- Returns {rate, cool-down end - now (ms)}.
local BACKOFF, HOLDOFF = tonumber(ARGV[7]), tonumber(ARGV[8])
local RETRY, COOL = tonumber(ARGV[9]), tonumber(ARGV[10])
-- the rest: the site's Retry-After, else the proxied pair's cool-down (0 for a direct key)
local REST = RETRY
if REST <= 0 then REST = COOL end
local PRECISION, INTERVAL, WINDOW = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
if NOW - S.banned >= HOLDOFF then
  local drew = effective()
  local searching = S.good > 0 and S.good < drew * (1 - PRECISION)
  local probed = S.why == WHY.probe and not searching
  S.rate = fall_back(drew, BACKOFF, PRECISION)
  S.rate = math.min(math.max(S.rate, MIN), MAX)
  if searching then
    S.probe = NOW + REST + WINDOW
  elseif probed then
    S.gap = math.min(math.max(S.gap * 2, INTERVAL), 16 * INTERVAL)
    S.probe = NOW + REST + S.gap
  else
    S.probe = NOW + REST + math.max(S.gap, INTERVAL)
  end
  S.banned, S.learned, S.why = NOW, NOW, WHY.ban
  remember(KEYS[4], WHY.ban)
end
S.bans = S.bans + 1
next_window()
S.tat = math.max(S.tat, NOW + RETRY)
-- a proxied key rests until the site's Retry-After, or COOL ms when it says nothing
if COOL > 0 then S.cool = math.max(S.cool, NOW + REST) end
save()
redis.call('ZADD', INDEX, NOW, SK)
local BANS = KEYS[3]
redis.call('ZADD', BANS, NOW, S.bans .. ' ' .. SK)
redis.call('ZREMRANGEBYSCORE', BANS, '-inf', NOW - 600000)
redis.call('ZREMRANGEBYRANK', BANS, 0, -1001)
redis.call('PEXPIRE', BANS, 86400000)
return {num(effective()), num(math.max(S.cool - NOW, 0))}
