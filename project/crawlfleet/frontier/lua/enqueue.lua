-- ARGV[5..]: dupefilter key ('' = dont_filter, '!dead' = dead letter), argument, payload, priority,
-- site (the politeness key a keyed queue files it under; '' for the other queues).
-- Returns per request 1 (queued), 0 (duplicate) or 2 (dead letter), and counts them in the
-- crawl's statistics in the same step (one HINCRBY per kind and batch: a SIGKILL loses none).
local out = {}
for i = 5, #ARGV, 5 do
  local dkey, darg = ARGV[i], ARGV[i + 1]
  if dkey == '!dead' then
    redis.call('RPUSH', DEADLETTER, darg)
    out[#out + 1] = 2
  elseif dkey == '' or check_and_add(dkey, darg) == 1 then
    q_push(ARGV[i + 2], ARGV[i + 3], ARGV[i + 4])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
q_flush()
count_decisions(out)
return out
