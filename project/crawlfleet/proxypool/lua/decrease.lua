local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return -1 end
local new = tonumber(score) - tonumber(ARGV[2])
if new <= 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', new, ARGV[1])
return new
