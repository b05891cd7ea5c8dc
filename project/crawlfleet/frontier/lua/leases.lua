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
