-- Lease up to WANT slots of one key (GCRA: slots T = 1000 / rate ms apart, at most BURST of them
-- in the past after an idle spell, none before the cool-down ends, none beyond HORIZON ms ahead).
-- Counts OKS clean responses first and probes the rate up after a clean, loaded window.
-- ARGV[6..] = {want, horizon_ms, oks, window_ms, probe}.
-- Returns {granted, first slot - now (ms), interval (ms), next ask - now (ms), rate, now}.
local WANT, HORIZON, OKS = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local WINDOW, PROBE = tonumber(ARGV[9]), tonumber(ARGV[10])
S.oks = S.oks + OKS
if NOW - S.window >= WINDOW then
  -- probe only a window that carried at least half its budget at the adaptive rate itself (an
  -- idle key, or one held lower by Crawl-delay, learns nothing about it)
  local capped = S.cap > 0 and S.cap < S.rate
  if not capped and S.oks >= 0.5 * S.rate * WINDOW / 1000 then
    S.rate = math.min(S.rate + PROBE, MAX)
  end
  S.window, S.oks = NOW, 0
  -- once a window per key, the index forgets keys unused for a day (their hashes expired)
  redis.call('ZREMRANGEBYSCORE', INDEX, '-inf', NOW - 86400000)
end
local T = 1000 / effective()
local start = math.max(S.tat, NOW - (BURST - 1) * T)
if S.cool > NOW and S.cool > start then start = S.cool end
local granted = 0
if WANT > 0 and start <= NOW + HORIZON then
  granted = math.min(WANT, math.floor((NOW + HORIZON - start) / T) + 1)
  S.tat = start + granted * T
end
save()
redis.call('ZADD', INDEX, NOW, SK)
-- when to ask again: at the end of this lease, or when the next slot comes within the horizon
local ask = S.tat - NOW
if granted == 0 then ask = start - HORIZON - NOW end
return {num(granted), num(start - NOW), num(T), num(ask), num(effective()), num(NOW)}
