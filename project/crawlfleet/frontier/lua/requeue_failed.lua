-- crawlfleet requeue-failed: move failed entries back into the queue, bypassing the dupefilter.
-- ARGV[5] = n, then n quadruples (raw failed entry, payload or '' for a dead letter, priority or
-- dead-letter JSON, site). Returns -1 when the head of the failed list changed meanwhile (retry).
local n = tonumber(ARGV[5])
local head = redis.call('LRANGE', FAILED, 0, n - 1)
if #head ~= n then return -1 end
for j = 1, n do
  if head[j] ~= ARGV[2 + 4 * j] then return -1 end
end
redis.call('LTRIM', FAILED, n, -1)
local pushed, dead = 0, 0
for j = 1, n do
  local b = 2 + 4 * j
  if ARGV[b + 1] == '' then
    redis.call('RPUSH', DEADLETTER, ARGV[b + 2])
    dead = dead + 1
  else
    q_push(ARGV[b + 1], ARGV[b + 2], ARGV[b + 3])
    pushed = pushed + 1
  end
end
q_flush()
stat('scheduler/requeued_failed', pushed)
stat('scheduler/deadletter', dead)
return {pushed, dead}
