-- Register, reap the dead, and claim seeding if the whole crawl is empty and nobody else lives.
-- ARGV[5] = worker info (JSON). Returns {claimed, cluster()}.
local now = now_ms()
reap(now)
redis.call('ZADD', WORKERS, now + LEASE_MS, W)
local wk = worker_of(W)
redis.call('HSET', wk, 'info', ARGV[5], 'heartbeat', now, 'started', now, 'leases', 0)
redis.call('PEXPIRE', wk, 86400000)
local st = cluster()
local live = redis.call('ZCOUNT', WORKERS, now, '+inf')
if st[1] == 0 and st[2] == 0 and st[5] == '' and live == 1 then
  redis.call('SET', SEEDING, W)
  return {1, st}
end
return {0, st}
