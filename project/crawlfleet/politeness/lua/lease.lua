-- Lease up to WANT slots of one key (GCRA: slots T = 1000 / rate ms apart, at most BURST of them
-- in the past after an idle spell, none before the cool-down ends, none beyond HORIZON ms ahead).
-- Counts OKS clean responses (and their LATN response times, LAT ms in all) first; at the end of
-- each WINDOW the key learns:
--   * the window's mean response time above LATF times the key's baseline (and SLOW_MS above
--     it): the target slows down before it bans; back off as a ban would, without a cool-down;
--   * a clean window that carried at least half its budget: its rate is clean (`good`). With no
--     ceiling seen the rate grows GROWTH times (slow start); with a ceiling but no clean rate
--     known before the window (a ban halved it), it grows back PROBE a window up to PRECISION
--     under the ceiling; with one (`bad`) far above, the next
--     probe tries halfway between (a binary search); within PRECISION of it, the key holds the
--     clean rate and, every probe gap, tries PROBE above it (a small additive probe). A clean
--     window at or above the ceiling forgets it: the site raised its limit, and the key grows
--     again, a quarter as fast as a key that never met a ban.
-- KEYS[3]: the namespace's rate history (`remember`).
-- ARGV[7..] = {want, horizon_ms, oks, window_ms, growth, probe, precision, lat_ms, latn, latf,
-- slow_ms, max_keys, backoff, probe_interval_ms}. Returns {granted, first slot - now (ms),
-- interval (ms), next ask - now (ms), rate, now}.
local WANT, HORIZON, OKS = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local WINDOW, GROWTH, PROBE = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local PRECISION, LAT, LATN = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
local LATF, SLOW_MS, MAX_KEYS = tonumber(ARGV[16]), tonumber(ARGV[17]), tonumber(ARGV[18])
local BACKOFF, INTERVAL = tonumber(ARGV[19]), tonumber(ARGV[20])
S.oks, S.lat, S.latn = S.oks + OKS, S.lat + LAT, S.latn + LATN
local ended = NOW - S.window >= WINDOW
local before = effective()
if ended then
  -- an idle key, or one held lower by Crawl-delay, learns nothing about its rate
  local capped = S.cap > 0 and S.cap < S.rate
  local loaded = not capped and S.oks >= 0.5 * S.rate * WINDOW / 1000
  local slow = false
  if S.latn >= 3 then
    local mean = S.lat / S.latn
    if S.base <= 0 or mean < S.base then
      S.base = mean
    elseif LATF > 0 and mean > LATF * S.base and mean - S.base >= SLOW_MS then
      slow = true
    else
      -- the baseline is the key's fast answers: it follows slower ones 1 % a window at most, so
      -- a site that slows under our load does not become its own baseline
      S.base = math.min(mean, S.base * 1.01)
    end
  end
  if slow and loaded then
    local drew = effective()
    S.rate = math.min(math.max(fall_back(drew, BACKOFF, PRECISION), MIN), MAX)
    S.probe = NOW + 2 * WINDOW
    S.learned, S.why = NOW, WHY.slow
  elseif loaded then
    local r = S.rate
    -- a key cut under a ceiling with no clean rate known below it (a ban or a slow-down halved
    -- it), or growing back from there: it grows back PROBE a window, up to PRECISION under it
    local regrow = S.bad > 0 and (S.good <= 0 or S.why == WHY.grow)
    if r > S.good then
      -- a probe that came through clean: the next one may come sooner
      if S.why == WHY.probe then S.gap = math.max(S.gap / 2, INTERVAL) end
      S.good, S.learned = r, NOW
    end
    if S.bad > 0 and S.good >= S.bad then
      -- clean at the old ceiling: the site raised its limit; find the new one
      S.bad, S.gap = 0, 0
    end
    if S.bad <= 0 then
      -- slow start; a key that met bans before (a ceiling it has just passed) grows gently
      local growth = GROWTH
      if S.bans > 0 then growth = 1 + (GROWTH - 1) / 4 end
      S.rate, S.why = r * growth, WHY.grow
    else
      local top = S.bad * (1 - PRECISION)
      if regrow and S.good < top then
        S.rate, S.why = math.min(r * (1 + PROBE), top), WHY.grow
      elseif NOW < S.probe then
        S.rate, S.why = S.good, WHY.hold
      elseif S.good < top then
        S.rate, S.why = (S.good + S.bad) / 2, WHY.probe
      else
        S.rate, S.why = S.good * (1 + PROBE), WHY.probe
        S.probe = NOW + math.max(S.gap, INTERVAL)
      end
    end
    S.rate = math.min(math.max(S.rate, MIN), MAX)
  elseif S.bad > 0 and S.good >= S.bad * (1 - PRECISION) then
    -- a key that knows its limit and comes back from an idle spell holds a probe interval
    -- before it probes above it again
    S.probe = math.max(S.probe, NOW + INTERVAL)
  end
  next_window()
  if effective() ~= before or S.why == WHY.slow and S.learned == NOW then
    remember(KEYS[3], S.why)
  end
end
if NEW then remember(KEYS[3], WHY.start) end
if ended or NEW then
  -- once a window per key and for each new key: the index forgets keys unused for the memory
  -- period (their hashes expired), and above MAX_KEYS the least recently used ones go with
  -- their state
  redis.call('ZREMRANGEBYSCORE', INDEX, '-inf', NOW - MEMORY)
  local over = redis.call('ZCARD', INDEX) - MAX_KEYS
  if over > 0 then
    local old = redis.call('ZRANGE', INDEX, 0, math.min(over, 100) - 1)
    for _, name in ipairs(old) do
      if name ~= SK then redis.call('DEL', name) end
      redis.call('ZREM', INDEX, name)
    end
  end
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
