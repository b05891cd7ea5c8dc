local QK, SEQ, SK = KEYS[1], KEYS[2], KEYS[3]
local LEASE_MS, SK_SET = tonumber(ARGV[3]), ARGV[4] == '1'
local function stat(name, n)
  if n ~= 0 then
    redis.call('HINCRBY', STATS, name, n)
    redis.call('HINCRBY', worker_stats_of(W), name, n)
  end
end
-- An enqueue's or a feed's decisions (1 queued, 0 duplicate, 2 dead letter; -1, another
-- worker's entry, not counted) counted in the crawl's statistics: one HINCRBY per kind.
local function count_decisions(out)
  local n = {[0] = 0, [1] = 0, [2] = 0}
  for _, r in ipairs(out) do
    if n[r] then n[r] = n[r] + 1 end
  end
  stat('scheduler/enqueued', n[1])
  stat('dupefilter/filtered', n[0])
  stat('scheduler/deadletter', n[2])
end
local function start_len()
  if SK_SET then return redis.call('SCARD', SK) end
  return redis.call('LLEN', SK)
end
