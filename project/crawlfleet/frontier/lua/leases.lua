-- Needs the queue functions (q_requeue, q_len), so it is pasted after the queue's LUA.
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
-- Subscribers of worker w's liveness channel (``sharded``: '1' on a Redis Cluster).
local function alive_subscribers(w, sharded)
  local kind = sharded == '1' and 'SHARDNUMSUB' or 'NUMSUB'
  return tonumber(redis.call('PUBSUB', kind, alive_of(w))[2])
end
-- Whether this worker may reap others for want of a subscriber: it declared a subscription,
-- holds it now, and has held it (`alive_since`, written by its heartbeats) for longer than its
-- own bound. A Redis restart, failover or CLIENT KILL drops every subscription at once; this
-- gate leaves every live worker a heartbeat to subscribe again before anyone is reaped.
local function may_reap_unsubscribed(now)
  local me = redis.call('HMGET', worker_of(W), 'alive_ms', 'alive_sharded', 'alive_since')
  local bound, since = tonumber(me[1]) or 0, tonumber(me[3]) or 0
  return bound > 0 and since > 0 and now - since > bound and alive_subscribers(W, me[2]) > 0
end
-- Workers whose deadline has not passed but who are dead all the same: a worker that declared a
-- liveness subscription (worker hash `alive_ms` > 0, see claim.lua) whose channel has no
-- subscriber and whose last heartbeat is older than `alive_ms`. A SIGKILLed process's connection
-- closes, so its subscription goes; a frozen one (SIGSTOP) keeps its socket and its leases. Only
-- workers silent (no round trip) for more than a fifth of the deadline span (one heartbeat
-- interval by default) are looked at, so a reap costs nothing more while everyone talks.
local function unsubscribed(now)
  local out, allowed = {}, nil
  local quiet = now + LEASE_MS - math.floor(LEASE_MS / 5)
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', WORKERS, '(' .. now, quiet)) do
    if w ~= W then
      local h = redis.call('HMGET', worker_of(w), 'heartbeat', 'alive_ms', 'alive_sharded')
      local bound = tonumber(h[2]) or 0
      if bound > 0 and now - (tonumber(h[1]) or now) > bound
          and alive_subscribers(w, h[3]) == 0 then
        if allowed == nil then allowed = may_reap_unsubscribed(now) end
        if not allowed then return {} end
        out[#out + 1] = w
      end
    end
  end
  return out
end
local function reap(now)
  local dead = redis.call('ZRANGEBYSCORE', WORKERS, '-inf', now)
  for _, w in ipairs(unsubscribed(now)) do dead[#dead + 1] = w end
  local n = 0
  for _, w in ipairs(dead) do
    if w ~= W then
      n = n + requeue_all(w)
      redis.call('ZREM', WORKERS, w)
      if redis.call('GET', SEEDING) == w then redis.call('DEL', SEEDING) end
    end
  end
  stat('scheduler/requeued', n)
  return n
end
-- The crawl as this worker needs to see it: {queued, leased by others, leased by me, start URLs,
-- seeder, paused}. Others' leases only matter once the queue is empty (a non-empty queue keeps
-- everyone busy anyway), so they are counted (one HLEN per registered worker) only then, and
-- reported as 0 otherwise. ``paused`` may be passed in by a script that already read it.
local function cluster(paused)
  local queued, others = q_len(), 0
  if queued == 0 then
    for _, w in ipairs(redis.call('ZRANGE', WORKERS, 0, -1)) do
      if w ~= W then others = others + redis.call('HLEN', leases_of(w)) end
    end
  end
  return {queued, others, redis.call('HLEN', leases_of(W)), start_len(),
          redis.call('GET', SEEDING) or '', paused or redis.call('EXISTS', PAUSED)}
end
