local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('RPUSH', KEYS[1], now .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[4]), -1)
redis.call('PEXPIRE', KEYS[1], 86400000)
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[5]))
redis.call('PEXPIRE', KEYS[2], 86400000)
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('HSET', KEYS[4], 'project', ARGV[6], 'version', ARGV[7])
end
redis.call('DEL', KEYS[3])
if #ARGV > 7 then
  redis.call('HSET', KEYS[3], unpack(ARGV, 8, #ARGV))
  redis.call('PEXPIRE', KEYS[3], 86400000)
end
return now
