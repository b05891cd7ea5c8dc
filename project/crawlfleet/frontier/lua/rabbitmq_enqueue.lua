-- ARGV[4..]: (dupefilter key or '' for dont_filter, argument, outbox id, outbox entry) per request.
-- Returns 1 (new: recorded in the outbox, to be published) or 0 (duplicate) per request.
local out = {}
for i = 4, #ARGV, 4 do
  if ARGV[i] == '' or check_and_add(ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('HSET', rabbitmq_outbox_of(W), ARGV[i + 2], ARGV[i + 3])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
