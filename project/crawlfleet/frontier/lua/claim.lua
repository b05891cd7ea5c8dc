-- Register, reap the dead, and claim seeding if the whole crawl is empty, nobody else lives and
-- no worker ran the start requests to their end since the crawl last finished (SEEDED: a worker
-- that missed its deadline under load looks dead, and its crawl empty, for a moment).
-- ARGV[5] = worker info (JSON), ARGV[6] = how long (ms) after its last heartbeat this worker
-- may be reaped once its liveness channel has no subscriber (0: only at its deadline), ARGV[7] =
-- '1' when that channel is sharded (Redis Cluster); the worker subscribed just before.
-- Returns {claimed, cluster()}.
local now = now_ms()
reap(now)
redis.call('ZADD', WORKERS, now + LEASE_MS, W)
local wk = worker_of(W)
local alive_ms = tonumber(ARGV[6]) or 0
redis.call('HSET', wk, 'info', ARGV[5], 'heartbeat', now, 'started', now, 'leases', 0,
           'alive_ms', alive_ms, 'alive_sharded', ARGV[7] or '0',
           'alive_since', alive_ms > 0 and now or 0)
redis.call('PEXPIRE', wk, 86400000)
local st = cluster()
local live = redis.call('ZCOUNT', WORKERS, now, '+inf')
if st[1] == 0 and st[2] == 0 and st[5] == '' and live == 1
    and redis.call('EXISTS', SEEDED) == 0 then
  redis.call('SET', SEEDING, W)
  return {1, st}
end
return {0, st}
