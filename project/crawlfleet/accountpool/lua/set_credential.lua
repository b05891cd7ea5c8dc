if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 0 then return 0 end
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local ok, rec = pcall(cjson.decode, old)
  if ok and type(rec) == 'table' and rec['th'] then redis.call('HDEL', KEYS[3], rec['th']) end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[1])
return 1
