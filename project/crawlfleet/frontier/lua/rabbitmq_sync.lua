-- ARGV[4] mode ('sync', 'claim' or 'release'), ARGV[5] messages this worker holds, ARGV[6]
-- ready messages in the broker (for 'claim'), ARGV[7] '1' to release the seeding flag,
-- ARGV[8..11] counts of committed outbox ids, failed entries, dead letters; then those values.
-- Returns {claimed, adopted outbox entries (id, entry, ...), others busy, seeding, paused,
--          outbox entries of everyone}.
local mode, held, queued = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local ndone, nfail, ndead = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local now = now_ms()
local mine = rabbitmq_outbox_of(W)
local i = 11
if ndone > 0 then redis.call('HDEL', mine, unpack(ARGV, i, i + ndone - 1)) end
i = i + ndone
for j = 1, nfail do redis.call('RPUSH', FAILED, ARGV[i]); i = i + 1 end
for j = 1, ndead do redis.call('RPUSH', DEADLETTER, ARGV[i]); i = i + 1 end
if ARGV[7] == '1' and redis.call('GET', SEEDING) == W then
  redis.call('DEL', SEEDING)
  redis.call('SET', SEEDED, W)  -- nobody runs the start requests again until the crawl finishes
end
-- adopt the outboxes of workers whose deadline passed, and forget them
local adopted = {}
for _, dead in ipairs(redis.call('ZRANGEBYSCORE', RABBITMQ_WORKERS, '-inf', now)) do
  if dead ~= W then
    local all = redis.call('HGETALL', rabbitmq_outbox_of(dead))
    for k = 1, #all, 2 do
      redis.call('HSET', mine, all[k], all[k + 1])
      adopted[#adopted + 1] = all[k]
      adopted[#adopted + 1] = all[k + 1]
    end
    redis.call('DEL', rabbitmq_outbox_of(dead))
    redis.call('ZREM', RABBITMQ_WORKERS, dead)
    redis.call('HDEL', RABBITMQ_BUSY, dead)
    if redis.call('GET', SEEDING) == dead then redis.call('DEL', SEEDING) end
  end
end
local claimed = 0
if mode == 'release' then
  redis.call('HDEL', RABBITMQ_BUSY, W)
  if redis.call('HLEN', mine) == 0 then
    redis.call('ZREM', RABBITMQ_WORKERS, W)
  end  -- else stay registered: once our deadline passes, another worker publishes our outbox
  if redis.call('GET', SEEDING) == W then redis.call('DEL', SEEDING) end
else
  if mode == 'claim' then
    local live = redis.call('ZCOUNT', RABBITMQ_WORKERS, now, '+inf')
    local others = live - (redis.call('ZSCORE', RABBITMQ_WORKERS, W) and 1 or 0)
    if queued == 0 and others == 0 and not redis.call('GET', SEEDING)
        and redis.call('EXISTS', SEEDED) == 0 then
      redis.call('SET', SEEDING, W)
      claimed = 1
    end
  end
  redis.call('ZADD', RABBITMQ_WORKERS, now + LEASE_MS, W)
  redis.call('HSET', RABBITMQ_BUSY, W, held)
end
local others_busy = 0
local all_busy = redis.call('HGETALL', RABBITMQ_BUSY)
for k = 1, #all_busy, 2 do
  if all_busy[k] ~= W then others_busy = others_busy + tonumber(all_busy[k + 1]) end
end
local unsent = 0
for _, w in ipairs(redis.call('ZRANGE', RABBITMQ_WORKERS, 0, -1)) do
  unsent = unsent + redis.call('HLEN', rabbitmq_outbox_of(w))
end
return {claimed, adopted, others_busy, redis.call('GET', SEEDING) or '',
        redis.call('EXISTS', PAUSED), unsent}
