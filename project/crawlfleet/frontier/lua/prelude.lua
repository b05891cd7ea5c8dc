local QK, SEQ, SK = KEYS[1], KEYS[2], KEYS[3]
local LEASE_MS, SK_SET = tonumber(ARGV[3]), ARGV[4] == '1'
local function stat(name, n)
  if n ~= 0 then
    redis.call('HINCRBY', STATS, name, n)
    redis.call('HINCRBY', worker_stats_of(W), name, n)
  end
end
local function start_len()
  if SK_SET then return redis.call('SCARD', SK) end
  return redis.call('LLEN', SK)
end
