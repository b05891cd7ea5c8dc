local QK, SEQ, SK = KEYS[1], KEYS[2], KEYS[3]
local P, W, LEASE_MS, SK_SET = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local WORKERS = P .. ':workers'
local SEEDING = P .. ':seeding'
local PAUSED = P .. ':paused'
local STATS = P .. ':stats'
local function leases_of(w) return P .. ':leases:' .. w end
local function stat(name, n)
  if n ~= 0 then
    redis.call('HINCRBY', STATS, name, n)
    redis.call('HINCRBY', STATS .. ':' .. W, name, n)
  end
end
local function start_len()
  if SK_SET then return redis.call('SCARD', SK) end
  return redis.call('LLEN', SK)
end
