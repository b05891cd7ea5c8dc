local total = redis.call('ZCARD', KEYS[1])
if total == 0 then return false end
local expired = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
local valid = total - expired
if valid <= 0 then return false end
local index = expired + math.floor(tonumber(ARGV[2]) * valid)
if index >= total then index = total - 1 end
local user = redis.call('ZRANGE', KEYS[1], index, index)[1]
return redis.call('HGET', KEYS[2], user)
