-- The worker's one periodic call. ARGV[5] mode: 'pop' (ack + pop, reaping first when nothing is
-- queued; no pop while <spider>:paused exists, see `crawlfleet pause`), 'beat' (ack + reap + info),
-- 'release' (ack, then give every remaining lease back and unregister). ARGV[6] = n to pop,
-- ARGV[7] = '1' to release the seeding flag, ARGV[8] = worker info (JSON, for 'beat'),
-- ARGV[9..13] = counts of acks, failures, dead letters, stats and sites to skip, then the acked
-- lease ids, then (lease id, failed-entry JSON) pairs, (lease id, dead-letter JSON) pairs and
-- (stat, delta) pairs counted by the worker since its last SYNC, then the sites the pop should
-- skip (a keyed queue's sites whose requests the worker already holds and cannot send yet).
-- Returns {reaped (1: our deadline had passed), requeued, popped, cluster(), subscribed}.
local mode, npop = ARGV[5], tonumber(ARGV[6])
local nack, nfail, ndead = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local nstat, nskip = tonumber(ARGV[12]), tonumber(ARGV[13])
local now = now_ms()
local lk = leases_of(W)
local reaped = 0
if mode ~= 'release' then
  reaped = redis.call('ZADD', WORKERS, now + LEASE_MS, W)
end
local i = 14
if nack > 0 then
  stat('scheduler/acked', redis.call('HDEL', lk, unpack(ARGV, i, i + nack - 1)))
end
i = i + nack
-- n (lease id, entry) pairs from ARGV[i]: each lease still held ends, its entry goes to list.
local function settle(n, list, name)
  local moved = 0
  for j = 1, n do
    if redis.call('HDEL', lk, ARGV[i]) == 1 then
      redis.call('RPUSH', list, ARGV[i + 1])
      moved = moved + 1
    end
    i = i + 2
  end
  stat(name, moved)
end
settle(nfail, FAILED, 'scheduler/failed')
settle(ndead, DEADLETTER, 'scheduler/deadletter')
for j = 1, nstat do
  stat(ARGV[i], tonumber(ARGV[i + 1]))
  i = i + 2
end
local skip = {}
for j = 1, nskip do
  skip[ARGV[i]] = true
  i = i + 1
end
if ARGV[7] == '1' and redis.call('GET', SEEDING) == W then
  redis.call('DEL', SEEDING)
  redis.call('SET', SEEDED, W)
end
local requeued = 0
local popped = {}
local paused
-- on a beat, the subscribers of this worker's liveness channel (-1: it declared none), so that it
-- subscribes again when a restart, failover or CLIENT KILL dropped its subscription
local subscribed = -1
if mode == 'beat' then
  requeued = reap(now)
  local wk = worker_of(W)
  -- alive_since: since when this worker's subscription stands (0: it has none)
  local alive = redis.call('HMGET', wk, 'alive_ms', 'alive_sharded', 'alive_since')
  local since = tonumber(alive[3]) or 0
  if (tonumber(alive[1]) or 0) > 0 then
    subscribed = alive_subscribers(W, alive[2])
    if subscribed == 0 then since = 0 elseif since == 0 then since = now end
  end
  redis.call('HSET', wk, 'info', ARGV[8], 'heartbeat', now, 'leases', redis.call('HLEN', lk),
             'alive_since', since)
  redis.call('PEXPIRE', wk, 86400000)
  redis.call('PEXPIRE', worker_stats_of(W), 86400000)
elseif mode == 'release' then
  local n = requeue_all(W)
  stat('scheduler/requeued', n)
  requeued = n
  redis.call('ZREM', WORKERS, W)
  if redis.call('GET', SEEDING) == W then redis.call('DEL', SEEDING) end
  redis.call('HSET', worker_of(W), 'stopped', now, 'leases', 0)
elseif npop > 0 then
  paused = redis.call('EXISTS', PAUSED)
end
if mode == 'pop' and npop > 0 and paused == 0 then
  -- An idle worker (nothing queued) reaps too, so a dead worker's leases come back at its
  -- deadline rather than at the next heartbeat after it.
  if q_len() == 0 then requeued = reap(now) end
  local got = q_pop(npop, skip, nskip)
  local n = #got / 2
  if n > 0 then
    local id = redis.call('INCRBY', SEQ, n) - n
    for j = 1, #got, 2 do
      id = id + 1
      redis.call('HSET', lk, id, got[j])
      popped[#popped + 1] = tostring(id)
      popped[#popped + 1] = got[j + 1]
    end
    stat('scheduler/dequeued', n)
  end
end
return {reaped, requeued, popped, cluster(paused), subscribed}
