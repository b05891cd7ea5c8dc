"""The frontier's Lua scripts: every scheduler operation is one atomic Redis round trip.

Scripts are assembled from three parts: a prelude (key names, clock, stats, leases, reaping),
the queue class's ``LUA`` (``q_push``/``q_pop``/``q_requeue``/``q_len``) and the dupefilter's
``LUA_CHECK_AND_ADD`` (``check_and_add(key, arg)``). Redis ≥ 6.2 is required (``LPOP`` with a
count, ``ZPOPMIN``), and ``TIME`` inside scripts (effects replication, the default since 5.0):
lease deadlines use the Redis server's clock, so workers' clocks may disagree.

Every script receives ``KEYS = {queue, seq, start_urls}`` and
``ARGV = {prefix, worker, lease_ms, start_urls_is_set, ...}``. Per-worker keys are derived from
the prefix (``<spider>``); key layout: README, frontier section. Reaping touches other
workers' lease keys, so the frontier needs a single Redis (or one Cluster shard), not a cluster.
"""

from __future__ import annotations

PRELUDE = """
local QK, SEQ, SK = KEYS[1], KEYS[2], KEYS[3]
local P, W, LEASE_MS, SK_SET = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local WORKERS = P .. ':workers'
local SEEDING = P .. ':seeding'
local PAUSED = P .. ':paused'
local STATS = P .. ':stats'
local function leases_of(w) return P .. ':leases:' .. w end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
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
"""

# Needs the queue functions (q_requeue, q_len), so it is pasted after the queue's LUA.
LEASES = """
local function requeue_all(w)
  local lk = leases_of(w)
  local all = redis.call('HGETALL', lk)
  local items = {}
  for i = 1, #all, 2 do items[#items + 1] = {tonumber(all[i]), all[i + 1]} end
  -- newest first, so that LPUSH leaves the oldest lease at the head of a list queue
  table.sort(items, function(a, b) return a[1] > b[1] end)
  for _, item in ipairs(items) do q_requeue(item[2]) end
  redis.call('DEL', lk)
  return #items
end
local function reap(now)
  local n = 0
  for _, dead in ipairs(redis.call('ZRANGEBYSCORE', WORKERS, '-inf', now)) do
    if dead ~= W then
      n = n + requeue_all(dead)
      redis.call('ZREM', WORKERS, dead)
      if redis.call('GET', SEEDING) == dead then redis.call('DEL', SEEDING) end
    end
  end
  stat('scheduler/requeued', n)
  return n
end
local function cluster()
  local others, mine = 0, 0
  for _, w in ipairs(redis.call('ZRANGE', WORKERS, 0, -1)) do
    local n = redis.call('HLEN', leases_of(w))
    if w == W then mine = n else others = others + n end
  end
  return {q_len(), others, mine, start_len(), redis.call('GET', SEEDING) or '',
          redis.call('EXISTS', PAUSED)}
end
"""

# ARGV[5..]: dupefilter key ('' = dont_filter, '!dead' = dead letter), argument, payload, priority.
# Returns per request 1 (queued), 0 (duplicate) or 2 (dead letter); the caller counts the stats
# and sends them with its next SYNC (stats are written in batches, not per request).
ENQUEUE = """
local out = {}
for i = 5, #ARGV, 4 do
  local dkey, darg = ARGV[i], ARGV[i + 1]
  if dkey == '!dead' then
    redis.call('RPUSH', P .. ':deadletter', darg)
    out[#out + 1] = 2
  elseif dkey == '' or check_and_add(dkey, darg) == 1 then
    q_push(ARGV[i + 2], ARGV[i + 3])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""

# Start URLs: an entry is removed from the start_urls key and turned into a queue entry (or a
# dead letter) in the same step, so a crash between reading and pushing loses nothing, and two
# workers reading the same batch cannot both push it.
# ARGV[5..]: raw entry, dupefilter key (or '!dead'), argument, payload, priority. Returns per
# entry what ENQUEUE returns, or -1 when another worker took the entry first.
FEED = """
local out = {}
for i = 5, #ARGV, 5 do
  local removed
  if SK_SET then removed = redis.call('SREM', SK, ARGV[i])
  else removed = redis.call('LREM', SK, 1, ARGV[i]) end
  local res = -1
  if removed == 1 then
    local dkey, darg = ARGV[i + 1], ARGV[i + 2]
    if dkey == '!dead' then
      redis.call('RPUSH', P .. ':deadletter', darg)
      res = 2
    elseif dkey == '' or check_and_add(dkey, darg) == 1 then
      q_push(ARGV[i + 3], ARGV[i + 4])
      res = 1
    else
      res = 0
    end
  end
  out[#out + 1] = res
end
return out
"""

# The worker's one periodic call. ARGV[5] mode: 'pop' (ack + pop; no pop while
# <spider>:paused exists, see `crawlfleet pause`), 'beat' (ack + reap + info),
# 'release' (ack, then give every remaining lease back and unregister). ARGV[6] = n to pop,
# ARGV[7] = '1' to release the seeding flag, ARGV[8] = worker info (JSON, for 'beat'),
# ARGV[9..12] = counts of acks, failures, dead letters and stats, then the acked lease ids, then
# (lease id, failed-entry JSON) pairs, (lease id, dead-letter JSON) pairs and (stat, delta)
# pairs counted by the worker since its last SYNC.
SYNC = """
local mode, npop = ARGV[5], tonumber(ARGV[6])
local nack, nfail, ndead = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local nstat = tonumber(ARGV[12])
local now = now_ms()
local lk = leases_of(W)
local reaped = 0
if mode ~= 'release' then
  reaped = redis.call('ZADD', WORKERS, now + LEASE_MS, W)
end
local i = 13
if nack > 0 then
  stat('scheduler/acked', redis.call('HDEL', lk, unpack(ARGV, i, i + nack - 1)))
end
i = i + nack
local failed = 0
for j = 1, nfail do
  if redis.call('HDEL', lk, ARGV[i]) == 1 then
    redis.call('RPUSH', P .. ':failed', ARGV[i + 1])
    failed = failed + 1
  end
  i = i + 2
end
stat('scheduler/failed', failed)
local dead = 0
for j = 1, ndead do
  if redis.call('HDEL', lk, ARGV[i]) == 1 then
    redis.call('RPUSH', P .. ':deadletter', ARGV[i + 1])
    dead = dead + 1
  end
  i = i + 2
end
stat('scheduler/deadletter', dead)
for j = 1, nstat do
  stat(ARGV[i], tonumber(ARGV[i + 1]))
  i = i + 2
end
if ARGV[7] == '1' and redis.call('GET', SEEDING) == W then redis.call('DEL', SEEDING) end
local requeued = 0
local popped = {}
if mode == 'beat' then
  requeued = reap(now)
  local wk = P .. ':worker:' .. W
  redis.call('HSET', wk, 'info', ARGV[8], 'heartbeat', now, 'leases', redis.call('HLEN', lk))
  redis.call('PEXPIRE', wk, 86400000)
  redis.call('PEXPIRE', STATS .. ':' .. W, 86400000)
elseif mode == 'release' then
  local n = requeue_all(W)
  stat('scheduler/requeued', n)
  requeued = n
  redis.call('ZREM', WORKERS, W)
  if redis.call('GET', SEEDING) == W then redis.call('DEL', SEEDING) end
  redis.call('HSET', P .. ':worker:' .. W, 'stopped', now, 'leases', 0)
elseif npop > 0 and redis.call('EXISTS', PAUSED) == 0 then
  local got = q_pop(npop)
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
return {reaped, requeued, popped, cluster()}
"""

# Register, reap the dead, and claim seeding if the whole crawl is empty and nobody else lives.
# ARGV[5] = worker info (JSON). Returns {claimed, cluster()}.
CLAIM = """
local now = now_ms()
reap(now)
redis.call('ZADD', WORKERS, now + LEASE_MS, W)
local wk = P .. ':worker:' .. W
redis.call('HSET', wk, 'info', ARGV[5], 'heartbeat', now, 'started', now, 'leases', 0)
redis.call('PEXPIRE', wk, 86400000)
local st = cluster()
local live = redis.call('ZCOUNT', WORKERS, now, '+inf')
if st[1] == 0 and st[2] == 0 and st[5] == '' and live == 1 then
  redis.call('SET', SEEDING, W)
  return {1, st}
end
return {0, st}
"""


# crawlfleet requeue-failed: move failed entries back into the queue, bypassing the dupefilter.
# ARGV[5] = n, then n triples (raw failed entry, payload or '' for a dead letter, priority or
# dead-letter JSON). Returns -1 when the head of the failed list changed meanwhile (retry).
REQUEUE_FAILED = """
local FK = P .. ':failed'
local n = tonumber(ARGV[5])
local head = redis.call('LRANGE', FK, 0, n - 1)
if #head ~= n then return -1 end
for j = 1, n do
  if head[j] ~= ARGV[3 + 3 * j] then return -1 end
end
redis.call('LTRIM', FK, n, -1)
local pushed, dead = 0, 0
for j = 1, n do
  local b = 3 + 3 * j
  if ARGV[b + 1] == '' then
    redis.call('RPUSH', P .. ':deadletter', ARGV[b + 2])
    dead = dead + 1
  else
    q_push(ARGV[b + 1], ARGV[b + 2])
    pushed = pushed + 1
  end
end
stat('scheduler/requeued_failed', pushed)
stat('scheduler/deadletter', dead)
return {pushed, dead}
"""


def build(queue_lua: str, dupefilter_lua: str, body: str) -> str:
    """One script: prelude, queue functions, lease functions, dupefilter function, body."""
    return "\n".join((PRELUDE, queue_lua, LEASES, dupefilter_lua, body))
