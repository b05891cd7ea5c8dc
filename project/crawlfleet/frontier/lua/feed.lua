-- Start URLs: an entry is removed from the start_urls key and turned into a queue entry (or a
-- dead letter) in the same step, so a crash between reading and pushing loses nothing, and two
-- workers reading the same batch cannot both push it.
-- ARGV[5..]: raw entry, dupefilter key (or '!dead'), argument, payload, priority, site. Returns
-- per entry what ENQUEUE returns, or -1 when another worker took the entry first; counted in the
-- crawl's statistics in the same step, as ENQUEUE does.
local out = {}
for i = 5, #ARGV, 6 do
  local removed
  if SK_SET then removed = redis.call('SREM', SK, ARGV[i])
  else removed = redis.call('LREM', SK, 1, ARGV[i]) end
  local res = -1
  if removed == 1 then
    local dkey, darg = ARGV[i + 1], ARGV[i + 2]
    if dkey == '!dead' then
      redis.call('RPUSH', DEADLETTER, darg)
      res = 2
    elseif dkey == '' or check_and_add(dkey, darg) == 1 then
      q_push(ARGV[i + 3], ARGV[i + 4], ARGV[i + 5])
      res = 1
    else
      res = 0
    end
  end
  out[#out + 1] = res
end
q_flush()
count_decisions(out)
return out
