local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
local delay = tonumber(ARGV[4]) * (2 ^ (n - 1))
local cap = tonumber(ARGV[5])
if delay > cap then delay = cap end
redis.call('ZADD', KEYS[2], tonumber(ARGV[3]) + delay, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
return {n, tostring(delay)}
